"""All 2-way marginals of an 8x8x8 attribute universe under the attribute-weighted metric: how far
can a strategy go, and what can be proven?

Instance (the last row of experiments/results/strategy.md): three attributes with 8 values each,
d(x, x') = number of attributes in which x and x' differ (eps = 1 per attribute), workload: the
192 cells of the three 2-way marginals.  The exact (w, beta) design has error 6144, the optimised
strategy 5376; the issue asks for 2x (<= 3072).  The script computes, with
:mod:`solvers.strategy.marginals` and plain numpy:

1. the best weighted-marginal strategy (HDMM's marginal family under the d_X constraint) in the
   residual algebra: 5376 (the 2-way marginals at weight 1/4, answered by least squares);
2. the exact optimum of the l2 relaxation, a lower bound for every strategy, with its dual
   certificate: 1344; and the bound conditional on the line lemma (a line's 28 pairs carry at
   most 16 in squared l2 norm, not 28): 2352.  The lemma is checked by random search;
3. a ceiling on every bound that sees a strategy only through its Gram averaged over the
   instance's symmetries (the only way the symmetry can be used under Laplace noise): a feasible
   two-row strategy whose averaged Gram would allow error 2811 < 3072, so such bounds can never
   prove the 2x target impossible;
4. full-strategy searches (dense A, every edge constraint, several random and structured starts)
   on the same workload with 2, 3 (and with --full 4) values per attribute, against the
   weighted marginals.

Run:  python -m experiments.marginals_bound [--quick] [--full]
Output: experiments/results/marginals_bound.md and marginals_bound.csv (the search table).
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.linalg import null_space
from scipy.optimize import minimize

from experiments import _common as C
from solvers.strategy import marginals as mg
from solvers.strategy.constraint import PairSet
from solvers.strategy.objective import Objective, gram

NAME = "marginals_bound"


def instance(n: int, k: int = 3, order: int = 2) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(codes, I, J, F): the product universe [n]^k, its edges (pairs differing in one
    attribute, eps = 1) and the indicator rows of every order-way marginal."""
    codes = np.array(list(itertools.product(range(n), repeat=k)))
    diff = (codes[:, None, :] != codes[None, :, :]).sum(axis=2)
    I, J = np.nonzero(np.triu(diff == 1))  # noqa: N806, E741
    rows = []
    for S in itertools.combinations(range(k), order):
        _, g = np.unique(codes[:, list(S)], axis=0, return_inverse=True)
        M = np.zeros((int(g.max()) + 1, len(codes)))
        M[np.ravel(g), np.arange(len(codes))] = 1.0
        rows.append(M)
    return codes, I, J, np.vstack(rows)


def exact_error(F: np.ndarray, A: np.ndarray, I: np.ndarray, J: np.ndarray) -> float:  # noqa: N803, E741
    """2 ||F Q (A Q / c)^+||_F^2, c the largest edge l1 distance (the total is known: Q spans the
    complement of 1); inf when a query is not answerable."""
    c = float(np.abs(A[:, I] - A[:, J]).sum(axis=0).max())
    Q = null_space(np.ones((1, F.shape[1])))
    AQ = A @ Q / c
    R = np.linalg.pinv(AQ, rcond=1e-10)
    FQ = F @ Q
    if np.abs(FQ @ R @ AQ - FQ).max() > 1e-6:
        return float("inf")
    return 2.0 * float(np.sum((FQ @ R) ** 2))


SCHEDULE = ((30, 1e-2), (100, 1e-3), (300, 1e-3), (1e3, 1e-4), (3e3, 1e-5), (1e4, 1e-6), (3e4, 1e-7))


def anneal(A: np.ndarray, obj: Objective, ps: PairSet, Fc: np.ndarray, maxiter: int = 500) -> float:
    """L-BFGS on log f(A) + 2 log c_smooth(A) over every edge, the smoothed maximum sharpened
    step by step (a longer schedule than the library's polish); the best exact error seen."""
    best = exact_error(Fc, A, ps.I, ps.J)
    for t, d in SCHEDULE:
        A = A / float(ps.ratios(A).max())
        delta, shape = d * float(np.abs(A).max()), A.shape

        def fun(z: np.ndarray, t: float = t, delta: float = delta,
                shape: tuple[int, ...] = shape) -> tuple[float, np.ndarray]:
            X = z.reshape(shape)
            f, gf = obj.value_grad(X)
            if not np.isfinite(f) or f <= 0:
                return 1e30, np.zeros_like(z)
            cs, gc = ps.smooth(X, t, delta)
            return float(np.log(f) + 2 * np.log(cs)), (gf / f + 2 * gc / cs).ravel()

        A = minimize(fun, A.ravel(), jac=True, method="L-BFGS-B",
                     options={"maxiter": maxiter, "maxcor": 30}).x.reshape(shape)
        best = min(best, exact_error(Fc, A, ps.I, ps.J))
    return best


def search(n: int, starts: int, seed: int, k: int = 3, order: int = 2) -> dict:
    """Dense full-strategy search on [n]^3: random Gaussian starts (p = 2N), marginals plus noise,
    marginals plus random checkerboard rows; polished on every edge (L-BFGS on the scale-free
    error with a smoothed max, :func:`anneal`)."""
    codes, I, J, F = instance(n, k, order)  # noqa: N806, E741
    N = len(codes)  # noqa: N806
    ps = PairSet(I, J, np.ones(I.size))
    Fc = F - F.mean(axis=1, keepdims=True)
    obj = Objective(gram(F, True), True)
    rng = np.random.default_rng(seed)
    marg = F / float(ps.ratios(F).max())
    best, t0 = float("inf"), time.perf_counter()
    for s in range(starts):
        kind = s % (3 if k >= 2 else 2)
        if kind == 0:
            A0 = rng.standard_normal((2 * N, N))
        elif kind == 1:
            A0 = np.vstack([marg, 0.5 * rng.standard_normal((N, N)) / N])
        else:
            def sign() -> np.ndarray:
                return rng.permutation(np.r_[np.ones(n // 2), -np.ones(n - n // 2)])
            cb = [sign()[codes[:, a]] * sign()[codes[:, b]] for a, b in
                  itertools.combinations(range(k), 2) for _ in range(n)]
            A0 = np.vstack([marg, 0.1 * np.array(cb)])
        if not np.isfinite(obj.value(A0)):
            A0 = np.vstack([A0, 0.01 * np.eye(N)])

        best = min(best, anneal(A0, obj, ps, Fc))
    dom, eps = (n,) * k, (1.0,) * k
    return {"workload": f"[{n}]^{k}, all {order}-way marginals", "n": n, "N": N,
            "edges": int(I.size), "starts": starts,
            "weighted marginals": mg.best_weighted_marginals(dom, order, eps)[1],
            "identity": exact_error(Fc, np.eye(N), I, J), "best full-A search": best,
            "l2 bound": mg.l2_bound(dom, order, eps)[0],
            "conditional bound": mg.l2_bound(dom, order, eps, line_factor=[
                (n * n // 4) / (n * (n - 1) / 2)] * k)[0],
            "seconds": round(time.perf_counter() - t0, 1)}


def line_lemma(n: int, starts: int, seed: int) -> float:
    """Largest sum over the pairs of n points of ||P_x - P_y||_2^2 / max ||P_x - P_y||_1^2 found by
    random search (p = 1..16 coordinates); the lemma says floor(n^2 / 4)."""
    pairs = np.array(list(itertools.combinations(range(n), 2)))
    rng = np.random.default_rng(seed)
    best = 0.0
    for s in range(starts):
        p = [1, 2, 4, 8, 16][s % 5]

        def f(z: np.ndarray, t: float, d: float, p: int = p) -> tuple[float, np.ndarray]:
            A = z.reshape(p, n)
            D = A[:, pairs[:, 0]] - A[:, pairs[:, 1]]  # noqa: N806
            root = np.sqrt(D * D + d * d)
            l1 = (root - d).sum(axis=0)
            top = l1.max()
            w = np.exp(t * (l1 - top))
            c = top + np.log(w.sum()) / t
            sq = float((D * D).sum())
            gD = 2 * D / sq - 2 * (D / root) * (w / w.sum()) / c  # noqa: N806
            G = np.zeros((p, n))  # noqa: N806
            np.add.at(G.T, pairs[:, 0], gD.T)
            np.add.at(G.T, pairs[:, 1], -gD.T)
            return -(np.log(sq) - 2 * np.log(c)), -G.ravel()

        z = rng.standard_normal(p * n)
        for t, d in ((30, 1e-2), (300, 1e-3), (3000, 1e-4), (30000, 1e-6)):
            z = minimize(f, z, args=(t, d), jac=True, method="L-BFGS-B",
                         options={"maxiter": 2000}).x
        A = z.reshape(p, n)
        D = A[:, pairs[:, 0]] - A[:, pairs[:, 1]]  # noqa: N806
        best = max(best, float((D * D).sum() / np.abs(D).sum(axis=0).max() ** 2))
    return best


def gram_only_ceiling(n: int = 8) -> dict:
    """A feasible two-row strategy on [n]^3 (n even): (1/2) s(x_a) s(x_b) and (1/2) s(x_c) with s a
    balanced +-1 split.  Its Gram averaged over the symmetries has t1 = tr(Pi_1 X) and t2 =
    tr(Pi_2 X); any bound of the form error(A) >= 2 tr(G avg(A'A)^+) is at most the value here."""
    codes, I, J, _ = instance(n)  # noqa: N806, E741
    s = np.r_[np.ones(n // 2), -np.ones(n // 2)]
    A = np.vstack([0.5 * s[codes[:, 0]] * s[codes[:, 1]], 0.5 * s[codes[:, 2]]])
    ratio = float(np.abs(A[:, I] - A[:, J]).sum(axis=0).max())
    spec = mg.workload_spectrum((n,) * 3, 2)
    # residual content of each row: row 1 lies in V_a (x) V_b (x) 1, row 2 in 1 (x) 1 (x) V_c
    t2 = float(np.sum(A[0] ** 2))
    t1 = float(np.sum(A[1] ** 2))
    d1, d2 = (n - 1), (n - 1) ** 2
    lam1, lam2 = spec[(0,)][0], spec[(0, 1)][0]
    # averaged Gram: mu_1 = t1 / (3 d1), mu_2 = t2 / (3 d2); error 2 sum lam d / mu over 6 subsets
    value = 2.0 * (3 * lam1 * d1 / (t1 / (3 * d1)) + 3 * lam2 * d2 / (t2 / (3 * d2)))
    return {"max edge ratio": ratio, "t1": t1, "t2": t2, "ceiling": value}


def run(quick: bool = False, full: bool = False, seed: int = 0,
        outdir: Path = C.RESULTS_DIR) -> pd.DataFrame:
    t0 = time.perf_counter()
    dom, eps = (8, 8, 8), (1.0, 1.0, 1.0)
    theta, wm = mg.best_weighted_marginals(dom, 2, eps)
    lb, nu = mg.l2_bound(dom, 2, eps)
    mu = mg.l2_primal(dom, 2, eps, nu)
    kappa = 16.0
    lb_cond, _ = mg.l2_bound(dom, 2, eps, line_factor=[kappa / 28] * 3)
    lemma = {m: line_lemma(m, 5 if quick else 15, seed) for m in ((3, 4, 8) if quick else (3, 4, 5, 6, 8))}
    ceil = gram_only_ceiling(8)
    sizes = [(8, 1, 1, 4 if quick else 8), (2, 3, 2, 12 if quick else 30),
             (3, 3, 2, 3 if quick else 9)] + ([(4, 3, 2, 6)] if full else [])
    df = pd.DataFrame([search(m, st, seed, kk, od) for m, kk, od, st in sizes])
    C.write_csv(df, outdir, NAME)
    lines = [
        "# 2-way marginals on 8x8x8 under the attribute-weighted metric: strategies and bounds", "",
        f"`python -m experiments.marginals_bound{' --quick' if quick else ''}"
        f"{' --full' if full else ''}` ({time.perf_counter() - t0:.0f} s on the shared 2-core "
        "machine).  Instance: d(x, x') = number of differing attributes (eps = 1 each), "
        "192 queries; exact (w, beta) design 6144 and optimised strategy 5376 "
        "(experiments/results/strategy.md); the issue's target is 3072 (2x).", "",
        "| quantity | value |", "|---|---|",
        f"| best weighted marginals (closed form, all 7 subsets) | {wm:.6g} |",
        "| its weights | " + ", ".join(f"{''.join('abc'[i] for i in T)}: {t:.4g}"
                                      for T, t in theta.items() if t > 1e-9) + " |",
        f"| l2 relaxation, exact (lower bound for every strategy) | {lb:.6g} |",
        f"| its dual certificate nu | {', '.join(f'{v:.6g}' for v in nu)} |",
        "| its relaxed Gram mu_S (1-way, 2-way residuals) | "
        f"{mu[(0,)]:.4g}, {mu[(0, 1)]:.4g} |",
        f"| bound conditional on the line lemma (kappa = 16 of 28) | {lb_cond:.6g} |",
        f"| ceiling of every symmetrised-Gram bound (two-row strategy, max edge ratio "
        f"{ceil['max edge ratio']:.3g}, t1 = {ceil['t1']:.4g}, t2 = {ceil['t2']:.4g}) | "
        f"{ceil['ceiling']:.6g} |", "",
        "Line lemma (largest sum over the C(n, 2) pairs of n points of ||P_x - P_y||_2^2 with every "
        "||P_x - P_y||_1 <= 1, random search):", "",
        "| n | C(n,2) (l2 relaxation) | floor(n^2/4) (lemma) | largest found |", "|---|---|---|---|"]
    lines += [f"| {m} | {m * (m - 1) // 2} | {m * m // 4} | {v:.6g} |" for m, v in lemma.items()]
    lines += ["", "Full-strategy searches (dense A, every edge of the Hamming metric with eps = 1; "
              "random Gaussian, marginals plus noise and marginals plus checkerboard starts); "
              "[8]^1 with its 1-way marginal is the histogram of one attribute, a single line:", "",
              "| workload | N | edges | starts | weighted marginals | identity | best full-A search | "
              "l2 bound | conditional bound | s |", "|---|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['workload']} | {int(r['N'])} | {int(r['edges'])} | {int(r['starts'])} | "
              f"{r['weighted marginals']:.5g} | "
              f"{r['identity']:.5g} | {r['best full-A search']:.5g} | {r['l2 bound']:.5g} | "
              f"{r['conditional bound']:.5g} | {r['seconds']} |" for _, r in df.iterrows()]
    Path(outdir).mkdir(parents=True, exist_ok=True)
    (Path(outdir) / f"{NAME}.md").write_text("\n".join(lines) + "\n")
    return df


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = argparse.ArgumentParser(prog=f"python -m experiments.{NAME}", description=__doc__)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--full", action="store_true", help="also search n = 4 (minutes)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--outdir", type=Path, default=None)
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    df = run(a.quick, a.full, a.seed, a.outdir or C.default_outdir(a.quick))
    print(C.format_table(df))
    print(f"[{NAME}] {time.perf_counter() - t0:.1f} s")
    return df


if __name__ == "__main__":
    main(sys.argv[1:])
