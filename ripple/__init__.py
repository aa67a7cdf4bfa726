"""The composition root: the `ripple` command, `ripple up` and its supervisor, the command
lines that start coordinators and workers, and the local demo. The only package that imports
both the coordinator and the pipeline (neither imports the other, nor this)."""
