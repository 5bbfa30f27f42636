"""The aggregator's refusals, one class per HTTP status the server answers with.

Privacy condition: none.
"""

from __future__ import annotations

from dprivacy.errors import DPrivacyError

__all__ = ["ConflictError", "ForbiddenError", "UnknownError"]


class UnknownError(DPrivacyError):
    """No such query (HTTP 404)."""


class ForbiddenError(DPrivacyError):
    """An authenticated caller asked for something that is not theirs (HTTP 403)."""


class ConflictError(DPrivacyError):
    """A query id published twice, a user enrolled twice, a second different reply (HTTP 409)."""
