"""d_X-private mechanisms (and their eps-DP baselines) built from a solved Design."""

from dprivacy.mechanisms.laplace import DXLaplace, Laplace

__all__ = ["DXLaplace", "Laplace"]
