"""A body-size cap for the aggregator, as pure ASGI middleware that reads the request stream.

The whole body is read *here*, chunk by chunk, before the application sees it: a declared
``Content-Length`` above the cap is answered ``413`` at once, a streamed (chunked) body is
answered ``413`` as soon as the bytes received pass the cap, and a body that trickles in for
longer than ``timeout`` seconds is answered ``408``. Nothing beyond ``max_bytes`` is ever held in
memory. Before a 413 the rest of the body is read and dropped for at most ``drain`` seconds (so
that the client, still sending, reads the answer instead of a reset connection). The application
then receives the buffered body as one message.

Privacy condition: none (transport only).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

__all__ = ["BodyLimit"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


async def _refuse(send: Send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()), (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})


async def _drain(receive: Receive, seconds: float) -> None:
    """Read and drop what the client still sends, for at most ``seconds``."""
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        try:
            msg = await asyncio.wait_for(receive(), left)
        except TimeoutError:
            return
        if msg["type"] != "http.request" or not msg.get("more_body", False):
            return


class BodyLimit:
    """Refuse request bodies above ``max_bytes`` (413) or slower than ``timeout`` seconds (408).

    Parameters
    ----------
    app : ASGI application
    max_bytes : int
    timeout : float
        Seconds allowed to receive the whole body.
    drain : float
        Seconds spent reading and dropping the rest of a body refused as too large.
    """

    def __init__(self, app: Any, max_bytes: int = 8 << 20, timeout: float = 30.0,
                 drain: float = 0.5) -> None:
        self.app = app
        self.max_bytes = int(max_bytes)
        self.timeout = float(timeout)
        self.drain = float(drain)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            await _drain(receive, self.drain)
            await _refuse(send, 413, f"request body above {self.max_bytes} bytes")
            return
        chunks: list[bytes] = []
        size, deadline = 0, time.monotonic() + self.timeout
        while True:
            try:
                msg = await asyncio.wait_for(receive(), max(deadline - time.monotonic(), 0.001))
            except TimeoutError:
                await _refuse(send, 408, f"request body not received within {self.timeout:g} s")
                return
            if msg["type"] == "http.disconnect":
                return
            part = msg.get("body", b"")
            size += len(part)
            if size > self.max_bytes:
                if msg.get("more_body", False):
                    await _drain(receive, self.drain)
                await _refuse(send, 413, f"request body above {self.max_bytes} bytes")
                return
            chunks.append(part)
            if not msg.get("more_body", False):
                break
        body, sent = b"".join(chunks), False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)
