"""docs/tutorial.md, followed as a newcomer would: every file it says to save, every command
it shows, in order, in an empty directory, against the `ripple up` it starts; the results it
shows are the results the pipeline gives.

The tutorial's shape is the contract: "Save this as `NAME`:" before a fenced block is a file;
every ```sh block is commands, one per line, the first `ripple up` (left running, as the
reader leaves it in its own terminal) and the rest run in turn, each expected to succeed.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from testkit.process import CHECKOUT_ROOT, Proc, python_argv
from testkit.wait import wait_until

pytestmark = pytest.mark.spark

TUTORIAL = CHECKOUT_ROOT / "docs" / "tutorial.md"
FENCE = re.compile(r"```(\w*)\n(.*?)```", re.S)
SAVE = re.compile(r"Save this as `([^`]+)`:\s*$")
COMMAND_TIMEOUT_S = 60.0
# What step 5 shows for `ada`, from the records of step 4 worked out by hand.
ADA = {"views": 3, "pages": 2, "mean_seconds": 20.0, "first_page": "/home", "last_page": "/home"}


def steps() -> tuple[dict[str, str], list[str], list[str]]:
    """The files to save, the commands to run, in the tutorial's order, and the outputs it
    shows (```text blocks)."""
    text = TUTORIAL.read_text()
    files: dict[str, str] = {}
    commands: list[str] = []
    shown: list[str] = []
    for m in FENCE.finditer(text):
        lang, body = m.group(1), m.group(2)
        before = text[: m.start()].rstrip().splitlines()[-1]
        saved = SAVE.search(before)
        if saved is not None:
            files[saved.group(1)] = body
        elif lang == "sh":
            commands += [line for line in body.splitlines() if line.strip()]
        elif lang == "text":
            shown.append(body)
    return files, commands, shown


def ripple(command: str) -> list[str]:
    words = command.split()
    assert words[0] == "ripple", command
    return python_argv("-m", "ripple.cli", *words[1:])


def test_the_tutorial_steps_are_what_it_says(tmp_path: Path, spark_remote: str) -> None:
    # spark_remote is unused (ripple up starts its own Spark server); asking for it keeps
    # this test after the session's server is up, so two JVMs never start at once.
    files, commands, shown = steps()
    assert set(files) == {"views.toml", "views.jsonl"} and commands[0] == "ripple up", commands
    for name, body in files.items():
        (tmp_path / name).write_text(body)
    up = Proc(ripple(commands[0]), tmp_path / "up.log", cwd=tmp_path)
    try:
        wait_until(lambda: "Ctrl-C stops" in up.output(), "ripple up is ready", 300, 0.5)
        for command in commands[1:]:
            done = run(command, tmp_path)
            assert done.returncode == 0, (command, done.stdout, done.stderr)
            if command.startswith("ripple pipelines create"):
                wait_until(lambda: online(tmp_path), "the pipeline's partitions online", 120, 0.5)
            if command.startswith("ripple produce"):
                assert pipeline_objects(tmp_path), "the records are in the store"
            if command.startswith("ripple get"):
                assert ada(tmp_path) == ADA
                # As shown: the same columns, and ada's outputs (where it came from may vary).
                got, want = done.stdout.splitlines(), shown[0].splitlines()
                assert got[0].split() == want[0].split(), done.stdout
                assert got[1].split()[: len(ADA) + 1] == want[1].split()[: len(ADA) + 1]
        # The drop's --purge left none of the pipeline's objects (its partitions are numbered
        # from 2^20: seven digits), and `default`'s are all still there.
        assert pipeline_objects(tmp_path) == []
    finally:
        up.stop()


def run(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """One command as the reader runs it; `ripple get` right after records went in may find
    the key not processed yet, and the reader tries again a moment later."""

    def attempt() -> subprocess.CompletedProcess[str] | None:
        done = subprocess.run(
            ripple(command), cwd=cwd, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S
        )
        retry = command.startswith("ripple get") and "not_found" in done.stderr
        return None if retry else done

    return wait_until(attempt, command, 120, 0.5)


def online(cwd: Path) -> bool:
    done = run("ripple pipelines describe views --json", cwd)
    body = json.loads(done.stdout)
    return bool(body["partition_states"]["online"] == 4)


def ada(cwd: Path) -> dict[str, object]:
    """`ada`'s outputs, the way step 5 reads them (as JSON)."""
    body = json.loads(run("ripple get --pipeline views ada --json", cwd).stdout)
    return {k: v for k, v in body.items() if k in ADA}


def pipeline_objects(cwd: Path) -> list[Path]:
    """The recorded pipelines' objects in `ripple up`'s store: their partitions are numbered
    from 2^20, seven digits and more (`default`'s have five)."""
    store = cwd / "ripple-data" / "store"
    return [f for f in store.rglob("*") if f.is_file() and re.search(r"/p\d{7,}/", str(f))]
