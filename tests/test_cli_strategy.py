"""dprivacy design --method strategy -> verify -> release, and a tampered strategy refused."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dprivacy.cli import main
from tests.test_cli import flags, inputs  # noqa: F401 (fixture)


def test_strategy_design_verify_release(inputs: dict[str, Path],  # noqa: F811
                                        capsys: pytest.CaptureFixture[str]) -> None:
    cfg = inputs["dir"] / "s.json"
    assert main(["design", *flags(inputs), "--method", "strategy", "--time-limit", "5",
                 "--out", str(cfg)]) == 0
    text = capsys.readouterr().out
    assert "strategy mechanism" in text and "expected total squared error" in text
    doc = json.loads(cfg.read_text())
    assert doc["kind"] == "strategy" and doc["version"] == 3
    assert main(["verify", str(cfg), *flags(inputs)]) == 0
    assert "OK:" in capsys.readouterr().out
    out = inputs["dir"] / "answers.csv"
    ledger = inputs["dir"] / "ledger.sqlite"
    assert main(["release", str(cfg), "--records", str(inputs["records"]), "--out", str(out),
                 "--seed", "1", "--ledger", str(ledger), "--budget", "2", *flags(inputs)]) == 0
    ans = pd.read_csv(out)
    assert ans["query"].tolist() == ["a", "b", "c"]
    assert np.all(ans["std"] > 0) and np.all(np.isfinite(ans["answer"]))
    # a strategy scaled up by 2 is refused by verify (exit 4), with a one-line error
    doc["design"]["strategy"]["dense"] = [2 * v for v in doc["design"]["strategy"]["dense"]]
    bad = inputs["dir"] / "bad.json"
    bad.write_text(json.dumps(doc))
    capsys.readouterr()
    assert main(["verify", str(bad), *flags(inputs)]) == 4
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert main(["design", *flags(inputs), "--method", "strategy", "--n", "5",
                 "--out", str(inputs["dir"] / "x.json")]) != 0
