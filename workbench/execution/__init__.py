"""Running notebooks: the papermill engine, the private Jupyter kernel and its launcher, the exit
shortcut a kernel takes, and the editable work copy of a finished run."""
