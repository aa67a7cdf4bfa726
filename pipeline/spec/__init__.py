"""A pipeline's spec, written by its owner: schema, key, transform and mergeable aggregations.

`parse` turns a TOML spec into a validated, content-addressed `PipelineSpec` without Spark;
`aggregations` says how each output is computed per micro-batch on Spark and merged; `oracle`
runs a spec as one Spark batch job and, for tests, micro-batch by micro-batch. The format's
reference is docs/reference/pipeline-spec.md.
"""
