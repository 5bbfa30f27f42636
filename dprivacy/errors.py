"""The dprivacy exception hierarchy.

Every error raised on bad user input derives from :class:`DPrivacyError` and says what was wrong
and how to fix it (e.g. ``"eps[3, 7] = -0.5: a metric is non-negative"``).
"""

from __future__ import annotations


class DPrivacyError(Exception):
    """Base class of every dprivacy error."""


class ValidationError(DPrivacyError, ValueError):
    """An argument has the wrong type, shape or value (NaN, infinite, negative, ...)."""


class ShapeError(ValidationError):
    """Arrays whose shapes do not fit together (e.g. F is (m, N) but the universe has N' != N)."""


class MetricError(ValidationError):
    """A budget matrix that is not a metric (asymmetric, negative, non-zero diagonal, NaN)."""


class TriangleInequalityError(MetricError):
    """A budget matrix breaks the triangle inequality and strict mode forbids the closure."""


class UnknownRecordError(ValidationError):
    """Records that are not elements of the universe."""


class InfeasibleDesignError(DPrivacyError):
    """A solver could not produce a design that satisfies every privacy constraint."""


class PrivacyViolationError(DPrivacyError):
    """A mechanism's parameters break its privacy condition for some constrained pair."""


class BudgetExceededError(DPrivacyError):
    """A query would spend more privacy budget than is left; nothing was charged."""


class ConfigError(DPrivacyError):
    """A mechanism config file is malformed, of an unknown version, or made for other inputs."""


class ConfigMismatchError(ConfigError):
    """A config's fingerprint does not match the universe, metric or workload it is loaded with."""


class UnsupportedOperationError(DPrivacyError):
    """An operation that the object cannot perform safely (e.g. one ProPer cannot track)."""


class CandidateSetTooLargeError(DPrivacyError, ValueError):
    """An exact sampler would have to enumerate more candidates than allowed."""


class MissingDependencyError(DPrivacyError, ImportError):
    """An optional dependency (an extra such as ``[plot]``) is not installed."""
