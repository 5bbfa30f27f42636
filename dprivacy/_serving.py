"""uvicorn in a background thread, shared by the query service and the local-model aggregator.

Both run their FastAPI app this way in tests, benchmarks and notebooks; the command-line servers
(``dprivacy serve``, ``dprivacy local serve``) run uvicorn in the foreground on the same socket.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

__all__ = ["BackgroundServer", "listening_socket"]


def listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` with TCP_NODELAY, which accepted connections inherit:
    without it, a response's header and body segments on a kept-alive connection wait for the
    client's delayed ACK (about 40 ms on Linux)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((host, port))
    return sock


class BackgroundServer:
    """uvicorn serving ``app`` on ``host:port`` (0: a free port) in a daemon thread.

    Attributes ``url``, ``server`` (the uvicorn server), ``thread`` and ``sock``; :meth:`stop`.
    ``http`` is uvicorn's HTTP protocol (a name or a class).
    Raises RuntimeError naming ``what`` if the server has not started within ``start_timeout``
    seconds.
    """

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0, *,
                 what: str = "the server", start_timeout: float = 20.0,
                 http: Any = "auto") -> None:
        import uvicorn

        self.sock = listening_socket(host, port)
        self.url = f"http://{host}:{self.sock.getsockname()[1]}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False,
                                                    http=http))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]},
                                       daemon=True)
        self.thread.start()
        t0 = time.monotonic()
        while not self.server.started:
            if time.monotonic() - t0 > start_timeout or not self.thread.is_alive():
                raise RuntimeError(f"{what} did not start")
            time.sleep(0.02)

    def stop(self, timeout: float = 10.0) -> None:
        """Ask uvicorn to exit, wait for its thread and close the socket."""
        self.server.should_exit = True
        self.thread.join(timeout=timeout)
        self.sock.close()
