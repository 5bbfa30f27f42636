"""Example 1: noise scales of the Gender/Native/Age queries under the per-value metric (eq. (3)).

Universe: the 8 elements MYA, MYB, MNA, MNB, FYA, FYB, FNA, FNB (Gender M/F, Native Y/N, Age A/B).
The value Native = Y is sensitive with budget eps_Y; every other value has eps' > eps_Y.  The metric
is ``ValueWeighted`` with the min rule of eq. (3) (the paper's) and, for contrast, the max rule
(paper §5: it "breaks the requirement").  Each query is designed on its own with the closed form of
paper §4.1 (noise scale = max_ij |f_i - f_j| / d_ij).  Target T10 (docs/reproduction.md):
Y -> 1/eps_Y; the non-sensitive M and MA -> 1/eps'; MYA -> 1/eps_Y; under the max rule Y -> 1/eps'.
The eps_min-DP baseline gives every query 1/eps_Y.
Privacy condition of every design: beta* |f_i - f_j| <= d(chi_i, chi_j) for all pairs.

Run:  python -m experiments.example1_noise_scales [--quick] [--seed S]
Output columns: rule, query, noise_scale, expected_scale, baseline_scale, IF, match.
(--quick and --seed are accepted for uniformity; the experiment is deterministic and tiny.)
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

import dprivacy as dp
from dprivacy.data import load_example1
from experiments import _common as C

NAME = "example1_noise_scales"
COLUMNS = ["rule", "query", "noise_scale", "expected_scale", "baseline_scale", "IF", "match"]
QUERIES = {"Y": "native == 'Y'", "M": "gender == 'M'", "MA": "(gender == 'M') & (age == 'A')",
           "MYA": "(gender == 'M') & (native == 'Y') & (age == 'A')"}


def run(quick: bool = False, seed: int = 0, outdir: Path = C.RESULTS_DIR,
        eps_y: float = 1.0, eps_prime: float = 5.0) -> pd.DataFrame:
    """Closed-form noise scale of each query under the min and max rules."""
    el = load_example1()
    U = dp.Universe.from_dataframe(el, ["gender", "native", "age"])
    budgets = {"gender": {"M": eps_prime, "F": eps_prime}, "native": {"Y": eps_y, "N": eps_prime},
               "age": {"A": eps_prime, "B": eps_prime}}
    expected = {"min": {"Y": 1 / eps_y, "M": 1 / eps_prime, "MA": 1 / eps_prime, "MYA": 1 / eps_y},
                "max": {"Y": 1 / eps_prime, "M": 1 / eps_prime, "MA": 1 / eps_prime,
                        "MYA": 1 / eps_prime}}
    rows = []
    for rule in ("min", "max"):
        M = dp.metrics.ValueWeighted(budgets, rule=rule)
        for q, expr in QUERIES.items():
            W = dp.Workload.from_predicates(U, {q: expr})
            d = dp.design(W, U, M, method="closed_form")
            scale = float(d.noise_scale[0])
            rows.append({"rule": rule, "query": q, "noise_scale": scale,
                         "expected_scale": expected[rule][q],
                         "baseline_scale": float(W.sensitivity() / M.eps_min(U)),
                         "IF": float(dp.improvement_factor(W, U, M, d)),
                         "match": bool(np.isclose(scale, expected[rule][q], rtol=1e-9))})
    df = pd.DataFrame(rows, columns=COLUMNS)
    C.write_csv(df, outdir, NAME)
    _plot(df, outdir, eps_y, eps_prime)
    return df


def _plot(df: pd.DataFrame, outdir: Path, eps_y: float, eps_prime: float) -> None:
    fig, ax = plt.subplots(figsize=(6, 3.4))
    qs = list(QUERIES)
    x = np.arange(len(qs))
    for off, rule, color in ((-0.2, "min", "#3a6ea5"), (0.2, "max", "#c0392b")):
        s = df[df.rule == rule].set_index("query").loc[qs]
        ax.bar(x + off, s.noise_scale, width=0.4, color=color, label=f"{rule} rule (eq. (3))"
               if rule == "min" else "max rule")
    ax.axhline(1 / eps_y, color="k", ls="--", lw=0.8, label=f"1/eps_Y = {1 / eps_y:g} (baseline)")
    ax.axhline(1 / eps_prime, color="grey", ls=":", lw=0.8, label=f"1/eps' = {1 / eps_prime:g}")
    ax.set_xticks(x, qs)
    ax.set_ylabel("Laplace noise scale")
    ax.set_title("Example 1: designed noise scale per query", fontsize=10)
    ax.legend(fontsize=7)
    C.save_figure(fig, outdir, NAME)


def summarize(df: pd.DataFrame) -> pd.DataFrame:
    return df


if __name__ == "__main__":
    C.main(NAME, __doc__, run, summarize, sys.argv[1:])
