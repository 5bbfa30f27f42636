"""Lazy matplotlib: import it on first use, or say in one line how to install it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from dprivacy.errors import MissingDependencyError

INSTALL_HINT = 'plotting needs matplotlib, which is not installed: pip install "dprivacy[plot]"'


def figure(width: float, height: float, ncols: int = 1, **kw: Any) -> tuple[Any, Any]:
    """A pyplot-free ``Figure`` of ``width`` x ``height`` inches and its ``ncols`` axes.

    Raises
    ------
    MissingDependencyError
        matplotlib is not installed.
    """
    try:
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise MissingDependencyError(INSTALL_HINT) from exc
    fig = Figure(figsize=(width, height), layout="constrained")
    axes = fig.subplots(1, ncols, **kw)
    return fig, axes


def require() -> None:
    """Raise :class:`MissingDependencyError` now if matplotlib is missing (check before work)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        raise MissingDependencyError(INSTALL_HINT) from exc


def save(fig: Any, path: str | os.PathLike | None, dpi: int = 120) -> Any:
    """Write ``fig`` to ``path`` (if given) and return it."""
    if path is not None:
        fig.savefig(Path(path), dpi=dpi)
    return fig
