"""What the command line, the Python API and the Editor share: load task types, `prepare`
a workflow, its `plans`, `follow` its run (an embedded session starts in `simrun.local`)."""
