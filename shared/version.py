"""The release this code is: the one place Ripple's package version is written.

setup.cfg reads it (`version = attr: shared.version.PACKAGE_VERSION`), so the installed
package's metadata, `ripple --version`, every node's `/v1/health` and the version records in
the replicated state all name the same release. docs/changelog.md says what each one holds.
"""

from __future__ import annotations

__all__ = ["PACKAGE_VERSION"]

PACKAGE_VERSION = "0.4.2"
