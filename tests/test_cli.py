"""The dprivacy command: design -> verify -> release round trip, refusals, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

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


def _design(inputs: dict[str, Path], out: Path) -> int:
    return main(["design", "--universe", str(inputs["universe"]), "--metric", "euclidean",
                 "--param", "eps_per_unit=0.5", "--queries", str(inputs["queries"]),
                 "--method", "exact", "--out", str(out)])


def _tamper(src: Path, dst: Path, factor: float = 1.5) -> Path:
    doc = json.loads(src.read_text())
    doc["design"]["beta"][0] *= factor
    dst.write_text(json.dumps(doc))
    return dst


def test_help_everywhere(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in [["--help"]] + [[c, "--help"] for c in SUBCOMMANDS]:
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 0
        assert "usage: dprivacy" in capsys.readouterr().out


def test_round_trip_design_verify_release(inputs: dict[str, Path],
                                          capsys: pytest.CaptureFixture[str]) -> None:
    cfg = inputs["dir"] / "config.json"
    assert _design(inputs, cfg) == 0
    report = capsys.readouterr().out
    assert "designed_noise" in report and "IF" in report and cfg.is_file()
    # verify with the recorded inputs, and with every input given explicitly
    assert main(["verify", str(cfg)]) == 0
    assert main(["verify", str(cfg), "--universe", str(inputs["universe"]), "--metric",
                 "euclidean", "--param", "eps_per_unit=0.5", "--queries",
                 str(inputs["queries"])]) == 0
    assert "OK" in capsys.readouterr().out
    out = inputs["dir"] / "answers.csv"
    assert main(["release", str(cfg), "--records", str(inputs["records"]), "--out", str(out),
                 "--seed", "1"]) == 0
    ans = pd.read_csv(out)
    assert ans["query"].tolist() == ["a", "b", "c"]
    beta = np.array(json.loads(cfg.read_text())["design"]["beta"])
    np.testing.assert_allclose(ans.noise_scale.to_numpy(), 1 / beta)
    F = load_workload(str(inputs["queries"])).dense()
    x = pd.read_csv(inputs["records"]).name.value_counts().reindex(
        [f"p{k}" for k in range(6)], fill_value=0).to_numpy()
    # Laplace noise beyond 40 scales has probability e^-40: the answers are F x plus noise
    assert np.all(np.abs(ans.answer.to_numpy() - F @ x) < 40 * ans.noise_scale.to_numpy())


def test_other_metric_is_refused(inputs: dict[str, Path]) -> None:
    cfg = inputs["dir"] / "config.json"
    assert _design(inputs, cfg) == 0
    assert main(["verify", str(cfg), "--metric", "euclidean", "--param", "eps_per_unit=0.7"]) == 1


def test_hand_edited_config_is_refused(inputs: dict[str, Path],
                                       capsys: pytest.CaptureFixture[str]) -> None:
    cfg = inputs["dir"] / "config.json"
    assert _design(inputs, cfg) == 0
    bad = _tamper(cfg, inputs["dir"] / "edited.json")
    capsys.readouterr()
    assert main(["verify", str(bad)]) == 1
    assert "privacy condition broken" in capsys.readouterr().err
    out = inputs["dir"] / "leak.csv"
    assert main(["release", str(bad), "--records", str(inputs["records"]),
                 "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert not out.exists()
    assert err.count("\n") == 1 and "Traceback" not in err
    # lowering beta keeps the config private but changes nothing else: still accepted
    assert main(["verify", str(_tamper(cfg, inputs["dir"] / "lower.json", 0.5))]) == 0


@pytest.mark.parametrize("argv,fragment", [
    (["verify", "missing.json"], "not found"),
    (["design", "--universe", "nope.csv", "--metric", "euclidean", "--queries", "q.npy",
      "--out", "c.json"], "not found"),
    (["reproduce", "fig9"], "unknown experiment"),
    (["reproduce"], "--all"),
])
def test_user_errors_are_one_line(argv: list[str], fragment: str,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert fragment in err and err.count("\n") == 1 and "Traceback" not in err


def test_bad_metric_and_parameters(inputs: dict[str, Path], capsys: pytest.CaptureFixture[str]
                                   ) -> None:
    base = ["design", "--universe", str(inputs["universe"]), "--queries", str(inputs["queries"]),
            "--out", str(inputs["dir"] / "c.json")]
    assert main(base + ["--metric", "manhattan"]) == 1
    assert "unknown metric" in capsys.readouterr().err
    assert main(base + ["--metric", "euclidean", "--param", "eps_per_unit=-1"]) == 1
    assert "eps_per_unit" in capsys.readouterr().err
    assert main(base + ["--metric", "euclidean", "--param", "speed=3"]) == 1
    assert "speed" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(base + ["--metric", "euclidean", "--method", "magic"])
    assert e.value.code == 2


def test_wrong_width_query_matrix(inputs: dict[str, Path], capsys: pytest.CaptureFixture[str]
                                  ) -> None:
    q = inputs["dir"] / "wide.npy"
    np.save(q, np.ones((2, 7)))
    assert main(["design", "--universe", str(inputs["universe"]), "--metric", "euclidean",
                 "--queries", str(q), "--out", str(inputs["dir"] / "c.json")]) == 1
    assert "N = 6" in capsys.readouterr().err


def test_demo_exports_a_verifiable_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                          ) -> None:
    out = tmp_path / "demo.json"
    assert main(["demo", "--out", str(out), "--m", "2"]) == 0
    text = capsys.readouterr().out
    assert "elevation_km" in text and "baseline_noise" in text and "IF_alone" in text
    assert out.is_file() and (tmp_path / "demo_queries.npy").is_file()
    assert main(["verify", str(out)]) == 0


def test_reproduce_one_experiment(tmp_path: Path) -> None:
    assert main(["reproduce", "example1_noise_scales", "--quick", "--outdir", str(tmp_path)]) == 0
    assert (tmp_path / "example1_noise_scales.csv").is_file()
    assert (tmp_path / "targets.md").read_text().count("| T10 |") == 1


def test_python_dash_m_subprocess(inputs: dict[str, Path]) -> None:
    cfg = inputs["dir"] / "config.json"
    assert _design(inputs, cfg) == 0
    ok = subprocess.run([sys.executable, "-m", "dprivacy", "verify", str(cfg)],
                        capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0 and "OK" in ok.stdout
    bad = _tamper(cfg, inputs["dir"] / "edited.json")
    no = subprocess.run([sys.executable, "-m", "dprivacy", "release", str(bad), "--records",
                         str(inputs["records"])], capture_output=True, text=True, timeout=120,
                        cwd=inputs["dir"])
    assert no.returncode == 1 and "Traceback" not in no.stderr
    assert not (inputs["dir"] / "answers.csv").exists()


README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_quick_start_and_python_example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    text = README.read_text(encoding="utf-8")
    assert 'pip install . && dprivacy demo' in text
    assert 'pip install ".[test]" && python -m pytest -q' in text
    code = text.split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "README.md", "exec"), {})  # noqa: S102 (our own README example)
    assert (tmp_path / "config.json").is_file()
    assert len(capsys.readouterr().out.splitlines()) == 2


def test_every_readme_python_block_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """All ```python blocks of the README run as written (in a scratch folder)."""
    blocks = [b.split("```", 1)[0] for b in README.read_text(encoding="utf-8").split("```python\n")[1:]]
    assert len(blocks) >= 2
    monkeypatch.chdir(tmp_path)
    for k, code in enumerate(blocks):
        exec(compile(code, f"README.md block {k}", "exec"), {})  # noqa: S102 (our own README)
    assert (tmp_path / "budgets.sqlite").is_file() and (tmp_path / "people.sqlite").is_file()
