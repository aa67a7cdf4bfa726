"""What the HTTP app carries for its handlers: typed keys for the node it serves, the
leader duties, worker admission, the heartbeat's assignment texts and the cluster's
browser origins.

Each is set once by `app.create_app` and never replaced, so a handler reads the same
objects for the app's whole life.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from coordinator.service.node import CoordinatorNode
from coordinator.service.replies import AssignmentTexts

__all__ = ["ASSIGNMENT_TEXTS_KEY", "DUTIES_KEY", "NODE_KEY", "ORIGINS_KEY"]

NODE_KEY = web.AppKey("node", CoordinatorNode)
DUTIES_KEY: web.AppKey[Any] = web.AppKey("duties", object)
ASSIGNMENT_TEXTS_KEY = web.AppKey("assignment_texts", AssignmentTexts)
ORIGINS_KEY: web.AppKey[frozenset[str]] = web.AppKey("origins", frozenset)
