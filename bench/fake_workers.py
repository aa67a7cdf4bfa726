"""The checkpoint benchmark's fake workers: one process on 127.0.0.1 that answers every
POST (the leader's host, release and checkpoint calls) with 200 and `{}`.

The benchmark registers all its workers at this one address, so the leader's host calls
succeed and every partition goes ONLINE; after that nothing calls it (checkpoint rounds are
off), and the acks measured are the only load. `python -m bench.fake_workers --port N`;
the benchmark starts it by PID and ends it by that PID.
"""

from __future__ import annotations

import argparse

from aiohttp import web


async def _ok(_request: web.Request) -> web.Response:
    return web.json_response({})


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.fake_workers")
    p.add_argument("--port", type=int, required=True)
    port = p.parse_args().port
    app = web.Application()
    app.router.add_post("/{tail:.*}", _ok)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)


if __name__ == "__main__":
    main()
