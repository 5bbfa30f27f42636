"""dprivacy: design d_X-private mechanisms for linear queries by optimisation."""

from dprivacy import errors

__all__ = ["errors"]
__version__ = "0.1.0"
