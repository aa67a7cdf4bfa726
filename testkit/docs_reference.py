"""The docs pages made from the code: the configuration reference, the metrics reference, and
the benchmark tables inside docs/benchmarks.md.

Owns how each is rendered; the code owns what they say. A setting's help is the comment
written above its field (or after it, on its line) in the class that declares it; a metric's
help is the help string the code gives Prometheus; a benchmark's table is its committed
`bench/results/<name>.json`. The invariant: what is committed under docs/ equals `render()`
of the current code, so a key or a metric without help, or a documented one that is gone,
fails tests/unit/test_docs_reference.py. Regenerate with

    python -m testkit.docs_reference --write
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import importlib
import inspect
import io
import json
import math
import re
import sys
import textwrap
import tokenize
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "REGENERATE",
    "ROOT",
    "MetricDoc",
    "config_page",
    "metrics",
    "metrics_page",
    "render",
    "with_bench_tables",
]

ROOT = Path(__file__).resolve().parent.parent
REGENERATE = "python -m testkit.docs_reference --write"
CONFIG_PAGE = Path("docs/reference/configuration.md")
METRICS_PAGE = Path("docs/reference/metrics.md")
BENCH_PAGE = Path("docs/benchmarks.md")
RESULTS_DIR = Path("bench/results")
# The product packages whose modules may define metrics: every one is scanned, so a new
# metrics module needs no entry here.
METRIC_PACKAGES = ("coordinator", "replication", "pipeline", "shared")
BANNER = (
    "<!-- Generated from the code by `{cmd}`; tests/unit/test_docs_reference.py fails when "
    "it differs. Edit the code's comments and help strings, not this page. -->"
)


class UndocumentedError(Exception):
    """The code declares something the reference cannot describe (no help text, a name it
    cannot read): the message names it and where to fix it."""


# -- settings: the comment above each field ---------------------------------------------------


def field_help(cls: type) -> dict[str, str]:
    """Each annotated field of `cls` -> the comment block right above it plus any comment at
    the end of its line, joined into one paragraph ("" when it has neither)."""
    source = textwrap.dedent(inspect.getsource(cls))
    lines = source.splitlines()
    full_line: dict[int, str] = {}
    trailing: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            row, col = tok.start
            text = tok.string.lstrip("#").strip()
            if lines[row - 1][:col].strip():
                trailing[row] = text
            else:
                full_line[row] = text
    classdef = ast.parse(source).body[0]
    assert isinstance(classdef, ast.ClassDef), cls
    out: dict[str, str] = {}
    for stmt in classdef.body:
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
            continue
        above: list[str] = []
        row = stmt.lineno - 1
        while row in full_line:
            above.insert(0, full_line[row])
            row -= 1
        parts = [*above, *([trailing[stmt.lineno]] if stmt.lineno in trailing else [])]
        out[stmt.target.id] = " ".join(p for p in parts if p)
    return out


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if value is None:
        return "unset"
    return repr(value)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _described(cls: type, names: Iterable[str]) -> dict[str, str]:
    """Each of `names` -> its help, from the class that declares it (`cls` or a base)."""
    helps: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if dataclasses.is_dataclass(klass):
            helps.update({k: v for k, v in field_help(klass).items() if v or k not in helps})
    missing = [n for n in names if not helps.get(n)]
    if missing:
        where = f"{cls.__module__}.{cls.__qualname__}"
        raise UndocumentedError(
            f"{where}: no comment above (or after) {missing}; write what each one does there"
        )
    return helps


def _docstring(module: Any) -> str:
    return inspect.cleandoc(module.__doc__ or "")


def config_page() -> str:
    from coordinator import config as cfg
    from coordinator import config_file
    from pipeline import settings as worker
    from ripple.cli import build_parser

    fields = [f for f in dataclasses.fields(cfg.ClusterConfig) if f.name != "nodes"]
    keys = [f.name for f in fields]
    assert keys == list(config_file.SCALAR_KEYS), "the file's keys are ClusterConfig's fields"
    helps = _described(cfg.ClusterConfig, keys)
    effective = cfg.ClusterConfig()
    out = [
        "# Configuration reference",
        "",
        BANNER.format(cmd=REGENERATE),
        "",
        "Every key of the cluster file and every setting of a worker, with its default, as",
        "the code declares them. How to run a cluster with them: [operations.md]"
        "(../operations.md).",
        "",
        "## The cluster file",
        "",
        f"From `{cfg.__name__}` (`ClusterConfig`):",
        "",
        _docstring(cfg),
        "",
        "| Key | Type | Default | Meaning |",
        "|---|---|---|---|",
    ]
    for f in fields:
        default = f.default
        shown = getattr(effective, f.name)
        if isinstance(default, float) and math.isnan(default):
            text = f"derived: {_toml(shown)}"
        elif shown != default:
            text = f"`{_toml(default)}` (derived: {_toml(shown)})"
        else:
            text = f"`{_toml(default)}`"
        out.append(f"| `{f.name}` | {f.type} | {text} | {_cell(helps[f.name])} |")
    node_keys = sorted(
        config_file.NODE_KEYS, key=[f.name for f in dataclasses.fields(cfg.NodeSpec)].index
    )
    node_help = _described(cfg.NodeSpec, node_keys)
    out += [
        "",
        "## `[[nodes]]`",
        "",
        "One table per node of the initial voter set (`NodeSpec`); from the file only.",
        "",
        "| Key | Meaning |",
        "|---|---|",
        *(f"| `{k}` | {_cell(node_help[k])} |" for k in node_keys),
    ]
    flags = _worker_flags(build_parser())
    wfields = dataclasses.fields(worker.WorkerSettings)
    whelp = _described(worker.WorkerSettings, [f.name for f in wfields])
    out += [
        "",
        "## The worker",
        "",
        f"From `{worker.__name__}` (`WorkerSettings`), set by `ripple worker`'s flags; a "
        "setting without a flag is fixed in this release.",
        "",
        _docstring(worker),
        "",
        "| Setting | Flag | Default | Meaning |",
        "|---|---|---|---|",
    ]
    for f in wfields:
        default = "required" if f.default is dataclasses.MISSING else f"`{_toml(f.default)}`"
        flag = flags.pop(WORKER_FLAG_OF.get(f.name, f.name), None)
        shown = f"`{flag[0]}`" if flag else "none"
        out.append(f"| `{f.name}` | {shown} | {default} | {_cell(whelp[f.name])} |")
    unhelped = [flag for flag, text in flags.values() if not text]
    if unhelped:
        raise UndocumentedError(f"ripple/pipeline_commands.py: no help= for {unhelped}")
    out += [
        "",
        "Flags of `ripple worker` that are not worker settings:",
        "",
        "| Flag | Meaning |",
        "|---|---|",
        *(f"| `{flag}` | {_cell(text)} |" for flag, text in flags.values()),
    ]
    return "\n".join(out) + "\n"


# WorkerSettings fields whose `ripple worker` flag is named otherwise.
WORKER_FLAG_OF = {"coordinators": "coordinator", "store_uri": "store"}


def _worker_flags(parser: argparse.ArgumentParser) -> dict[str, tuple[str, str]]:
    """`ripple worker`'s flags by their argparse dest: (its long name, its help)."""
    for action in parser._actions:  # argparse offers no public walk of subparsers
        if isinstance(action, argparse._SubParsersAction):
            worker = action.choices["worker"]
            out = {}
            for a in worker._actions:
                if not a.option_strings or a.dest == "help":
                    continue
                own = "--" + a.dest.replace("_", "-")
                flag = own if own in a.option_strings else a.option_strings[0]
                out[a.dest] = (flag, a.help or "")
            return out
    raise AssertionError("ripple's parser has no worker subcommand")


# -- metrics: every family the code names -----------------------------------------------------

# Constructors whose first two arguments are a family's name and help, by the type they make.
METRIC_TYPES = {
    "Counter": "counter",
    "CounterMetricFamily": "counter",
    "Gauge": "gauge",
    "GaugeMetricFamily": "gauge",
    "_gauge": "gauge",
    "Histogram": "histogram",
    "HistogramMetricFamily": "histogram",
    "Summary": "summary",
    "SummaryMetricFamily": "summary",
}
# Families named by an f-string, one per key of a dict the module defines (name -> help).
EXPANDED = {"pipeline.metrics": "STAT_HELP"}


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class MetricDoc:
    name: str  # as exported: a counter with its `_total`
    kind: str
    labels: tuple[str, ...]
    help: str
    module: str


def _literal(node: ast.expr | None) -> Any:
    return None if node is None else ast.literal_eval(node)


def _exported(name: str, kind: str) -> str:
    return f"{name.removesuffix('_total')}_total" if kind == "counter" else name


def _text(node: ast.expr | None) -> str | None:
    """The string a node spells literally (implicit concatenation included), else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def _module_metrics(module: str, path: Path) -> list[MetricDoc]:
    out: list[MetricDoc] = []
    source = path.read_text(encoding="utf-8")
    if "ripple_" not in source:
        return out  # names no family: no parse (most modules)
    for call in ast.walk(ast.parse(source)):
        if not isinstance(call, ast.Call) or not call.args:
            continue
        func = call.func
        fname = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
        name = _text(call.args[0])
        named = name is not None and name.startswith("ripple_")
        templated = isinstance(call.args[0], ast.JoinedStr)
        help_node = call.args[1] if len(call.args) > 1 else None
        if fname not in METRIC_TYPES:
            if named and _text(help_node) is not None:
                # A name and a help string: a metric made some way this scan does not know.
                raise UndocumentedError(f"{path}:{call.lineno}: {fname}() makes a metric?")
            continue
        if not (named or templated):
            continue  # a wrapper passing its own arguments on (`_gauge`)
        kind = METRIC_TYPES[fname]
        kwargs = {k.arg: k.value for k in call.keywords}
        labels_node = kwargs.get("labels") or kwargs.get("labelnames")
        if labels_node is None and len(call.args) > 2 and isinstance(call.args[2], ast.List):
            labels_node = call.args[2]
        try:
            labels = tuple(_literal(labels_node) or ())
        except ValueError as exc:
            raise UndocumentedError(f"{path}:{call.lineno}: labels not a literal") from exc
        if templated:
            out += _expanded(module, path, call, kind, labels)
            continue
        assert name is not None
        text = _text(help_node or kwargs.get("documentation"))
        if not (text and text.strip()):
            raise UndocumentedError(f"{path}:{call.lineno}: {name} has no help string")
        exported = _exported(name, kind)
        out.append(MetricDoc(name=exported, kind=kind, labels=labels, help=text, module=module))
    return out


def _expanded(
    module: str, path: Path, call: ast.Call, kind: str, labels: tuple[str, ...]
) -> list[MetricDoc]:
    table = EXPANDED.get(module)
    template = call.args[0]
    assert isinstance(template, ast.JoinedStr)
    prefix = "".join(str(v.value) for v in template.values if isinstance(v, ast.Constant))
    if table is None or len(template.values) != 2:
        raise UndocumentedError(
            f"{path}:{call.lineno}: a family named by an f-string; list its names in a dict "
            "and the dict in testkit/docs_reference.py's EXPANDED"
        )
    names: dict[str, str] = getattr(importlib.import_module(module), table)
    return [
        MetricDoc(name=_exported(prefix + n, kind), kind=kind, labels=labels, help=h, module=module)
        for n, h in names.items()
    ]


def _modules(package: str) -> Iterable[tuple[str, Path]]:
    for path in sorted((ROOT / package).rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        yield ".".join(rel.parts).removesuffix(".__init__"), path


@functools.cache  # a parse of every product module: once per process
def metrics() -> tuple[MetricDoc, ...]:
    """Every metric family the product code defines, by module, then name."""
    found: dict[str, MetricDoc] = {}
    for package in METRIC_PACKAGES:
        for module, path in _modules(package):
            for doc in _module_metrics(module, path):
                if doc.name in found and found[doc.name] != doc:
                    raise UndocumentedError(
                        f"{doc.name} defined twice: {doc.module}, {found[doc.name].module}"
                    )
                found[doc.name] = doc
    return tuple(sorted(found.values(), key=lambda d: (d.module, d.name)))


def metrics_page() -> str:
    docs = metrics()
    out = [
        "# Metrics reference",
        "",
        BANNER.format(cmd=REGENERATE),
        "",
        "Every family on `GET /metrics`, as the code defines it (Prometheus text, no auth; each",
        "process has its own registry). A counter is listed by its exported `_total` name.",
        "What to alert on: [alerting.md](../alerting.md).",
    ]
    sections = (
        ("Coordinator", lambda m: not m.startswith("pipeline")),
        ("Worker", lambda m: m.startswith("pipeline")),
    )
    for title, wanted in sections:
        out += ["", f"## {title}"]
        modules = sorted({d.module for d in docs if wanted(d.module)})
        for module in modules:
            doc = _docstring(importlib.import_module(module))
            out += ["", f"### `{module}`", "", doc, "", "| Metric | Type | Labels | Help |"]
            out.append("|---|---|---|---|")
            for d in (d for d in docs if d.module == module):
                labels = ", ".join(f"`{label}`" for label in d.labels)
                out.append(f"| `{d.name}` | {d.kind} | {labels} | {_cell(d.help)} |")
    return "\n".join(out) + "\n"


# -- benchmark tables: the committed results ----------------------------------------------------

TABLE_START = re.compile(r"<!-- results: (\w+) -->\n")
TABLE_END = "<!-- end results -->"


def _number(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if float(value).is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    magnitude = abs(value)
    if magnitude >= 1000:
        return f"{value:,.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    if magnitude >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def bench_table(name: str, root: Path = ROOT) -> str:
    """A benchmark's committed result as Markdown: the run's facts, then one table per kind
    of case (the part of its name before a `/`), a column per field any of them has."""
    record = json.loads((root / RESULTS_DIR / f"{name}.json").read_text(encoding="utf-8"))
    dirty = ", uncommitted changes" if record["dirty"] else ""
    out = [
        f"`bench/results/{name}.json`: run {record['date']} on commit "
        f"`{record['commit'][:10]}`{dirty}, {record['cores']} cores, load "
        f"{record['load_1m']} at its start, {record['seconds']} s.",
    ]
    rows: dict[str, dict[str, Any]] = record["rows"]
    groups: dict[str, list[str]] = {}
    for case in rows:
        groups.setdefault(case.split("/", 1)[0] if "/" in case else "", []).append(case)
    for cases in groups.values():
        columns = sorted({field for case in cases for field in rows[case]})
        out += ["", "| case | " + " | ".join(columns) + " |"]
        out.append("|---" * (len(columns) + 1) + "|")
        for case in cases:
            cells = " | ".join(_number(rows[case].get(c, "-")) for c in columns)
            out.append(f"| `{case}` | {cells} |")
    return "\n".join(out)


def with_bench_tables(text: str, root: Path = ROOT) -> str:
    """`text` with every `<!-- results: NAME -->` ... `<!-- end results -->` block rewritten
    from bench/results/NAME.json."""
    out, pos = [], 0
    for match in TABLE_START.finditer(text):
        end = text.index(TABLE_END, match.end())
        out += [text[pos : match.end()], bench_table(match.group(1), root), "\n"]
        pos = end
    out.append(text[pos:])
    return "".join(out)


# -- the pages ----------------------------------------------------------------------------------


def render(root: Path = ROOT) -> dict[Path, str]:
    """Each generated page (relative to the repository) -> what it must hold now."""
    bench = (root / BENCH_PAGE).read_text(encoding="utf-8")
    return {
        CONFIG_PAGE: config_page(),
        METRICS_PAGE: metrics_page(),
        BENCH_PAGE: with_bench_tables(bench, root),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testkit.docs_reference")
    parser.add_argument("--write", action="store_true", help="rewrite the pages that differ")
    args = parser.parse_args(argv)
    stale = []
    for rel, text in render().items():
        path = ROOT / rel
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            stale.append(str(rel))
            if args.write:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text, encoding="utf-8")
    verb = "rewrote" if args.write else "out of date"
    print(f"{verb}: {', '.join(stale)}" if stale else "every generated page is current")
    return 1 if stale and not args.write else 0


if __name__ == "__main__":
    sys.exit(main())
