"""Errors of the analysts' side of ``dprivacy serve``."""

from __future__ import annotations

from dprivacy.errors import DPrivacyError

__all__ = ["ServiceError", "AuthenticationError", "AccessDeniedError"]


class ServiceError(DPrivacyError):
    """The service refused a request or could not be reached."""


class AuthenticationError(ServiceError):
    """The service did not accept the key (HTTP 401)."""


class AccessDeniedError(ServiceError):
    """The key may not use this source (HTTP 403)."""
