"""A pipeline's spec run on Spark: mergeable aggregations, the rows a transform yields, and
the equality oracle.

The spec itself (its format, checks and content hash) is `shared/spec/`, which needs no Spark;
`aggregations` says how each output is computed per micro-batch on Spark and merged; `oracle`
runs a spec as one Spark batch job and, for tests, micro-batch by micro-batch. The format's
reference is docs/reference/pipeline-spec.md.
"""
