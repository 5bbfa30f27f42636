"""Teachers / Managers / Headmasters: PINQ spends 3ε, ProPer 2ε (ProPer, POPL'15 §6.2, Fig. 4).

Every person holds at most two roles; the three role queries overlap pairwise but never all
three. PINQ cannot use parallel composition on overlapping groups, so three ε-queries cost 3ε of
the global budget; under ProPer each individual pays only for the queries that include them, so
the largest personal spend is 2ε. With disjoint groups both systems spend ε. In general, n
queries where every record is in at most g of them cost n·ε in PINQ and g·ε in ProPer.

Run: ``python -m experiments.tables_teachers [--quick]``; writes
``experiments/results/tables_teachers.csv`` and ``.png``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from dprivacy.tables import MemoryLedger, ProPerTable, Queryable  # noqa: E402
from experiments import _common as C  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
EPS = 0.1


def population(n_people: int, n_roles: int, g: int, seed: int = 0) -> pd.DataFrame:
    """Each person holds g distinct roles out of n_roles (roles as 0/1 columns r0, r1, ...)."""
    gen = np.random.default_rng(seed)
    roles = np.zeros((n_people, n_roles), dtype=bool)
    for i in range(n_people):
        roles[i, gen.choice(n_roles, size=g, replace=False)] = True
    return pd.DataFrame(roles, columns=[f"r{j}" for j in range(n_roles)])


def spend(df: pd.DataFrame, seed: int = 0) -> tuple[float, float]:
    """One ε-count per role in both systems: (PINQ global spend, ProPer largest personal spend).

    PINQ uses a partition (parallel composition) when the roles are disjoint, else one Where
    per role (sequential composition); ProPer always uses one Where per role."""
    pinq = Queryable(df, budget=100.0, noise_seed=seed)
    budgets = MemoryLedger()  # the owner's handle on the personal budgets
    prop = ProPerTable(df, budget=100.0, ledger=budgets, noise_seed=seed)
    cols = list(df.columns)
    disjoint = bool((df.to_numpy().sum(axis=1) <= 1).all())
    if disjoint:  # PINQ can use parallel composition: partition by the one role
        parts = pinq.partition(range(len(cols)), lambda r: next(
            (j for j, c in enumerate(cols) if r[c]), len(cols)))
        groups = [parts[j] for j in range(len(cols))]
    else:
        groups = [pinq.where(lambda r, c=col: r[c]) for col in cols]
    for grp, col in zip(groups, cols, strict=True):
        grp.noisy_count(EPS)
        prop.where(lambda r, c=col: r[c]).noisy_count(EPS)
    personal = 100.0 - budgets.remaining(np.arange(len(df)))
    return 100.0 - float(pinq.remaining_budget()), float(personal.max())


def staff() -> pd.DataFrame:
    """The paper's example: Alice Teacher+Headmaster, Bob Manager+Teacher, and others."""
    people = [("Alice", "Teacher", "Headmaster"), ("Bob", "Manager", "Teacher"),
              ("Carol", "Manager", "Headmaster"), ("Dave", "Teacher", None),
              ("Erin", "Clerk", None)]
    return pd.DataFrame(
        {r: [r in (a, b) for _, a, b in people] for r in ("Teacher", "Manager", "Headmaster")}
    )


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer people and cases")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    n_people = 200 if args.quick else 5000
    rows = []
    p, q = spend(staff())
    rows.append({"case": "paper example (3 roles, overlaps)", "queries": 3, "g": 2,
                 "pinq_spend": p, "proper_max_spend": q})
    cases = [(3, 1), (3, 2)] if args.quick else [(3, 1), (3, 2), (5, 1), (5, 2), (5, 3), (8, 2)]
    for n_roles, g in cases:
        p, q = spend(population(n_people, n_roles, g))
        rows.append({"case": f"{n_roles} roles, {g} per person", "queries": n_roles, "g": g,
                     "pinq_spend": p, "proper_max_spend": q})
    table = pd.DataFrame(rows)
    table["pinq_in_eps"] = table["pinq_spend"] / EPS
    table["proper_in_eps"] = table["proper_max_spend"] / EPS
    print(table.to_string(index=False, float_format="%.3f"))
    stem = "tables_teachers_quick" if args.quick else "tables_teachers"
    C.write_csv(table, args.out, stem)
    fig, ax = plt.subplots(figsize=(9, 4))
    x = np.arange(len(table))
    ax.bar(x - 0.2, table["pinq_in_eps"], 0.4, label="PINQ (global)")
    ax.bar(x + 0.2, table["proper_in_eps"], 0.4, label="ProPer (max personal)")
    ax.set_xticks(x, table["case"], rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("budget spent (multiples of ε)")
    ax.set_title("n overlapping ε-queries: PINQ n·ε vs ProPer g·ε")
    ax.legend()
    C.save_figure(fig, args.out, stem)
    return table


if __name__ == "__main__":
    main()
