"""Errors of the analysts' side of ``dprivacy serve``."""

from __future__ import annotations

from dprivacy.errors import DPrivacyError

__all__ = ["ServiceError", "AuthenticationError", "AccessDeniedError", "ServiceBusyError"]


class ServiceError(DPrivacyError):
    """The service refused a request or could not be reached."""


class AuthenticationError(ServiceError):
    """The service did not accept the key (HTTP 401)."""


class AccessDeniedError(ServiceError):
    """The key may not use this source (HTTP 403)."""


class ServiceBusyError(ServiceError):
    """The analyst's previous query has not reached its deadline yet (HTTP 429): one query at a
    time per analyst. Nothing was charged; ``retry_after`` is the service's wait in seconds."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after
