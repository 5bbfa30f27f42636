"""ProPer on live data: the query-rate bound b·f/(l·ε) (ProPer, POPL'15 §8).

The claim (informal, "future work" in the seed): for a stream with flow rate f, queue size l and
per-record budget b, ε-DP queries issued at a rate below (b × f)/(l × ε) are all answered "without
excessive noise caused by blocking too many old records".

Simulation, with the library's own ProPer table and ledger: every tick a batch of f new records
arrives with budget b (``insert``, fresh ids) and, once the queue holds l records, the oldest
batch leaves (``delete``); both run as the table's user-defined ``refresh`` (``set_refresh``).
Queries (``noisy_count(ε)`` over the whole queue, the case the formula assumes) arrive at the
exact times j/q, q = c·q*, q* = b·f/(l·ε); a query at the same instant as an arrival runs after it.
Before each query the curator side reads the ledger and counts the records that cannot pay.

Reading of the claim: a record stays l/f ticks and pays ε for each of the q·l/f queries it sees,
so it is never blocked iff q·l/f·ε ≤ b, i.e. q ≤ q*. Above the bound it pays for its first
k = b/ε queries and is blocked in the rest, so the blocked share of a full queue is
max(0, 1 − k/(q·l/f)) (= 1 − 1/c when b/ε is an integer). Checked: no record is ever blocked at
c ≤ 1, blocking appears at every c > 1 (the bound is tight), and the measured blocked share
matches the prediction, in three configurations of (b, f, l, ε) with different q*.

Privacy condition: every answer is an ε-query of ProPer's Query rule; each record's total loss is
at most its budget b (ProPer Theorem 2). The blocked counts are read from the ledger by the
experiment (the curator), never released.

Run: ``python -m experiments.tables_live_rate [--quick] [--seed S] [--outdir DIR]``; writes
``tables_live_rate.csv`` and ``.png``.
"""

from __future__ import annotations

import sys
from collections import deque
from fractions import Fraction
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from dprivacy.tables import MemoryLedger, ProPerTable
from experiments import _common as C

NAME = "tables_live_rate"

#: (label, b, f, l, ε): q* = b·f/(l·ε) = 1, 2.5 and 0.4 queries per tick.
CONFIGS = [
    ("b=1 f=5 l=50 eps=0.1", "1", 5, 50, "0.1"),
    ("b=0.5 f=10 l=40 eps=0.05", "0.5", 10, 40, "0.05"),
    ("b=2 f=2 l=40 eps=0.25", "2", 2, 40, "0.25"),
]
RATIOS = ["0.25", "0.5", "0.75", "0.9", "1", "1.1", "1.25", "1.5", "2", "3", "4"]
QUICK_RATIOS = ["0.5", "1", "1.25", "2"]


def predicted_blocked(b: Fraction, eps: Fraction, q: Fraction, residence: int) -> float:
    """Blocked share of a full queue: max(0, 1 − k/(q·l/f)), k = ⌊b/ε⌋ queries paid per record."""
    k = b // eps
    return max(0.0, float(1 - k / (q * residence)))


def simulate(b: Fraction, f: int, queue: int, eps: Fraction, q: Fraction, ticks: int,
             rng: np.random.Generator) -> dict[str, float]:
    """Run the stream for ``ticks`` ticks at query rate ``q`` per tick; statistics of the queries
    issued once the first records have lived a whole residence l/f (steady state)."""
    if queue % f:
        raise ValueError(f"l = {queue} must be a multiple of f = {f} (whole batches)")
    residence = queue // f
    batches: deque[np.ndarray] = deque()
    budgets = MemoryLedger()  # the owner's handle on the personal budgets
    table = ProPerTable(pd.DataFrame({"v": np.zeros(0)}), budget=float(b), ledger=budgets,
                        noise_seed=int(rng.integers(0, 2**31)))  # a simulation: seeded noise
    new = pd.DataFrame({"v": np.ones(f)})

    def arrive(t: ProPerTable) -> None:  # the user-defined refresh: one batch in, the oldest out
        if len(batches) == residence:
            t.delete(ids=batches.popleft())
        batches.append(t.insert(new, budget=float(b)))

    table.set_refresh(arrive)
    blocked, answers = [], []
    j = 0
    for tick in range(ticks):
        table.refresh()
        while Fraction(j) / q < tick + 1:  # the queries at times j/q in [tick, tick + 1)
            j += 1
            if tick < 2 * residence:
                table.noisy_count(float(eps))
                continue
            ids = np.concatenate(batches)
            blocked.append(float(np.mean(budgets.remaining(ids) < float(eps))))
            answers.append(table.noisy_count(float(eps)))
    bl = np.asarray(blocked)
    return {
        "queries": float(bl.size),
        "blocked_share": float(bl.mean()) if bl.size else 0.0,
        "max_blocked_share": float(bl.max()) if bl.size else 0.0,
        "queries_with_blocking": float(np.mean(bl > 0)) if bl.size else 0.0,
        "answer_over_l": float(np.mean(answers) / queue) if answers else float("nan"),
    }


def run(quick: bool = False, seed: int = 0, outdir: Path | None = None) -> pd.DataFrame:
    """Sweep c = q/q* for each configuration; write the CSV and PNG; return the table."""
    outdir = Path(outdir) if outdir is not None else C.default_outdir(quick)
    rng = np.random.default_rng(seed)
    configs = CONFIGS[:1] if quick else CONFIGS
    ratios = QUICK_RATIOS if quick else RATIOS
    rows = []
    grid = [(cfg, c) for cfg in configs for c in ratios]
    for (label, b_s, f, queue, eps_s), c_s in C.progress(grid, NAME):
        b, eps, c = Fraction(b_s), Fraction(eps_s), Fraction(c_s)
        q_star = b * f / (queue * eps)
        q = c * q_star
        residence = queue // f
        ticks = (8 if quick else 30) * residence
        stats = simulate(b, f, queue, eps, q, ticks, rng)
        rows.append({"config": label, "b": float(b), "f": f, "l": queue, "eps": float(eps),
                     "q_star": float(q_star), "c": float(c), "q": float(q),
                     "queries_per_record": float(q * residence), **stats,
                     "predicted_blocked_share": predicted_blocked(b, eps, q, residence)})
    df = pd.DataFrame(rows)
    df["abs_error_vs_prediction"] = (df["blocked_share"] - df["predicted_blocked_share"]).abs()
    df["claim_holds"] = np.where(df["c"] <= 1, df["max_blocked_share"] == 0,
                                 df["blocked_share"] > 0)
    C.write_csv(df, outdir, NAME)
    _plot(df, outdir)
    return df


def _plot(df: pd.DataFrame, outdir: Path) -> None:
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.8))
    cs = np.linspace(df["c"].min(), df["c"].max(), 200)
    a1.plot(cs, np.maximum(0, 1 - 1 / cs), "k--", lw=1, label="max(0, 1 − 1/c)")
    for label, g in df.groupby("config", sort=False):
        a1.plot(g["c"], g["blocked_share"], "o-", label=str(label))
        a2.plot(g["c"], g["answer_over_l"], "o-", label=str(label))
    for ax in (a1, a2):
        ax.axvline(1, color="grey", lw=0.8)
        ax.set_xlabel("query rate / (b·f/(l·ε))")
    a1.set_ylabel("share of queue blocked per query")
    a2.set_ylabel("mean noisy count / l")
    a1.set_title("records blocked (ledger, curator view)")
    a2.set_title("answers of NoisyCount(ε) over the queue")
    a1.legend(fontsize=7)
    C.save_figure(fig, outdir, NAME)


def summarize(df: pd.DataFrame) -> pd.DataFrame:
    return df[["config", "c", "queries", "blocked_share", "predicted_blocked_share",
               "max_blocked_share", "answer_over_l", "claim_holds"]]


if __name__ == "__main__":
    C.main(NAME, __doc__, run, summarize, sys.argv[1:])
