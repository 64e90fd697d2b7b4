"""What the command line, the Python API and the Editor do with a workflow, below all three:
load task types, prepare a workflow (`prepare`), plan and forecast it (`plans`), follow
its run (`follow`). Starting an embedded session is `simrun.local.start`."""
