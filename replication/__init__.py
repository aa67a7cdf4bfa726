"""Ripple's replicated log: pysyncobj under Ripple's corrections (docs/design.md §2).

Importing pysyncobj replaces `socket.inet_ntop` with a Windows-only function on every
platform (its `win_inet_pton`), and anything else in the process that formats an address
then fails. The package imports pysyncobj before any of its modules runs and puts the real
function back, so a process is repaired whichever module of it comes first.
"""

import _socket
import socket

import pysyncobj  # noqa: F401 - for the import's side effect, undone on the next line

socket.inet_ntop = _socket.inet_ntop
