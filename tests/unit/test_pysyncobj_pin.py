"""The pysyncobj pin (`replication.pysyncobj_pin`): the installed release passes, and any
other fails with a message naming the pin. tests/integration/test_replication.py checks that
importing the patching modules against another release fails."""

from __future__ import annotations

import pysyncobj.version
import pytest

from replication.pysyncobj_pin import PYSYNCOBJ_VERSION, check_pysyncobj_version


def test_the_installed_release_is_the_pinned_one() -> None:
    assert pysyncobj.version.VERSION == PYSYNCOBJ_VERSION == "0.3.17"
    check_pysyncobj_version()


@pytest.mark.parametrize("other", ["0.3.18", "0.3.16", "0.4.0"])
def test_another_release_fails_naming_the_pin(other: str) -> None:
    with pytest.raises(ImportError) as exc:
        check_pysyncobj_version(other)
    message = str(exc.value)
    assert "pysyncobj==0.3.17" in message and other in message
