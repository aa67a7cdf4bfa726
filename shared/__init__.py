"""What the coordinator, its client and the pipeline share, and nothing else: the clock
protocol and the real clock, the error hierarchy, key routing, checkpoint naming, TLS
contexts, free local ports, the package version and the pipeline spec format (`spec/`). It
imports no other Ripple package, so every package may import it without a cycle
(pyproject.toml's import contracts hold it to that)."""
