"""The coordinator's HTTP API (docs/http-api.md): one aiohttp app, built by `app.create_app`.

A request reads top-down through these modules: `request` parses it, `context` names the
node and the leader duties it is served by, `coordinator.service.auth` admits its caller,
the route module's handler proposes and `answers` writes the reply. The route tables
(`views`, `worker_routes`, `admin_routes`) are plain tuples, joined once in `app`.
"""
