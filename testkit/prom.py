"""Prometheus text exposition read back into samples, for the rigs and tests that read figures."""

from __future__ import annotations

import re

__all__ = ["Samples", "parse", "value"]

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")


def parse(text: str) -> Samples:
    out: Samples = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        assert match, line
        name, labels, value = match.groups()
        pairs = frozenset(re.findall(r'(\w+)="([^"]*)"', labels or ""))
        out[(name, pairs)] = float(value)
    return out


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))
