"""The Gaussian-noise flags of design, verify and release (``--noise``, ``--rho``, ``--delta``)
and what they print: the zCDP budget and the (eps, delta) a pair at a given distance gets."""

from __future__ import annotations

import argparse
import math
from typing import Any

import numpy as np

from dprivacy.cli.exits import UsageError

NOISES = ("laplace", "gaussian")


def _rho(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (v > 0 and math.isfinite(v)):
        raise argparse.ArgumentTypeError(f"{text}: a zCDP budget rho is a finite number > 0")
    return v


def _delta(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < v < 1:
        raise argparse.ArgumentTypeError(f"{text}: delta is a probability strictly between 0 "
                                         "and 1 (e.g. 1e-6)")
    return v


def add_noise_args(s: argparse.ArgumentParser, *, design: bool) -> None:
    """``--noise``, ``--rho`` and ``--delta``: to design with (``design``), else to expect of
    the config (verify and release refuse a config of another noise or rho)."""
    verb = "design for" if design else "expect in CONFIG (refused otherwise):"
    s.add_argument("--noise", choices=NOISES, default=None,
                   help=f"{verb} 'laplace' (default; pure d_X-privacy) or 'gaussian' (per-query "
                        "Gaussian noise, or with --method strategy a Gaussian strategy: "
                        "rho-zCDP per unit of the metric; needs --rho)")
    s.add_argument("--rho", type=_rho, default=None, metavar="R",
                   help=f"{verb} the zCDP budget per unit of the metric (with --noise gaussian)")
    s.add_argument("--delta", type=_delta, default=None, metavar="D",
                   help="also print the (eps, delta = D) of a Gaussian mechanism for pairs at "
                        "several distances (zCDP conversion and the exact Gaussian curve)")


def check_design_args(args: argparse.Namespace) -> str:
    """The noise to design with; refuse --rho without Gaussian noise and Gaussian without rho."""
    noise = args.noise or "laplace"
    if noise == "gaussian":
        if args.rho is None:
            raise UsageError("--noise gaussian needs --rho R (the zCDP budget per unit of the "
                             "metric), e.g. --rho 0.5")
        if args.method not in ("exact", "strategy"):
            raise UsageError(f"--noise gaussian designs with --method exact (per-query noise) or "
                             f"--method strategy, not {args.method}")
        if args.n is not None:
            raise UsageError("--noise gaussian does not take --n")
    elif args.rho is not None:
        raise UsageError("--rho is the budget of Gaussian noise: add --noise gaussian")
    if args.delta is not None and noise != "gaussian":
        raise UsageError("--delta reports the (eps, delta) of Gaussian noise: add --noise "
                         "gaussian")
    return noise


def config_noise(cfg: Any) -> tuple[str, float | None]:
    """(noise, rho) a loaded config records."""
    if cfg.kind == "gaussian":
        return "gaussian", float(cfg.rho)
    if cfg.kind == "strategy" and (cfg.strategy or {}).get("noise") == "gaussian":
        return "gaussian", float(cfg.strategy["rho"])
    return "laplace", None


def expect_config(cfg: Any, args: argparse.Namespace, name: str) -> tuple[str, float | None]:
    """Refuse a config whose noise or rho is not what ``--noise`` / ``--rho`` expect."""
    noise, rho = config_noise(cfg)
    if args.noise is not None and args.noise != noise:
        raise UsageError(f"CONFIG {name!r} adds {noise} noise, not --noise {args.noise}")
    if args.rho is not None and (rho is None or not math.isclose(rho, args.rho, rel_tol=1e-12)):
        have = "no rho (pure d_X-privacy)" if rho is None else f"rho = {rho:g}"
        raise UsageError(f"CONFIG {name!r} has {have}, not --rho {args.rho:g}")
    if args.delta is not None and noise != "gaussian":
        raise UsageError(f"--delta: CONFIG {name!r} adds Laplace noise (pure, delta = 0)")
    return noise, rho


def gaussian_text(rho: float, metric: Any, universe: Any, delta: float | None,
                  sigma: np.ndarray | None = None) -> str:
    """What a Gaussian design promises, for the report of design and verify."""
    lines = [f"noise: Gaussian, rho = {rho:g}-zCDP per unit of the metric {metric!r}: moving "
             "one record between elements at distance d has Renyi divergence <= alpha * rho * d "
             "(every order alpha); releases compose by adding rho"]
    if sigma is not None:
        s = np.asarray(sigma, dtype=float)
        lines.append(f"sigma per query: min {s.min():.6g}, max {s.max():.6g}; total variance "
                     f"{float(np.sum(s**2)):.6g}")
    if delta is not None:
        from dprivacy.zcdp import gaussian_eps, zcdp_eps

        d0 = float(metric.eps_min(universe))
        dists = [d0 * k for k in (1, 2, 5, 10)] if math.isfinite(d0) and d0 > 0 else [1.0]
        lines.append(f"(eps, delta = {delta:g}) per pair, by distance d (in units of the "
                     "metric; eps_zcdp = rho d + 2 sqrt(rho d ln(1/delta)); eps_exact from the "
                     "continuous Gaussian's exact curve at mu = sqrt(2 rho d)):")
        lines.append(f"  {'distance':>12}  {'rho*d':>12}  {'eps_zcdp':>12}  {'eps_exact':>12}")
        for d in dists:
            rd = rho * d
            lines.append(f"  {d:12.6g}  {rd:12.6g}  {zcdp_eps(rd, delta):12.6g}  "
                         f"{gaussian_eps(math.sqrt(2 * rd), delta):12.6g}")
    return "\n".join(lines)
