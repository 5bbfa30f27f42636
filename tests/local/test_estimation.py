"""estimate_frequencies: input shares from any randomiser's reports, with standard errors that
hold, and a clear refusal for a randomiser that cannot tell its inputs apart."""

from __future__ import annotations

import numpy as np
import pytest

import dprivacy as dp
from dprivacy.errors import ValidationError
from dprivacy.local import MatrixRandomiser, NotIdentifiableError, estimate_frequencies, optimal_randomiser
from dprivacy.local.batch import sample_matrix
from dprivacy.local.case_studies import rr_matrix, warner_estimate

COUNTS = np.array([1000, 2000, 4000, 2000, 1000])  # 10 000 users over 5 points
TRUTH = COUNTS / COUNTS.sum()


def _line(eps_per_unit: float) -> MatrixRandomiser:
    """The optimal d_X randomiser of 5 points on a line (0, 1, ..., 4) under eps_per_unit * |x - y|."""
    U = dp.Universe.from_points(np.arange(5.0)[:, None])  # noqa: N806
    return optimal_randomiser(U, dp.metrics.Euclidean(eps_per_unit=eps_per_unit)).randomiser


@pytest.fixture(scope="module")
def optimal5() -> MatrixRandomiser:
    T = _line(1.0)  # noqa: N806
    assert T.matrix.shape == (5, 5)
    return T


def _reports(T: MatrixRandomiser, seed: int) -> np.ndarray:  # noqa: N803
    rows = np.repeat(np.arange(5), COUNTS)
    return sample_matrix(T, rows, np.random.default_rng(seed), as_rows=True)


@pytest.mark.parametrize("method", ["least_squares", "mle"])
def test_recovers_the_shares_of_10000_users_within_3_standard_errors(optimal5, method) -> None:
    T = optimal5  # noqa: N806
    labels = [T.outputs[j] for j in _reports(T, 0)]  # as replies carry them: output labels
    est = estimate_frequencies(T, labels, method=method)
    assert est.users == 10_000 and est.inputs == [0, 1, 2, 3, 4]
    assert np.all(est.std_errors > 0) and np.all(est.std_errors < 0.05)
    assert np.all(np.abs(est.shares - TRUTH) <= 3 * est.std_errors), (est.shares, est.std_errors)
    if method == "mle":
        assert est.converged and np.all(est.shares >= 0) and est.shares.sum() == pytest.approx(1.0)


@pytest.mark.parametrize("method", ["least_squares", "mle"])
def test_standard_errors_are_calibrated_over_repeated_simulations(optimal5, method) -> None:
    """Over 60 independent simulations, the error is within 2 standard errors for about 95 % of
    the 300 shares (the SE is neither far too small nor far too large), and the mean error is
    near 0; the SE matches the spread of the estimates across simulations."""
    T = optimal5  # noqa: N806
    ests, ses = [], []
    for seed in range(1, 61):
        e = estimate_frequencies(T.matrix, _reports(T, seed), method=method)
        ests.append(e.shares)
        ses.append(e.std_errors)
    z = (np.array(ests) - TRUTH) / np.array(ses)
    assert 0.88 <= np.mean(np.abs(z) <= 2) <= 1.0
    assert np.all(np.abs(z.mean(axis=0)) < 0.6)  # no bias beyond 0.6 SE (sd of the mean: 0.13)
    spread = np.array(ests).std(axis=0, ddof=1) / np.mean(ses, axis=0)
    assert np.all((spread > 0.6) & (spread < 1.3)), spread


def test_least_squares_agrees_with_warner_on_a_square_invertible_T() -> None:
    T = rr_matrix(1.0, 3)  # noqa: N806
    p = T.T @ np.array([0.5, 0.3, 0.2])  # the output distribution of these shares
    z = np.repeat([0, 1, 2], np.round(p * 1000).astype(int))
    est = estimate_frequencies(T, z)
    assert np.allclose(est.shares, warner_estimate(z, T))
    assert np.all(est.shares > 0.1)  # inside the simplex: there MLE is least squares
    assert np.allclose(estimate_frequencies(T, z, method="mle").shares, est.shares, atol=1e-7)
    # outside it (a negative least-squares share), MLE stays on the simplex
    z2 = np.array([0] * 500 + [1] * 300 + [2] * 200)
    assert estimate_frequencies(T, z2).shares.min() < 0
    mle = estimate_frequencies(T, z2, method="mle").shares
    assert mle.min() >= 0 and mle.sum() == pytest.approx(1.0)


def test_more_outputs_than_inputs_and_labels() -> None:
    """A 2-input, 3-output T: least squares through the pseudo-inverse, labels mapped canonically."""
    T = MatrixRandomiser([[0.6, 0.3, 0.1], [0.1, 0.3, 0.6]], inputs=["a", "b"],  # noqa: N806
                         outputs=["lo", "mid", "hi"])
    rows = np.repeat([0, 1], [3000, 7000])
    z = sample_matrix(T, rows, np.random.default_rng(4), as_rows=True)
    for method in ("least_squares", "mle"):
        est = estimate_frequencies(T, [T.outputs[j] for j in z], method=method)
        assert est.inputs == ["a", "b"]
        assert np.all(np.abs(est.shares - [0.3, 0.7]) <= 3 * est.std_errors)
    with pytest.raises(ValidationError, match="not an output of T"):
        estimate_frequencies(T, ["lo", "middle"])


@pytest.mark.parametrize("eps_per_unit", [0.3, 0.5])
def test_a_singular_optimal_randomiser_is_refused_clearly(eps_per_unit: float) -> None:
    """At 0.3 or 0.5 per unit the optimal randomiser of the 5 points reports several inputs
    alike (rank 3). Warner's inversion raised LinAlgError at 0.3 and returned shares near
    +-1e16 at 0.5; now one clear refusal names the rank and says what to do."""
    T = _line(eps_per_unit)  # noqa: N806
    rank = np.linalg.matrix_rank(T.matrix)
    assert T.matrix.shape == (5, 5) and rank < 5
    z = _reports(T, 0)
    for method in ("least_squares", "mle"):
        with pytest.raises(NotIdentifiableError, match="cannot tell its inputs apart") as info:
            estimate_frequencies(T.matrix, z, method=method)
        msg = str(info.value)
        assert f"rank {rank} of 5" in msg and "merge those inputs" in msg and "\n" not in msg
    with pytest.raises(NotIdentifiableError, match="cannot tell its inputs apart"):
        warner_estimate(z, T.matrix)
    # two equal rows, and fewer outputs than inputs
    with pytest.raises(NotIdentifiableError, match="inputs 1, 2"):
        estimate_frequencies([[0.8, 0.1, 0.1], [0.1, 0.45, 0.45], [0.1, 0.45, 0.45]], [0, 1, 2])
    with pytest.raises(NotIdentifiableError, match="only 2 outputs"):
        estimate_frequencies([[0.5, 0.5], [0.3, 0.7], [0.1, 0.9]], [0, 1])


def test_bad_reports_and_methods_are_refused() -> None:
    T = rr_matrix(1.0, 2)  # noqa: N806
    with pytest.raises(ValidationError, match="no reports"):
        estimate_frequencies(T, [])
    with pytest.raises(ValidationError, match="column indices"):
        estimate_frequencies(T, [0, 2])
    with pytest.raises(ValidationError, match="method"):
        estimate_frequencies(T, [0, 1], method="bayes")


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    from dprivacy.cli import main as cli_main

    code = cli_main(["local", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def _optimal_file(tmp_path, capsys, eps_per_unit: str) -> str:
    line = tmp_path / "line.csv"
    line.write_text("name,x,y\n" + "".join(f"p{i},{i},0\n" for i in range(5)))
    out = tmp_path / f"T{eps_per_unit}.json"
    code, text, err = _cli(capsys, "optimal", "--universe", str(line), "--metric", "euclidean",
                           "--param", f"eps_per_unit={eps_per_unit}", "--out", str(out))
    assert code == 0, err
    return str(out)


@pytest.mark.parametrize("method", ["least_squares", "mle"])
def test_cli_simulates_a_randomiser_written_by_local_optimal(tmp_path, capsys, method) -> None:
    import json

    path = _optimal_file(tmp_path, capsys, "1")
    code, out, err = _cli(capsys, "simulate", "--randomiser", path, "--users", "10000",
                          "--shares", "1,2,4,2,1", "--method", method, "--seed", "2")
    assert code == 0, err
    r = json.loads(out.strip().splitlines()[-1])
    assert r["inputs"] == [f"p{i}" for i in range(5)] and r["answered"] == 10_000
    assert r["method"] == method and r["mode"] == "vectorised" and r["cost"] > 0
    est, se, truth = (np.array(r[k]) for k in ("estimate", "std_error", "true_share"))
    assert np.allclose(truth, TRUTH, atol=0.02)  # drawn from the --shares weights
    assert np.all(np.abs(est - truth) <= 3 * se), (est, truth, se)


def test_cli_simulate_refuses_a_singular_randomiser_and_bad_flags(tmp_path, capsys) -> None:
    path = _optimal_file(tmp_path, capsys, "0.5")
    code, out, err = _cli(capsys, "simulate", "--randomiser", path)
    assert code == 4 and out == "" and "cannot tell its inputs apart" in err
    assert len(err.strip().splitlines()) == 1
    good = _optimal_file(tmp_path, capsys, "1")
    assert _cli(capsys, "simulate", "--randomiser", good, "--shares", "1,2")[0] == 2
    assert _cli(capsys, "simulate", "--randomiser", good, "--eps", "1")[0] == 2
    assert _cli(capsys, "simulate", "--method", "mle")[0] == 2  # --method needs --randomiser
    assert _cli(capsys, "simulate", "--randomiser", str(tmp_path / "none.json"))[0] == 3


def test_cli_simulates_a_randomiser_over_http(tmp_path, capsys) -> None:
    import json

    path = _optimal_file(tmp_path, capsys, "1")
    code, out, err = _cli(capsys, "simulate", "--randomiser", path, "--users", "30", "--http",
                          "--budget", "10", "--seed", "1")
    assert code == 0, err
    r = json.loads(out.strip().splitlines()[-1])
    assert r["mode"] == "http" and r["answered"] == 30 and len(r["estimate"]) == 5
    # a budget below cost(T): every device would refuse, so the command says so first
    code, out, err = _cli(capsys, "simulate", "--randomiser", path, "--http", "--budget", "1")
    assert code == 2 and "every device would refuse" in err
