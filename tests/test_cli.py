"""The dprivacy command: design -> verify -> release round trip, refusals, one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dprivacy.accounting import Accountant
from dprivacy.cli import load_workload, main

SUBCOMMANDS = ("demo", "design", "verify", "release", "reproduce")


@pytest.fixture()
def inputs(tmp_path: Path) -> dict[str, Path]:
    """A 6-point universe, a 3-query matrix (CSV with header and names) and 40 records."""
    rng = np.random.default_rng(0)
    names = [f"p{k}" for k in range(6)]
    pts = pd.DataFrame({"name": names, "x": [0, 1, 3, 4, 7, 9], "y": [0, 2, 1, 5, 3, 0]})
    uni = tmp_path / "universe.csv"
    pts.to_csv(uni, index=False)
    F = pd.DataFrame(rng.uniform(0, 1, (3, 6)), columns=names)
    F.insert(0, "query", ["a", "b", "c"])
    q = tmp_path / "queries.csv"
    F.to_csv(q, index=False)
    rec = tmp_path / "records.csv"
    pd.DataFrame({"name": rng.choice(names, 40)}).to_csv(rec, index=False)
    return {"universe": uni, "queries": q, "records": rec, "dir": tmp_path}


def flags(inputs: dict[str, Path], eps: str = "0.5") -> list[str]:
    return ["--universe", str(inputs["universe"]), "--metric", "euclidean",
            "--param", f"eps_per_unit={eps}", "--queries", str(inputs["queries"])]


def _design(inputs: dict[str, Path], out: Path) -> int:
    return main(["design", *flags(inputs), "--method", "exact", "--out", str(out)])


def _tamper(src: Path, dst: Path, factor: float = 1.5) -> Path:
    doc = json.loads(src.read_text())
    doc["design"]["beta"][0] *= factor
    dst.write_text(json.dumps(doc))
    return dst


def _one_line_error(err: str) -> None:
    assert err.count("\n") == 1 and "Traceback" not in err, err


def test_help_everywhere(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in [["--help"]] + [[c, "--help"] for c in SUBCOMMANDS]:
        assert main(argv) == 0
        out = capsys.readouterr().out
        assert "usage: dprivacy" in out and "exit codes:" in out
    assert main(["design", "--help"]) == 0
    text = capsys.readouterr().out
    for metric, example in [("euclidean", "eps_per_unit=0.5"), ("geodesic", "eps_per_km=0.1"),
                            ("attribute", "weights=gender:1,age:0.5"), ("blowfish", "theta=2")]:
        assert f"--metric {metric}" in text and example in text


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    import dprivacy

    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"dprivacy {dprivacy.__version__}"


def test_round_trip_design_verify_release(inputs: dict[str, Path],
                                          capsys: pytest.CaptureFixture[str]) -> None:
    cfg = inputs["dir"] / "config.json"
    assert _design(inputs, cfg) == 0
    report = capsys.readouterr().out
    assert "designed_noise" in report and "IF" in report and cfg.is_file()
    assert main(["verify", str(cfg), *flags(inputs)]) == 0
    assert "OK" in capsys.readouterr().out
    out, ledger = inputs["dir"] / "answers.csv", inputs["dir"] / "budget.sqlite"
    assert main(["release", str(cfg), "--records", str(inputs["records"]), "--out", str(out),
                 "--seed", "1", "--ledger", str(ledger), "--budget", "2", *flags(inputs)]) == 0
    ans = pd.read_csv(out)
    assert ans["query"].tolist() == ["a", "b", "c"]
    beta = np.array(json.loads(cfg.read_text())["design"]["beta"])
    np.testing.assert_allclose(ans.noise_scale.to_numpy(), 1 / beta)
    F = load_workload(str(inputs["queries"])).dense()
    x = pd.read_csv(inputs["records"]).name.value_counts().reindex(
        [f"p{k}" for k in range(6)], fill_value=0).to_numpy()
    # Laplace noise beyond 40 scales has probability e^-40: the answers are F x plus noise
    assert np.all(np.abs(ans.answer.to_numpy() - F @ x) < 40 * ans.noise_scale.to_numpy())
    assert Accountant.durable(ledger).spent == pytest.approx(1.0, abs=1e-6)


def test_every_input_comes_from_the_caller(inputs: dict[str, Path],
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """verify and release never fall back on what the config records."""
    cfg = inputs["dir"] / "config.json"
    assert _design(inputs, cfg) == 0
    capsys.readouterr()
    for argv in (["verify", str(cfg)],
                 ["verify", str(cfg), "--universe", str(inputs["universe"]), "--metric",
                  "euclidean", "--queries", str(inputs["queries"])],
                 ["release", str(cfg), "--records", str(inputs["records"]), "--out",
                  str(inputs["dir"] / "a.csv"), "--ledger", str(inputs["dir"] / "l.sqlite"),
                  "--budget", "1"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        _one_line_error(err)
        assert "--universe" in err or "eps_per_unit" in err
    assert not (inputs["dir"] / "a.csv").exists()


def test_other_metric_is_refused(inputs: dict[str, Path]) -> None:
    cfg = inputs["dir"] / "config.json"
    assert _design(inputs, cfg) == 0
    assert main(["verify", str(cfg), *flags(inputs, eps="0.7")]) == 4


def _self_certify(cfg: Path, dst: Path, inputs: dict[str, Path], k: float = 100.0) -> Path:
    """beta x k, the metric's eps x k and its fingerprint recomputed for that metric: a config
    consistent with itself that would release with 1/k of the noise."""
    from dprivacy.cli.app import build_parser
    from dprivacy.cli.common import inputs_from

    doc = json.loads(cfg.read_text())
    doc["design"]["beta"] = [b * k for b in doc["design"]["beta"]]
    eps = doc["metric"]["params"]["eps_per_unit"] * k
    doc["metric"]["params"]["eps_per_unit"] = eps
    args = build_parser().parse_args(["verify", str(cfg), *flags(inputs, eps=repr(eps))])
    inp = inputs_from(args)
    doc["metric"]["fingerprint"] = inp.metric.fingerprint(inp.universe)
    dst.write_text(json.dumps(doc))
    # the forged file is self-consistent: with the forged metric it verifies
    assert main(["verify", str(dst), *flags(inputs, eps=repr(eps))]) == 0
    return dst


def test_self_certified_config_is_refused(inputs: dict[str, Path],
                                          capsys: pytest.CaptureFixture[str]) -> None:
    cfg = inputs["dir"] / "config.json"
    assert _design(inputs, cfg) == 0
    forged = _self_certify(cfg, inputs["dir"] / "forged.json", inputs)
    capsys.readouterr()
    assert main(["verify", str(forged), *flags(inputs)]) == 4
    err = capsys.readouterr().err
    _one_line_error(err)
    assert "REFUSED" in err and "metric" in err
    out, ledger = inputs["dir"] / "leak.csv", inputs["dir"] / "l.sqlite"
    assert main(["release", str(forged), "--records", str(inputs["records"]), "--out", str(out),
                 "--ledger", str(ledger), "--budget", "3", *flags(inputs)]) == 4
    _one_line_error(capsys.readouterr().err)
    assert not out.exists()
    assert not ledger.exists() or Accountant.durable(ledger).spent == 0


def test_hand_edited_config_is_refused(inputs: dict[str, Path],
                                       capsys: pytest.CaptureFixture[str]) -> None:
    cfg = inputs["dir"] / "config.json"
    assert _design(inputs, cfg) == 0
    bad = _tamper(cfg, inputs["dir"] / "edited.json")
    capsys.readouterr()
    assert main(["verify", str(bad), *flags(inputs)]) == 4
    assert "privacy condition broken" in capsys.readouterr().err
    out = inputs["dir"] / "leak.csv"
    assert main(["release", str(bad), "--records", str(inputs["records"]), "--out", str(out),
                 "--ledger", str(inputs["dir"] / "l.sqlite"), "--budget", "1",
                 *flags(inputs)]) == 4
    _one_line_error(capsys.readouterr().err)
    assert not out.exists()
    # lowering beta keeps the config private but changes nothing else: still accepted
    assert main(["verify", str(_tamper(cfg, inputs["dir"] / "lower.json", 0.5)),
                 *flags(inputs)]) == 0


def test_ledger_composes_releases(inputs: dict[str, Path],
                                  capsys: pytest.CaptureFixture[str]) -> None:
    """K = 2: two releases pass, the third is refused (exit 5) and charges nothing; the stored
    total wins, a conflicting --budget and another metric on the same budget are refused."""
    cfg = inputs["dir"] / "config.json"
    assert _design(inputs, cfg) == 0
    ledger = inputs["dir"] / "l.sqlite"

    def release(k: int, *extra: str) -> int:
        return main(["release", str(cfg), "--records", str(inputs["records"]), "--out",
                     str(inputs["dir"] / f"a{k}.csv"), "--ledger", str(ledger), *extra,
                     *flags(inputs)])

    assert release(0) == 2  # a new budget needs --budget
    assert "--budget K" in capsys.readouterr().err
    assert release(1, "--budget", "2") == 0
    assert release(2) == 0
    capsys.readouterr()
    assert release(3) == 5
    err = capsys.readouterr().err
    _one_line_error(err)
    assert "nothing was charged" in err and not (inputs["dir"] / "a3.csv").exists()
    assert Accountant.durable(ledger).spent == pytest.approx(2.0, abs=1e-6)
    assert release(4, "--budget", "10") == 2
    assert "drop --budget" in capsys.readouterr().err
    # the same budget name under another metric (a 10x larger eps) is refused
    cfg2 = inputs["dir"] / "config2.json"
    assert main(["design", *flags(inputs, eps="5"), "--out", str(cfg2)]) == 0
    capsys.readouterr()
    assert main(["release", str(cfg2), "--records", str(inputs["records"]), "--out",
                 str(inputs["dir"] / "a5.csv"), "--ledger", str(ledger),
                 *flags(inputs, eps="5")]) == 2
    assert "another universe or metric" in capsys.readouterr().err
    assert Accountant.durable(ledger).spent == pytest.approx(2.0, abs=1e-6)


@pytest.mark.parametrize("argv,code,fragment", [
    (["verify", "missing.json", "--universe", "u.csv", "--metric", "euclidean", "--param",
      "eps_per_unit=1", "--queries", "q.npy"], 3, "no such file"),
    (["design", "--universe", "nope.csv", "--metric", "euclidean", "--param", "eps_per_unit=1",
      "--queries", "q.npy", "--out", "c.json"], 3, "no such file"),
    (["reproduce", "fig9"], 2, "unknown experiment"),
    (["reproduce"], 2, "--all"),
    (["frobnicate"], 2, "invalid choice"),
    ([], 2, "required"),
])
def test_user_errors_are_one_line(argv: list[str], code: int, fragment: str,
                                  capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "u.csv").write_text("name,x,y\na,0,0\nb,1,1\n")
    np.save(tmp_path / "q.npy", np.ones((1, 2)))
    assert main(argv) == code
    err = capsys.readouterr().err
    assert fragment in err
    _one_line_error(err)


def test_bad_metric_and_parameters(inputs: dict[str, Path], capsys: pytest.CaptureFixture[str]
                                   ) -> None:
    base = ["design", "--universe", str(inputs["universe"]), "--queries", str(inputs["queries"]),
            "--out", str(inputs["dir"] / "c.json")]
    assert main(base + ["--metric", "manhattan"]) == 2
    assert "not a metric" in capsys.readouterr().err
    assert main(base + ["--metric", "euclidean", "--param", "eps_per_unit=-1"]) == 2
    assert "eps_per_unit" in capsys.readouterr().err
    assert main(base + ["--metric", "euclidean", "--param", "eps_per_unit=1",
                        "--param", "speed=3"]) == 2
    assert "speed" in capsys.readouterr().err
    assert main(base + ["--metric", "euclidean", "--method", "magic"]) == 2
    assert "invalid choice" in capsys.readouterr().err
    assert not (inputs["dir"] / "c.json").exists()


def test_no_silent_privacy_default(inputs: dict[str, Path],
                                   capsys: pytest.CaptureFixture[str]) -> None:
    """No --param: refused with a message naming the parameter and an example."""
    for metric, param in [("euclidean", "eps_per_unit"), ("blowfish", "theta"),
                          ("discrete", "eps")]:
        assert main(["design", "--universe", str(inputs["universe"]), "--metric", metric,
                     "--queries", str(inputs["queries"]), "--out",
                     str(inputs["dir"] / "c.json")]) == 2
        err = capsys.readouterr().err
        assert f"--param {param}=" in err and "no default" in err
    assert not (inputs["dir"] / "c.json").exists()


def test_wrong_width_query_matrix(inputs: dict[str, Path], capsys: pytest.CaptureFixture[str]
                                  ) -> None:
    q = inputs["dir"] / "wide.npy"
    np.save(q, np.ones((2, 7)))
    assert main(["design", "--universe", str(inputs["universe"]), "--metric", "euclidean",
                 "--param", "eps_per_unit=1", "--queries", str(q),
                 "--out", str(inputs["dir"] / "c.json")]) == 3
    assert "N = 6" in capsys.readouterr().err


def test_demo_exports_a_verifiable_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                          ) -> None:
    out = tmp_path / "demo.json"
    assert main(["demo", "--out", str(out), "--m", "2"]) == 0
    text = capsys.readouterr().out
    assert "elevation_km" in text and "baseline_noise" in text and "IF_alone" in text
    queries = tmp_path / "demo_queries.csv"
    assert out.is_file() and queries.is_file()
    assert main(["verify", str(out), "--universe", "builtin:us_cities", "--metric", "geodesic",
                 "--param", "eps_per_km=0.1", "--queries", str(queries)]) == 0
    assert main(["verify", str(out), "--universe", "builtin:us_cities", "--metric", "geodesic",
                 "--param", "eps_per_km=0.2", "--queries", str(queries)]) == 4


def test_reproduce_one_experiment(tmp_path: Path) -> None:
    assert main(["reproduce", "example1_noise_scales", "--quick", "--outdir", str(tmp_path)]) == 0
    assert (tmp_path / "example1_noise_scales.csv").is_file()
    assert (tmp_path / "targets.md").read_text().count("| T10 |") == 1


def test_python_dash_m_subprocess(inputs: dict[str, Path]) -> None:
    cfg = inputs["dir"] / "config.json"
    assert _design(inputs, cfg) == 0
    ok = subprocess.run([sys.executable, "-m", "dprivacy", "verify", str(cfg), *flags(inputs)],
                        capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0 and "OK" in ok.stdout
    bad = _tamper(cfg, inputs["dir"] / "edited.json")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    no = subprocess.run([sys.executable, "-m", "dprivacy", "release", str(bad), "--records",
                         str(inputs["records"]), "--out", "answers.csv", "--ledger", "l.sqlite",
                         "--budget", "1", *flags(inputs)], capture_output=True, text=True,
                        timeout=120, cwd=inputs["dir"], env=env)
    assert no.returncode == 4 and "Traceback" not in no.stderr
    assert no.stderr.count("\n") == 1
    assert not (inputs["dir"] / "answers.csv").exists()


@pytest.mark.parametrize("disable", ["", "1"])
def test_progress_bar_on_slow_steps(disable: str, monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    """A step running past the delay shows a tqdm bar on stderr naming it; TQDM_DISABLE=1 hides
    it; nothing goes to stdout."""
    import time

    from dprivacy.cli.progress import Steps

    monkeypatch.setenv("TQDM_DISABLE", disable)
    with Steps(["read", "solve"], desc="dprivacy test", delay=0.2) as steps:
        with steps.step("read"):
            pass
        with steps.step("solve (exact)"):
            time.sleep(1.3)
    out, err = capsys.readouterr()
    assert out == ""
    if disable:
        assert err == ""
    else:
        assert "dprivacy test" in err and "solve (exact)" in err


def test_every_help_example_designs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    """The example that `design --help` shows for each metric works as written."""
    import shlex

    from dprivacy.cli.params import SPECS

    monkeypatch.chdir(tmp_path)
    universes = {
        "points": "name,x,y,budget\na,0,0,1\nb,1,0,2\nc,0,2,0.5\n",
        "latlon": "name,latitude,longitude\na,40,-70\nb,41,-71\nc,42,-72\n",
        "attribute": "gender,age\nM,A\nM,B\nF,A\nF,B\n",
        "value": "gender\nM\nF\n",
    }
    which = {"euclidean": "points", "geodesic": "latlon", "blowfish": "points",
             "discrete": "points", "elementwise": "points", "attribute": "attribute",
             "value": "value"}
    assert set(which) == set(SPECS)
    for name, spec in SPECS.items():
        text = universes[which[name]]
        (tmp_path / "u.csv").write_text(text)
        n = len(text.strip().splitlines()) - 1
        np.save(tmp_path / "q.npy", np.arange(n, dtype=float)[None, :])
        argv = ["design", "--universe", "u.csv", "--metric", name,
                *shlex.split(spec.example()), "--queries", "q.npy", "--out", f"{name}.json"]
        if which[name] == "points":
            argv += ["--key", "name"]
        assert main(argv) == 0, (name, capsys.readouterr().err)
        assert (tmp_path / f"{name}.json").is_file()


def test_design_table_alone_and_joint_share_one_baseline() -> None:
    """IF and IF_alone are measured against the same baseline, so a query designed alone never
    reads as worse than the same query sharing the budget (it was 46 vs 90 before)."""
    import dprivacy as dp
    from dprivacy.cli import design_table

    rng = np.random.default_rng(3)
    U = dp.Universe.from_points(rng.uniform(0, 10, size=(40, 2)))
    M = dp.metrics.Euclidean(eps_per_unit=0.5)
    W = dp.Workload(np.vstack([rng.uniform(0, 1, size=(4, 40)), np.arange(40) / 40]))
    t = design_table(W, U, M, dp.design(W, U, M))
    assert (t["w"] == 1).all()
    assert (t["alone_noise"] <= t["designed_noise"] * (1 + 1e-9)).all()
    assert (t["IF_alone"] >= t["IF"] * (1 - 1e-9)).all()
    np.testing.assert_allclose(t["IF_alone"] * t["alone_noise"], t["baseline_noise"])
    alone = dp.design(dp.Workload(W.dense()[4:]), U, M, method="closed_form")
    assert t["alone_noise"].iloc[4] == pytest.approx(float(alone.noise_scale[0]))


def test_a_subset_of_the_builtin_cities(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--universe builtin:us_cities:CA,NV (states) or :top=N, and demo --cities, agree."""
    from dprivacy.cli import load_universe
    from dprivacy.cli.params import spec_of
    from dprivacy.data import load_us_cities

    cities = load_us_cities()
    U, table = load_universe("builtin:us_cities:CA,NV", spec_of("geodesic"))
    assert U.N == int(cities["state"].isin(["CA", "NV"]).sum()) and set(table["state"]) == {"CA", "NV"}
    U, table = load_universe("builtin:us_cities:top=25", spec_of("geodesic"))
    assert U.N == 25
    assert sorted(table["population"].astype(int))[0] == sorted(cities["population"])[-25]
    out = tmp_path / "demo.json"
    assert main(["demo", "--out", str(out), "--m", "1", "--cities", "SD,WY"]) == 0
    text = capsys.readouterr().out
    assert "--universe builtin:us_cities:SD,WY" in text
    assert main(["verify", str(out), "--universe", "builtin:us_cities:SD,WY", "--metric", "geodesic",
                 "--param", "eps_per_km=0.1", "--queries", str(tmp_path / "demo_queries.csv")]) == 0
    assert main(["verify", str(out), "--universe", "builtin:us_cities", "--metric", "geodesic",
                 "--param", "eps_per_km=0.1", "--queries", str(tmp_path / "demo_queries.csv")]) == 3
    capsys.readouterr()
    for bad in ("XX", "top=1", "top=x", ""):
        code = main(["demo", "--out", str(tmp_path / "d2.json"), "--cities", bad]) if bad else \
            main(["design", "--universe", "builtin:us_cities:,", "--metric", "geodesic", "--param",
                  "eps_per_km=0.1", "--queries", str(tmp_path / "demo_queries.csv"), "--out",
                  str(tmp_path / "d3.json")])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1, (bad, err)


def test_every_flag_of_every_command_is_described() -> None:
    """`dprivacy ... --help` describes every flag (local simulate described almost none)."""
    import argparse

    from dprivacy.cli import build_parser

    def walk(p: argparse.ArgumentParser, path: list[str]):
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                for name, sp in a.choices.items():
                    yield from walk(sp, [*path, name])
            elif not isinstance(a, (argparse._HelpAction, argparse._VersionAction)):
                yield " ".join(path), a.option_strings or [a.dest], (a.help or "").strip()

    flags = list(walk(build_parser(), ["dprivacy"]))
    assert any(cmd == "dprivacy local simulate" for cmd, _, _ in flags)
    missing = [(cmd, opt) for cmd, opt, text in flags if len(text) < 8]
    assert not missing, missing
