"""A connection to a ``dprivacy serve`` service: authentication, requests, errors.

Errors come back as the same :mod:`dprivacy.errors` classes an in-process table raises
(:class:`~dprivacy.errors.ValidationError`, :class:`~dprivacy.errors.BudgetExceededError`,
:class:`~dprivacy.errors.UnsupportedOperationError`), plus :class:`AuthenticationError` (no or
a wrong key), :class:`ServiceBusyError` (a query sent while the previous one is in flight) and
:class:`ServiceError` (anything else the service or the network reports).
"""

from __future__ import annotations

import socket
from typing import Any

from dprivacy.errors import (
    BudgetExceededError,
    ConfigError,
    ConfigMismatchError,
    DPrivacyError,
    PrivacyViolationError,
    ShapeError,
    UnsupportedOperationError,
    ValidationError,
)
from dprivacy.remote.errors import (
    AccessDeniedError,
    AuthenticationError,
    ServiceBusyError,
    ServiceError,
)

__all__ = ["Session", "connect", "ServiceError", "AuthenticationError", "AccessDeniedError",
           "ServiceBusyError"]


_KNOWN: dict[str, type[DPrivacyError]] = {
    c.__name__: c for c in (ConfigError, ConfigMismatchError, PrivacyViolationError, ShapeError)}


def _error(status: int, body: Any, retry_after: str | None = None) -> DPrivacyError:
    name = body.get("error", "") if isinstance(body, dict) else ""
    msg = body.get("message", "") if isinstance(body, dict) else str(body)[:200]
    msg = msg or f"HTTP {status}"
    if status == 401:
        return AuthenticationError(msg)
    if status == 403:
        return AccessDeniedError(msg)
    if status == 429:
        wait = float(retry_after) if retry_after and retry_after.isdigit() else None
        return ServiceBusyError(msg, wait)
    if name == "NotRowwiseError":
        from dprivacy.tables.relations.engine import NotRowwiseError

        return NotRowwiseError(msg)
    if name == "BudgetExceededError":
        return BudgetExceededError(msg)
    if name == "UnsupportedOperationError":
        return UnsupportedOperationError(msg)
    if name in _KNOWN:
        return _KNOWN[name](msg)
    if status == 400 or name.endswith("ValidationError") or status == 413:
        return ValidationError(msg)
    return ServiceError(f"{name or 'error'}: {msg}" if name else msg)


class Session:
    """An authenticated connection (see :func:`connect`)."""

    def __init__(self, url: str, key: str, *, timeout: float = 300.0) -> None:
        import httpx

        self.url = url.rstrip("/")
        # TCP_NODELAY: a request's header and body segments are not held back by Nagle's
        # algorithm waiting for a delayed ACK (~40 ms on Linux)
        nodelay = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
        self._http = httpx.Client(base_url=self.url, timeout=timeout,
                                  transport=httpx.HTTPTransport(socket_options=nodelay),
                                  headers={"Authorization": f"Bearer {key}"})

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """Send one request; the JSON answer, or the mapped error raised."""
        import httpx

        try:
            r = self._http.request(method, path, json=body)
        except httpx.HTTPError as exc:
            raise ServiceError(f"cannot reach {self.url}: {type(exc).__name__}") from None
        try:
            data = r.json()
        except ValueError:
            data = r.text
        if r.status_code != 200:
            raise _error(r.status_code, data, r.headers.get("retry-after"))
        return data

    def sources(self) -> list[dict[str, str]]:
        """The sources this key may query: ``[{"name", "kind"}, ...]``."""
        return list(self.request("GET", "/v1/sources")["sources"])

    def table(self, name: str) -> Any:
        """The protected source ``name`` as a remote table (PINQ or ProPer methods)."""
        from dprivacy.remote.table import RemoteTable

        info = self.request("GET", f"/v1/sources/{name}")
        return RemoteTable(self, {"source": name, "steps": []}, info["kind"], info["schema"])

    def close(self) -> None:
        """Close the connection."""
        self._http.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def connect(url: str, key: str, *, timeout: float = 300.0) -> Session:
    """Connect to a ``dprivacy serve`` service.

    Parameters:
        url: the service's base URL, e.g. ``"http://127.0.0.1:8765"``.
        key: the analyst's key (the service stores only its SHA-256).
        timeout: seconds to wait for one answer (answers come at their deadline).

    Returns:
        A :class:`Session`; ``session.table(name)`` gives a protected table.
    """
    s = Session(url, key, timeout=timeout)
    s.sources()  # authenticates now: a wrong key fails here, not at the first query
    return s
