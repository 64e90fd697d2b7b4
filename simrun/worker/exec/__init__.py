"""``simrun-exec``: runs the command of one unsplit task from a job file (`main`): the argv
of the command template (`argv`), the job and result files (`spec`), and the run of the
command's process group, measured and bounded (`run`)."""
