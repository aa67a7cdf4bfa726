"""Event-time windows without Spark: the `[window]` table's defaults and refusals, the version
of a spec without one, the close rule (a window is final once its end is at or below the
watermark, then evicted), the key limit over (key, window) rows, and the checkpoint fields."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest

from pipeline.checkpoint import late_key
from pipeline.spec.aggregations import KeyState, outputs_of
from pipeline.spec.partition_state import (
    SpecPartitionState,
    decode_spec_checkpoint,
    encode_spec_checkpoint,
    merge_spec_batch,
)
from pipeline.spec.produce import key_text
from pipeline.spec.rescale_build import RescaleBuildError, build
from pipeline.spec.run import PipelineInfo, PipelineRun
from pipeline.spec.windows import US_PER_S, close_windows, utc
from pipeline.store import LocalStore
from ripple.pipeline_commands import key_table
from shared.errors import RequestError
from shared.routing import SLOT_BASE, Routing
from shared.spec.parse import (
    FORMAT_KEYS,
    WINDOW_LATENESS_MAX_S,
    WINDOW_SIZE_MAX_S,
    WINDOWS_PER_RECORD_MAX,
    load_spec_file,
    parse_spec,
)
from tests.unit.test_pipeline_spec_merge import SetSketches

ROOT = Path(__file__).resolve().parents[2]
BASE = """
[schema]
ddl = "host STRING, ms BIGINT, at TIMESTAMP, day DATE"
key = "host"

[[aggregations]]
name = "n"
fn = "count"

[[aggregations]]
name = "slowest"
fn = "max"
column = "ms"
"""
MINUTE = 60 * US_PER_S


def windowed(body: str) -> str:
    return BASE + "\n[window]\n" + body


def refusal(text: str) -> RequestError:
    with pytest.raises(RequestError) as caught:
        parse_spec(text)
    return caught.value


def test_a_window_defaults_to_tumbling_with_no_lateness() -> None:
    spec = parse_spec(windowed('column = "at"\nsize = "5m"'))
    assert spec.window is not None
    assert (spec.window.column, spec.window.size_s, spec.window.slide_s) == ("at", 300, 300)
    assert spec.window.lateness_s == 0
    sliding = parse_spec(windowed('column = "at"\nsize = "1h"\nslide = "15m"\nlateness = "90s"'))
    assert sliding.window is not None
    assert (sliding.window.size_s, sliding.window.slide_s, sliding.window.lateness_s) == (
        3600,
        900,
        90,
    )
    example = load_spec_file(ROOT / "docs" / "examples" / "errors_per_minute.toml")
    assert example.window is not None and example.window.size_s == 60
    assert {f"window.{k}" for k in ("column", "size", "slide", "lateness")} <= set(FORMAT_KEYS)


def test_the_reference_states_every_window_bound() -> None:
    page = (ROOT / "docs" / "reference" / "pipeline-spec.md").read_text(encoding="utf-8")
    assert f"at most {WINDOW_SIZE_MAX_S} s" in page
    assert f"at most {WINDOW_LATENESS_MAX_S} s" in page
    assert f"is at most {WINDOWS_PER_RECORD_MAX}." in page


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ('size = "1m"', "window.column"),
        ('column = "nope"\nsize = "1m"', "window.column"),
        ('column = "day"\nsize = "1m"', "window.column"),  # a DATE is not a TIMESTAMP
        ('column = "ms"\nsize = "1m"', "window.column"),
        ('column = "at"', "window.size"),
        ('column = "at"\nsize = "0s"', "window.size"),
        ('column = "at"\nsize = "1 minute"', "window.size"),
        ('column = "at"\nsize = 60', "window.size"),
        (f'column = "at"\nsize = "{WINDOW_SIZE_MAX_S + 1}s"', "window.size"),
        ('column = "at"\nsize = "1h"\nslide = "7m"', "window.slide"),
        ('column = "at"\nsize = "1h"\nslide = "0s"', "window.slide"),
        ('column = "at"\nsize = "1h"\nslide = "1s"', "window.slide"),  # 3600 windows a record
        ('column = "at"\nsize = "1m"\nlateness = "-1s"', "window.lateness"),
        (
            f'column = "at"\nsize = "1m"\nlateness = "{WINDOW_LATENESS_MAX_S + 1}s"',
            "window.lateness",
        ),
        ('column = "at"\nsize = "1m"\nevery = "1m"', "window.every"),
    ],
)
def test_a_bad_window_is_refused_naming_its_field(body: str, field: str) -> None:
    exc = refusal(windowed(body))
    assert exc.field == field and exc.code == "invalid", exc.message


def test_a_spec_without_a_window_keeps_its_version() -> None:
    # Pinned from before windows existed: every recorded spec keeps its version.
    orders = load_spec_file(ROOT / "docs" / "examples" / "orders.toml")
    assert orders.version == (
        "sha256:88e818ae05b6662126cce675cabd0b22636b94888205ab361857ba850facd115"
    )
    assert b"window" not in parse_spec(BASE).canonical_bytes()
    one = parse_spec(windowed('column = "at"\nsize = "1m"'))
    other = parse_spec(windowed('column = "at"\nsize = "1m"\nlateness = "1s"'))
    assert len({parse_spec(BASE).version, one.version, other.version}) == 3


def state_of(n: int, slowest: int | None) -> KeyState:
    return {"n": n, "slowest": slowest}


def test_a_window_closes_once_the_watermark_passes_its_end_and_leaves_state() -> None:
    spec = parse_spec(windowed('column = "at"\nsize = "1m"\nlateness = "30s"'))
    assert spec.window is not None
    outputs, sketches = outputs_of(spec), SetSketches()
    batch = {("a", 0): state_of(2, 5), ("b", 0): state_of(1, 7), ("a", MINUTE): state_of(1, 1)}
    firsts = {("a", 0): 0, ("b", 0): 1, ("a", MINUTE): 2}
    # The basis 1m20s: the watermark 50 s is below the first window's end: nothing final.
    state, dead = merge_spec_batch(
        outputs, SpecPartitionState(), batch, firsts, 10, sketches, spec.window, 80 * US_PER_S
    )
    assert not dead and state.closed == [] and len(state) == 3 and state.basis_us == 80 * US_PER_S
    # An earlier batch maximum never moves the basis back.
    same, _ = merge_spec_batch(outputs, state, {}, {}, 10, sketches, spec.window, US_PER_S)
    assert same.basis_us == 80 * US_PER_S and same.closed == []
    # The basis 1m30s: the watermark reaches the first window's end (end <= watermark).
    later = {("a", MINUTE): state_of(1, 9)}
    state, _ = merge_spec_batch(
        outputs, state, later, {("a", MINUTE): 5}, 10, sketches, spec.window, 90 * US_PER_S
    )
    start, end = utc(0), utc(MINUTE)
    assert state.closed == [
        {"key": "a", "window_start": start, "window_end": end, "n": 2, "slowest": 5},
        {"key": "b", "window_start": start, "window_end": end, "n": 1, "slowest": 7},
    ]
    assert start == datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    assert set(state.values) == {("a", MINUTE)} and set(state.firsts) == {("a", MINUTE)}
    assert state.values[("a", MINUTE)] == state_of(2, 9)
    # Closing twice appends nothing: an evicted window is gone.
    again, _ = merge_spec_batch(outputs, state, {}, {}, 10, sketches, spec.window, None)
    assert again.closed == state.closed
    assert close_windows(outputs, spec.window, {}, None, sketches) == ([], set())


def test_the_key_limit_counts_key_window_rows_and_an_evicted_window_frees_its_row() -> None:
    spec = parse_spec(windowed('column = "at"\nsize = "1m"'))
    assert spec.window is not None
    outputs, sketches = outputs_of(spec), SetSketches()
    batch = {("a", 0): state_of(1, 1), ("a", MINUTE): state_of(1, 2), ("b", 0): state_of(1, 3)}
    firsts = {("a", 0): 0, ("a", MINUTE): 2, ("b", 0): 1}
    state, dead = merge_spec_batch(
        outputs, SpecPartitionState(), batch, firsts, 2, sketches, spec.window, MINUTE + 1
    )
    # Admitted by first offset: (a, 0) and (b, 0); (a, 1m) is refused, then both close.
    assert set(dead) == {("a", MINUTE)}
    assert [r["key"] for r in state.closed] == ["a", "b"] and len(state) == 0


def test_a_checkpoint_keeps_the_basis_and_the_closed_windows() -> None:
    spec = parse_spec(windowed('column = "at"\nsize = "1m"'))
    outputs = outputs_of(spec)
    state = SpecPartitionState(
        values={("a", MINUTE): state_of(3, 4), (None, 0): state_of(1, None)},
        firsts={("a", MINUTE): 7, (None, 0): 3},
        basis_us=MINUTE + 5,
        closed=[
            {"key": "b", "window_start": utc(0), "window_end": utc(MINUTE), "n": 1, "slowest": 2}
        ],
    )
    data = encode_spec_checkpoint(SLOT_BASE, 1, 9, spec.version, outputs, state)
    assert encode_spec_checkpoint(SLOT_BASE, 1, 9, spec.version, outputs, state) == data
    back = decode_spec_checkpoint(data).state
    assert back.values == state.values and back.firsts == state.firsts
    assert back.basis_us == state.basis_us and back.closed == state.closed
    # An unwindowed state encodes without the fields and decodes with none.
    plain = SpecPartitionState(values={"a": state_of(1, 1)}, firsts={"a": 0})
    bytes_ = encode_spec_checkpoint(SLOT_BASE, 1, 9, spec.version, outputs, plain)
    assert b"basis_us" not in bytes_ and b"closed" not in bytes_
    loaded = decode_spec_checkpoint(bytes_).state
    assert loaded.basis_us is None and loaded.closed == []


def test_a_key_reads_as_its_open_windows(tmp_path: Path) -> None:
    text = windowed('column = "at"\nsize = "1m"\nslide = "30s"')
    info = PipelineInfo(
        name="w", incarnation=1, first_slot=SLOT_BASE, partitions=1, spec_text=text,
        max_keys_per_partition=0,
    )  # fmt: skip
    run = PipelineRun(info, LocalStore(tmp_path))
    half = 30 * US_PER_S
    state = SpecPartitionState(
        values={("a", half): state_of(1, 2), ("a", 0): state_of(2, 3), ("b", 0): state_of(1, 1)},
        firsts={("a", half): 1, ("a", 0): 0, ("b", 0): 2},
    )
    read = run.results(state, SetSketches(), ["a"])
    assert read == {
        "a": {
            "windows": [
                {"window_start": utc(0), "window_end": utc(MINUTE), "n": 2, "slowest": 3},
                {"window_start": utc(half), "window_end": utc(half + MINUTE), "n": 1, "slowest": 2},
            ]
        }
    }
    assert set(run.results(state, SetSketches())) == {"a", "b"}
    assert run.results(state, SetSketches(), ["c"]) == {}


def test_late_records_are_named_beside_the_batch_dead_letters() -> None:
    assert late_key(SLOT_BASE, 2, 10, 20).startswith("deadletter/")
    assert late_key(SLOT_BASE, 2, 10, 20).endswith("-00000000000000000020-late.parquet")


def test_a_spec_update_that_changes_the_window_is_never_built() -> None:
    spec = parse_spec(windowed('column = "at"\nsize = "1m"'))
    wider = parse_spec(windowed('column = "at"\nsize = "2m"'))
    plain = parse_spec(BASE)
    for old, new in ((plain, spec), (spec, plain), (spec, wider)):
        with pytest.raises(RescaleBuildError, match="keeps the window"):
            build(old, new, {}, Routing(generation=1, partitions=2), SLOT_BASE + 10, 1, 10,
                  SetSketches())  # fmt: skip


def cut(spec_text: str, p: int, state: SpecPartitionState) -> bytes:
    spec = parse_spec(spec_text)
    return encode_spec_checkpoint(p, 3, 7, spec.version, outputs_of(spec), state)


def test_a_rescale_carries_open_windows_by_key_and_closes_at_the_max_basis() -> None:
    text = windowed('column = "at"\nsize = "1m"\nlateness = "30s"')
    spec = parse_spec(text)
    old_closed = [
        {"key": "z", "window_start": utc(0), "window_end": utc(MINUTE), "n": 1, "slowest": 1}
    ]
    first = SpecPartitionState(
        values={
            ("a", 0): state_of(2, 5), ("a", MINUTE): state_of(1, 4), ("b", MINUTE): state_of(1, 3)
        },
        firsts={("a", 0): 0, ("a", MINUTE): 2, ("b", MINUTE): 1},
        basis_us=80 * US_PER_S,
        closed=old_closed,
    )  # fmt: skip
    second = SpecPartitionState(
        values={("c", 2 * MINUTE): state_of(1, 8), ("c", 3 * MINUTE): state_of(1, 9)},
        firsts={("c", 2 * MINUTE): 0, ("c", 3 * MINUTE): 1},
        basis_us=200 * US_PER_S,
    )
    old_first, new_first = SLOT_BASE + 10, SLOT_BASE + 20
    cuts = {old_first: cut(text, old_first, first), old_first + 1: cut(text, old_first + 1, second)}
    routing = Routing(generation=1, partitions=3)
    built = build(spec, spec, cuts, routing, new_first, 4, 100, SetSketches())
    states = {n: decode_spec_checkpoint(b.checkpoint).state for n, b in built.items()}
    # Every new partition starts at the max basis: its watermark 170 s closes every window
    # ending by then (a's two, b's), and c's windows stay open where c routes.
    assert {s.basis_us for s in states.values()} == {200 * US_PER_S}
    closed = {
        (r["key"], r["window_start"]): (n, r["n"]) for n, s in states.items() for r in s.closed
    }
    opened = {k: n for n, s in states.items() for k in s.values}
    where = {k: new_first + routing.partition_for(key_text(k)) for k in "abc"}
    assert closed == {
        ("a", utc(0)): (where["a"], 2),
        ("a", utc(MINUTE)): (where["a"], 1),
        ("b", utc(MINUTE)): (where["b"], 1),
    }
    assert opened == {("c", 2 * MINUTE): where["c"], ("c", 3 * MINUTE): where["c"]}
    # The cut's own closed rows are its old partition's to publish: never carried.
    assert all(r["key"] != "z" for s in states.values() for r in s.closed)
    # The basis is a function of the cuts, not of their order.
    again = build(
        spec, spec, dict(reversed(cuts.items())), routing, new_first, 4, 100, SetSketches()
    )
    assert {n: b.checkpoint for n, b in again.items()} == {
        n: b.checkpoint for n, b in built.items()
    }


def test_a_rescale_of_cuts_with_no_event_time_yet_carries_no_basis() -> None:
    text = windowed('column = "at"\nsize = "1m"')
    spec = parse_spec(text)
    empty = SpecPartitionState()
    cuts = {SLOT_BASE + 10: cut(text, SLOT_BASE + 10, empty)}
    built = build(spec, spec, cuts, Routing(generation=1, partitions=2), SLOT_BASE + 20, 4, 10,
                  SetSketches())  # fmt: skip
    states = [decode_spec_checkpoint(b.checkpoint).state for b in built.values()]
    assert [(s.basis_us, s.closed, len(s)) for s in states] == [(None, [], 0)] * 2


def test_ripple_get_prints_a_windowed_key_one_window_a_row() -> None:
    body = {
        "key": "a",
        "windows": [
            {"window_start": "T0", "window_end": "T1", "n": 2, "slowest": 3},
            {"window_start": "T1", "window_end": "T2", "n": 1, "slowest": None},
        ],
        "partition": SLOT_BASE,
        "epoch": 4,
        "offset": 9,
    }
    lines = key_table(body, "w").splitlines()
    assert lines[0].split() == [
        "KEY", "WINDOW_START", "WINDOW_END", "N", "SLOWEST", "PARTITION", "EPOCH", "OFFSET"
    ]  # fmt: skip
    assert lines[1].split() == ["a", "T0", "T1", "2", "3", str(SLOT_BASE), "4", "9"]
    assert lines[2].split() == ["a", "T1", "T2", "1", "-", str(SLOT_BASE), "4", "9"]
    plain = key_table({"key": "a", "n": 1, "partition": 1, "epoch": 1, "offset": 1}, "w")
    assert plain.splitlines()[0].split() == ["KEY", "N", "PARTITION", "EPOCH", "OFFSET"]
