"""Analyst authentication: ``Authorization: Bearer <key>`` checked against stored SHA-256 digests.

The service never stores or logs a key: the configuration holds ``key_sha256`` only, and a
request's key is hashed and compared with every analyst's digest with
:func:`hmac.compare_digest` (no early exit, so the time does not depend on which digest, if any,
matches). :func:`new_key` makes a key and its digest for the configuration.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Sequence

from dprivacy.service.config import AnalystConfig

__all__ = ["key_sha256", "new_key", "authenticate"]

_MAX_KEY = 512


def key_sha256(key: str) -> str:
    """The hex SHA-256 of ``key`` (UTF-8), as written in the configuration."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def new_key() -> tuple[str, str]:
    """A fresh random key (hand it to the analyst) and its ``key_sha256`` (for the config)."""
    key = secrets.token_urlsafe(32)
    return key, key_sha256(key)


def authenticate(header: str | None, analysts: Sequence[AnalystConfig]) -> AnalystConfig | None:
    """The analyst whose key is in the ``Authorization`` header, or None.

    Parameters:
        header: the header's value (``"Bearer <key>"``), or None if absent.
        analysts: the configured analysts.
    """
    if not header or len(header) > _MAX_KEY or not header.startswith("Bearer "):
        return None
    digest = key_sha256(header[len("Bearer "):].strip()).encode()
    found: AnalystConfig | None = None
    for a in analysts:  # every digest is compared: no early exit
        if hmac.compare_digest(digest, a.key_sha256.encode()):
            found = a
    return found
