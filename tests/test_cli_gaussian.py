"""The command line with Gaussian noise: design --noise gaussian --rho R (--delta D), verify and
release of the config against a zCDP budget that also takes Laplace releases."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dprivacy.accounting import Accountant
from dprivacy.cli import main
from tests.test_cli import flags, inputs  # noqa: F401 (the fixture)


def _release(inputs, cfg: Path, k: int, *extra: str) -> int:  # noqa: F811
    return main(["release", str(cfg), "--records", str(inputs["records"]), "--out",
                 str(inputs["dir"] / f"g{k}.csv"), "--ledger", str(inputs["dir"] / "z.sqlite"),
                 "--seed", str(k), *extra, *flags(inputs)])


def test_gaussian_design_verify_release(inputs, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    cfg = inputs["dir"] / "gauss.json"
    assert main(["design", *flags(inputs), "--noise", "gaussian", "--rho", "0.5",
                 "--delta", "1e-6", "--out", str(cfg)]) == 0
    out = capsys.readouterr().out
    assert "rho = 0.5-zCDP" in out and "eps_exact" in out and cfg.is_file()
    doc = json.loads(cfg.read_text())
    assert doc["kind"] == "gaussian" and doc["design"]["notion"] == "zcdp"
    assert main(["verify", str(cfg), *flags(inputs), "--noise", "gaussian", "--rho", "0.5"]) == 0
    assert "OK" in capsys.readouterr().out
    assert main(["verify", str(cfg), *flags(inputs), "--rho", "0.4"]) == 2  # not what it holds
    assert "not --rho 0.4" in capsys.readouterr().err
    assert main(["verify", str(cfg), *flags(inputs), "--noise", "laplace"]) == 2
    capsys.readouterr()
    # a zCDP budget of 1.5: the Gaussian release costs 0.5, a Laplace release alpha = 1
    assert _release(inputs, cfg, 1, "--budget", "1.5") == 0
    assert "charged 0.5 rho per unit of the metric" in capsys.readouterr().out
    ans = pd.read_csv(inputs["dir"] / "g1.csv")
    np.testing.assert_allclose(ans.sigma.to_numpy(), np.array(doc["design"]["sigma"]))
    lap = inputs["dir"] / "lap.json"
    assert main(["design", *flags(inputs), "--out", str(lap)]) == 0
    capsys.readouterr()
    assert _release(inputs, lap, 2, "--budget-notion", "zcdp") == 0
    assert Accountant.durable(inputs["dir"] / "z.sqlite", notion="zcdp").spent == \
        pytest.approx(1.5, abs=1e-6)
    assert _release(inputs, cfg, 3) == 5  # 0.5 more does not fit: refused, nothing charged
    assert "nothing was charged" in capsys.readouterr().err
    assert not (inputs["dir"] / "g3.csv").exists()
    # a Gaussian config cannot be charged to a pure budget
    assert _release(inputs, cfg, 4, "--budget-notion", "pure", "--budget", "9") == 2


@pytest.mark.parametrize("extra,fragment", [
    (["--noise", "gaussian"], "needs --rho"),
    (["--rho", "0.5"], "add --noise gaussian"),
    (["--noise", "gaussian", "--rho", "0.5", "--method", "uniform"], "--method exact"),
    (["--delta", "1e-6"], "add --noise gaussian"),
    (["--noise", "gaussian", "--rho", "-1"], "rho"),
    (["--noise", "gaussian", "--rho", "0.5", "--delta", "2"], "delta"),
])
def test_bad_gaussian_flags_are_refused(inputs, extra, fragment,  # noqa: F811
                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["design", *flags(inputs), *extra, "--out",
                 str(inputs["dir"] / "x.json")]) == 2
    assert fragment in capsys.readouterr().err
    assert not (inputs["dir"] / "x.json").exists()
