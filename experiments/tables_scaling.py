"""The scaling-factor example of FW-PINQ: s = A1 B2 C3 D10 E3 F3 G22 (FW-PINQ §4.2, Fig. 2-3).

A is the input; A→B has stability 2 (GroupBy), A→C stability 3 (SelectMany(3)), B→D stability 5
(SelectMany(5)); C is partitioned into E and F; G combines D (stability 1) and E (stability 4)
by a Concat of D with SelectMany(4) of E, so s_G = 10·1 + 3·4 = 22. The published table's
"C | 1" is a typo (E = F = 3 and G = 22 need s_C = 3). The measured costs come from the budget
agents (a dry run of an ε-query and the budget actually taken by a real one), not from the
formula.

Run: ``python -m experiments.tables_scaling [--quick]``; writes
``experiments/results/tables_scaling.csv`` and ``.png``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from dprivacy.tables import Queryable  # noqa: E402
from experiments import _common as C  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
EXPECTED = {"A": 1, "B": 2, "C": 3, "D": 10, "E": 3, "F": 3, "G": 22}


def repeat(k: int):
    """A per-record flat-map with k copies of the record's key."""
    return lambda r: [r["key"] if "key" in r else r["value"]] * k


def build(df: pd.DataFrame, budget: float) -> dict[str, Queryable]:
    a = Queryable(df, budget=budget, noise_seed=0)
    b = a.group_by("key")
    c = a.select_many(3, repeat(3))
    d = b.select_many(5, repeat(5))
    parts = c.partition([0, 1], lambda r: r["value"] % 2)
    e, f = parts[0], parts[1]
    g = d.concat(e.select_many(4, repeat(4)))
    return {"A": a, "B": b, "C": c, "D": d, "E": e, "F": f, "G": g}


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a smaller input table")
    ap.add_argument("--eps", type=float, default=0.1)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    n = 100 if args.quick else 10_000
    df = pd.DataFrame({"key": np.arange(n) % 10, "v": np.arange(n)})
    rows = []
    for name in EXPECTED:
        tables = build(df, budget=1000.0)  # a fresh source per table: a real query's charge
        t = tables[name]
        dry = t.cost(args.eps)
        t.noisy_count(args.eps)
        spent = 1000.0 - float(tables["A"].remaining_budget())
        rows.append({"table": name, "expected_s": EXPECTED[name], "dry_run_cost": dry,
                     "charged": spent, "measured_s": spent / args.eps})
    table = pd.DataFrame(rows)
    print(table.to_string(index=False, float_format="%.4f"))
    stem = "tables_scaling_quick" if args.quick else "tables_scaling"
    C.write_csv(table, args.out, stem)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.bar(table["table"], table["measured_s"], label="measured (agents)")
    ax.plot(table["table"], table["expected_s"], "kx", label="paper: s = Σ c_i s_i")
    ax.set_ylabel("scaling factor s (cost of an ε-query / ε)")
    ax.set_title("FW-PINQ scaling factors, Fig. 2-3")
    ax.legend()
    C.save_figure(fig, args.out, stem)
    return table


if __name__ == "__main__":
    main()
