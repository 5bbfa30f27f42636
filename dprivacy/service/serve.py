"""Running the service: ``dprivacy serve --config service.toml --host 127.0.0.1 --port 8765``
(:func:`register` adds the command to the ``dprivacy`` CLI), or :class:`ServiceThread` in a
background thread (tests, benchmarks, notebooks)."""

from __future__ import annotations

import argparse
import gc
from typing import Any

from dprivacy._serving import BackgroundServer, listening_socket
from dprivacy.service.config import ServiceConfig, load_config

__all__ = ["register", "ServiceThread", "listening_socket", "warm_up"]


class ServiceThread(BackgroundServer):
    """uvicorn serving the service for ``cfg`` on ``host:port`` (0: a free port) in a daemon
    thread; ``url``, ``stop()``.

    The analysts' workers are processes started with :mod:`multiprocessing` (a fork server):
    a script that starts the service this way needs the usual ``if __name__ == "__main__":``
    guard around it (notebooks and ``python -m`` modules do not)."""

    def __init__(self, cfg: ServiceConfig, host: str = "127.0.0.1", port: int = 0) -> None:
        from dprivacy.service.app import create_app, stamped_protocol

        self.app = create_app(cfg)
        super().__init__(self.app, host, port, what="the service", start_timeout=60.0,
                         http=stamped_protocol())

    @property
    def runner(self) -> Any:
        """The service's :class:`~dprivacy.service.runner.Runner` (the owner's handle)."""
        return self.app.state.runner

    def stop(self, timeout: float = 30.0) -> None:
        """Stop serving and release the owner's threads."""
        super().stop(timeout)
        self.runner.close()


def warm_up(app: Any) -> int:
    """Send ``GET /v1/health`` through the ASGI application ``app`` in this process (no
    socket); its status. Builds what the application builds on its first request."""
    import asyncio

    status: list[int] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            status.append(int(message["status"]))

    scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"},
             "http_version": "1.1", "method": "GET", "scheme": "http", "path": "/v1/health",
             "raw_path": b"/v1/health", "root_path": "", "query_string": b"",
             "headers": [(b"host", b"localhost")], "client": ("127.0.0.1", 0),
             "server": ("127.0.0.1", 0), "state": {}}
    asyncio.run(app(scope, receive, send))
    return status[0] if status else 0


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from dprivacy.service.app import create_app, stamped_protocol

    cfg = load_config(args.config)
    app = create_app(cfg, realtime=True)
    # this thread runs the event loop (arrivals, releases): real-time priority where the system
    # allows it, else the shortest scheduler slice, so that its wake-ups preempt the workers at
    # once (the analysts' processes are started, from the fork server, in the fair class)
    guard = app.state.runner.guard
    realtime = guard.enter()
    print(f"dprivacy serve: {len(cfg.sources)} source(s), {len(cfg.analysts)} analyst(s), "
          f"state in {cfg.state_dir}, on http://{args.host}:{args.port}", flush=True)
    print("dprivacy serve: " + (
        f"answers are released at real-time priority (while the service uses less than "
        f"{guard.cap:.0%} of a CPU)" if realtime else
        "real-time priority not permitted (root, CAP_SYS_NICE or an RLIMIT_RTPRIO of 3 "
        "allows it): answers are released by the fair scheduler and can come later under "
        "load (docs/service.md)"), flush=True)
    config = uvicorn.Config(app, log_level="warning", access_log=False, http=stamped_protocol())
    # the first request costs what the later ones do: uvicorn's protocol and wrappers loaded and
    # the application's middleware built (a health check through it) before the socket listens
    config.load()
    warm_up(config.loaded_app)
    # everything built so far (the engine's modules, uvicorn's, the application and what its
    # first request built) lives as long as the service: out of the garbage collector, so that a
    # full collection in the event loop (which releases every analyst's answers) scans only the
    # objects created since (about 0.1 s otherwise)
    gc.collect()
    gc.freeze()
    sock = listening_socket(args.host, args.port)
    server = uvicorn.Server(config)
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
        app.state.runner.close()
    return 0


def register(sub: Any) -> None:
    """Add ``dprivacy serve`` to the CLI's subcommands."""
    p = sub.add_parser(
        "serve", help="serve protected tables to remote analysts (PINQ / ProPer)",
        description="Serve protected tables to remote analysts: they send data-free query "
                    "plans with a key, the service holds the data and every budget and releases "
                    "each answer at a fixed deadline. See docs/service.md.")
    p.add_argument("--config", required=True, help="the service's TOML configuration")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8765, help="port (default 8765)")
    p.set_defaults(func=_serve)
