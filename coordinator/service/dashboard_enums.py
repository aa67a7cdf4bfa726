"""The core's vocabularies as the dashboard reads them: `/ui/enums.json`, built here from the
core's Enum classes and lifecycle tables when a node starts.

The page holds no copy of a state name: it loads this document before its first refresh and
names members only by their Python name (`E.PartitionStatus.ONLINE`), so a renamed value
reaches the page with the code that renamed it. Invariant: every member of every enum listed
in `SHOWN` is in the document with its value, and every `ChangeReason` has the sentence the
page shows for it (checked at import, so a new reason without one fails the node's start
and the unit tests, not a page).
"""

from __future__ import annotations

import json
from enum import Enum

from coordinator.core.lifecycle import MIGRATION_EDGES
from coordinator.core.liveness import Liveness
from coordinator.core.model import (
    ChangeReason,
    MigrationPhase,
    PartitionStatus,
    PipelineState,
    RescalePhase,
    WorkerState,
)

__all__ = ["ENUMS_FILE", "REASON_TEXT", "SHOWN", "enums_document", "enums_json"]

ENUMS_FILE = "enums.json"  # served as /ui/enums.json

# The enums whose values the page compares with, counts by, or names in its text.
SHOWN: tuple[type[Enum], ...] = (
    PartitionStatus,
    PipelineState,
    WorkerState,
    Liveness,
    MigrationPhase,
    RescalePhase,
    ChangeReason,
)

# "Why is it here": what each reason of an ownership change means, in the page's words.
REASON_TEXT: dict[ChangeReason, str] = {
    ChangeReason.ASSIGNED: "placed by the leader while it had no owner",
    ChangeReason.FAILURE: "its previous owner was declared dead",
    ChangeReason.MIGRATION: "moved here by an operator's reassign",
    ChangeReason.DRAIN: "moved here because its previous owner was drained",
    ChangeReason.RESTART: "its owner re-registered (new process): re-hosted at a new epoch",
    ChangeReason.ABORT: "a migration away from here was aborted: it stayed with its owner",
    ChangeReason.FALLBACK: (
        "its recorded checkpoint could not be loaded: hosted again from an older one"
    ),
    ChangeReason.RESET: "an operator discarded its checkpoints: replayed from the source",
    ChangeReason.RESTORE: "the cluster was made anew (ripple restore or recover): epochs jumped",
    ChangeReason.RESCALE: "made by a rescale: hosted from the checkpoint the rescale built",
}
assert set(REASON_TEXT) == set(ChangeReason), "every ChangeReason needs the page's sentence"


def enums_document() -> dict[str, object]:
    """The document `/ui/enums.json` carries: each shown enum as {name: value} in declared
    order (the page draws steps in that order), the migration phases no command leaves
    (`lifecycle.MIGRATION_EDGES`), and the reasons' sentences by value."""
    sources = {src for src, _ in MIGRATION_EDGES}
    return {
        "enums": {cls.__name__: {m.name: m.value for m in cls} for cls in SHOWN},
        "migration_finished": [m.value for m in MigrationPhase if m not in sources],
        "reason_text": {reason.value: text for reason, text in REASON_TEXT.items()},
    }


def enums_json() -> bytes:
    return json.dumps(enums_document(), indent=1).encode()
