"""A pipeline's spec as its owner writes it, parsed and validated without Spark.

`parse` turns a TOML spec into a validated, content-addressed `PipelineSpec` (`model`), the
record schema's Spark DDL read by `ddl` and the row transform compiled from the spec's own
source by `transform`. It lives in `shared` so that whoever must refuse a bad spec (the
coordinator at create, the command line before it sends one) can without importing the
pipeline package or Spark; how a spec runs on Spark is `pipeline/spec/`. The format's
reference is docs/reference/pipeline-spec.md.
"""
