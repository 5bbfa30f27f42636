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
    assert "method strategy" in text and "expected total squared error" in text
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


def _walkthrough() -> tuple[list[list[str]], list[str]]:
    """The strategy section of docs/cli.md: its two design commands and its printed lines."""
    import re
    import shlex

    text = (Path(__file__).resolve().parent.parent / "docs" / "cli.md").read_text()
    section = text.split("## Strategies: every range, rectangle or marginal")[1]
    bash = re.search(r"```bash\n(.*?)```", section, re.S).group(1).replace("\\\n", " ")
    designs = [shlex.split(line, comments=True)[1:] for line in bash.splitlines()
               if line.startswith("dprivacy design")]
    printed = re.search(r"```text\n(.*?)```", section, re.S).group(1).strip().splitlines()
    return designs, printed


def test_the_cli_walkthrough_prints_the_numbers_the_docs_quote(tmp_path: Path, monkeypatch,
                                                               capsys: pytest.CaptureFixture[str]
                                                               ) -> None:
    designs, printed = _walkthrough()
    assert len(designs) == 2 and len(printed) == 5
    monkeypatch.chdir(tmp_path)
    out = ""
    for args in designs:
        assert main(args) == 0
        out += capsys.readouterr().out
    for line in printed:
        assert line in out, line
    # the ratio the page states, from the two totals it quotes
    s, e = (float(t.split("expected total squared error ")[1].split()[0])
            for t in printed if t.startswith("expected"))
    assert round(e / s) == 2098


def test_implicit_workloads_on_the_command_line(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--universe", "builtin:grid:4x5", "--metric", "euclidean", "--param",
            "eps_per_unit=1"]
    cfg = tmp_path / "rect.json"
    assert main(["design", *base, "--workload", "rectangles", "--method", "strategy",
                 "--time-limit", "5", "--all-rows", "--out", str(cfg)]) == 0
    out = capsys.readouterr().out
    assert "m = 150 queries" in out and "every query:" in out
    assert out.count("[") >= 2 * 150  # every rectangle's row, '[a,b]x[c,d]'
    assert "RMSE" in out and "certified lower bound" in out
    assert main(["verify", str(cfg), *base, "--workload", "rectangles"]) == 0
    assert main(["verify", str(cfg), *base, "--workload", "ranges"]) == 2  # not a line
    err = capsys.readouterr().err
    assert "--workload 'ranges'" in err
    recs = tmp_path / "r.csv"
    recs.write_text("name\n0_0\n3_4\n3_4\n")
    ans = tmp_path / "a.csv"
    assert main(["release", str(cfg), "--records", str(recs), "--out", str(ans), "--seed", "0",
                 "--ledger", str(tmp_path / "l.sqlite"), "--budget", "1", *base,
                 "--workload", "rectangles"]) == 0
    table = pd.read_csv(ans)
    assert len(table) == 150 and table["query"].iloc[-1] == "[3,3]x[4,4]"
    assert np.all(np.isfinite(table["answer"]))
    # marginals over a product universe, with the (w, beta) design: the same report format
    capsys.readouterr()
    assert main(["design", "--universe", "builtin:example1", "--metric", "discrete",
                 "--param", "eps=1", "--workload", "marginals:1", "--method", "exact",
                 "--out", str(tmp_path / "marg.json")]) == 0
    out = capsys.readouterr().out
    assert "expected total squared error" in out and "RMSE" in out
    assert main(["design", *base, "--workload", "nonsense", "--out", str(tmp_path / "x.json")]) == 2


def test_a_strategy_design_draws_its_picture(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "s.png"
    assert main(["design", "--universe", "builtin:line:16", "--metric", "euclidean", "--param",
                 "eps_per_unit=1", "--workload", "prefixes", "--method", "strategy",
                 "--out", str(tmp_path / "s.json"), "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "picture of the design written to" in capsys.readouterr().out
