"""Run every reproduction script and compare the results with the paper's targets T1-T10.

Run:  python -m experiments.run_all [--quick] [--seed S] [--outdir DIR] [--only NAME ...]
(also ``dprivacy reproduce --all [--quick]``).  Each experiment prints its table and writes
``<name>.csv`` / ``<name>.png`` (to experiments/results/, or experiments/results/quick/ with
--quick, so quick runs never overwrite the full results); this script adds ``targets.csv`` and
``targets.md`` (the paper's targets, docs/reproduction.md, next to what was measured) and
``run_all_times.csv`` (wall time per experiment) to the output folder.
"""

from __future__ import annotations

import importlib
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pandas as pd

from experiments import _common as C
from experiments import targets

#: The reproduction scripts, in the paper's order.
EXPERIMENTS = ("fig2b_single_synthetic", "fig2cd_multi_strategies", "fig3b_us_cities",
               "elevation_query", "fig4_blowfish_rmse", "fig5_blowfish_if", "example1_noise_scales")


@dataclass(frozen=True)
class Outcome:
    """What :func:`run_all` returns: each experiment's DataFrame, the targets table, timings."""

    results: dict[str, pd.DataFrame]
    targets: pd.DataFrame
    seconds: dict[str, float]

    @property
    def total_seconds(self) -> float:
        return float(sum(self.seconds.values()))


def load(name: str) -> ModuleType:
    """The module of experiment ``name``; raises KeyError naming the known experiments."""
    if name not in EXPERIMENTS:
        raise KeyError(f"unknown experiment {name!r}; choose one of: {', '.join(EXPERIMENTS)}")
    return importlib.import_module(f"experiments.{name}")


def run_all(quick: bool = False, seed: int = 0, outdir: Path | None = None,
            names: Sequence[str] | None = None, echo: bool = True) -> Outcome:
    """Run the experiments ``names`` (default all), print their tables, write the targets table.

    ``outdir`` defaults to experiments/results/ (full) or experiments/results/quick/ (quick).
    """
    names = list(names) if names else list(EXPERIMENTS)
    modules = [load(n) for n in names]
    outdir = Path(outdir) if outdir is not None else C.default_outdir(quick)
    results, seconds = {}, {}
    for name, mod in zip(names, modules, strict=True):
        t0 = time.perf_counter()
        df = mod.run(quick=quick, seed=seed, outdir=outdir)
        seconds[name] = time.perf_counter() - t0
        results[name] = df
        if echo:
            print(f"\n== {name} ({seconds[name]:.1f} s) ==")
            print(C.format_table(mod.summarize(df)))
    tg = targets.compare(results)
    outdir.mkdir(parents=True, exist_ok=True)
    tg.to_csv(outdir / "targets.csv", index=False)
    mode = "--quick" if quick else "full"
    (outdir / "targets.md").write_text(
        f"<!-- python -m experiments.run_all ({mode}, seed {seed}); "
        f"{sum(seconds.values()):.0f} s -->\n" + targets.to_markdown(tg) + "\n")
    pd.DataFrame({"experiment": list(seconds), "seconds": list(seconds.values())}).to_csv(
        outdir / "run_all_times.csv", index=False)
    if echo:
        print(f"\n== targets (docs/reproduction.md) ==\n{targets.to_markdown(tg)}")
        print(f"\ntotal {sum(seconds.values()):.1f} s ({mode}); results in {outdir}")
    return Outcome(results, tg, seconds)


def main(argv: Sequence[str] | None = None) -> int:
    p = C.parser("run_all", __doc__)
    p.add_argument("--only", nargs="+", metavar="NAME", choices=EXPERIMENTS,
                   help="run only these experiments")
    args = p.parse_args(argv)
    run_all(args.quick, args.seed, args.outdir, args.only)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
