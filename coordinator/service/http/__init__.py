"""The coordinator's HTTP API (docs/http-api.md): one aiohttp app, built by `app.create_app`.

A request reads top-down through these modules: `request` parses it, `leader` says whether
this node may serve it, `coordinator.service.auth` admits its caller, the route module's
handler proposes (through the node in `context`) and `answers` writes the reply. The route
tables (`views`, `worker_routes`, `admin_routes`) are plain tuples, joined once in `app`,
and the OpenAPI document is generated from them (`openapi`).
"""
