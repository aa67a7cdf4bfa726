"""The worker's saved token (pipeline/token_file.py): kept whole, private, and only ever
used for its own worker id."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from pipeline.token_file import TOKEN_FILE_NAME, TokenFile

TOKEN = "w1.3.1700000000000." + "ab" * 32


def test_saved_then_loaded_with_private_modes(tmp_path: Path) -> None:
    f = TokenFile(tmp_path / "state", "w1")
    f.prepare()
    assert f.load() is None  # nothing saved yet
    f.save(TOKEN)
    assert f.load() == TOKEN
    assert stat.S_IMODE(os.stat(f.path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(f.dir).st_mode) == 0o700
    f.save(TOKEN.replace("w1.3", "w1.4"))
    assert f.load() == TOKEN.replace("w1.3", "w1.4")
    # No temp file left beside the token (and the lock file that prepare took).
    assert sorted(p.name for p in f.dir.iterdir()) == [TOKEN_FILE_NAME, "worker.lock"]


def test_another_worker_ids_file_is_not_used(tmp_path: Path) -> None:
    TokenFile(tmp_path, "w1").save(TOKEN)
    assert TokenFile(tmp_path, "w2").load() is None


def test_a_file_others_may_read_is_not_used(tmp_path: Path) -> None:
    f = TokenFile(tmp_path, "w1")
    f.save(TOKEN)
    os.chmod(f.path, 0o644)
    assert f.load() is None
    f.save(TOKEN)  # replaced whole, private again
    assert f.load() == TOKEN


def test_a_symlink_is_not_followed(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps({"worker_id": "w1", "token": TOKEN}))
    os.chmod(elsewhere, 0o600)
    f = TokenFile(tmp_path / "state", "w1")
    f.prepare()
    f.path.symlink_to(elsewhere)
    assert f.load() is None


@pytest.mark.parametrize(
    "content",
    [
        b"not json",
        json.dumps({"worker_id": "w1"}).encode(),
        json.dumps({"worker_id": "w1", "token": "x" * 300}).encode(),
        json.dumps({"worker_id": "w1", "token": "t\u00e9"}).encode(),
        json.dumps(["w1", TOKEN]).encode(),
        b" " * 2000,
    ],
)
def test_anything_but_a_token_file_is_not_used(tmp_path: Path, content: bytes) -> None:
    f = TokenFile(tmp_path, "w1")
    fd = os.open(f.path, os.O_WRONLY | os.O_CREAT, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(content)
    assert f.load() is None


def test_one_process_at_a_time_uses_a_state_dir(tmp_path: Path) -> None:
    first = TokenFile(tmp_path, "w1")
    first.prepare()
    second = TokenFile(tmp_path, "w1")
    with pytest.raises(BlockingIOError, match="another process uses the state directory"):
        second.prepare()
    first.release()
    second.prepare()
    second.release()


def test_an_unusable_state_dir_is_an_error_at_prepare(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    with pytest.raises(OSError):
        TokenFile(tmp_path / "a-file" / "state", "w1").prepare()
    with pytest.raises(ValueError):
        TokenFile(tmp_path, "w1").save("two\nlines")
