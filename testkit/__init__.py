"""What the tests and the benchmarks both run against Ripple: clusters of real node
processes, the pipeline rig, scripted workers, processes tracked by PID and bounded waits.

Not product code (no product package imports it) and no test itself: it imports neither
`tests` nor `bench`, so a benchmark never depends on a test module.
"""
