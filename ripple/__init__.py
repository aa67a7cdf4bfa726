"""The composition root: the `ripple` command and the local demo. The only package that
imports both the coordinator and the pipeline (neither imports the other, nor this)."""
