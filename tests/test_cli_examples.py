"""The command-line walkthrough of docs/cli.md runs as written on the files in examples/."""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dprivacy.accounting import Accountant
from dprivacy.cli import load_universe, load_workload, main
from dprivacy.cli.params import spec_of

ROOT = Path(__file__).resolve().parents[1]


def walkthrough() -> list[tuple[list[str], int]]:
    """(argv, expected exit code) of every command of the walkthrough in docs/cli.md."""
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    block = text.split("```bash\n", 1)[1].split("```", 1)[0]
    commands, current = [], ""
    for line in block.splitlines():
        if line.lstrip().startswith("#") and not current:
            continue
        current += line.rstrip("\\").rstrip() + " " if line.endswith("\\") else line
        if not line.endswith("\\"):
            code = 0
            if "# exit " in current:
                code = int(current.split("# exit ", 1)[1].split()[0])
            words = shlex.split(current, comments=True)
            assert words[0] == "dprivacy", current
            commands.append((words[1:], code))
            current = ""
    return commands


def test_walkthrough_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TQDM_DISABLE", "1")
    cmds = walkthrough()
    assert len(cmds) >= 6 and {c[0] for c, _ in cmds} >= {"design", "verify", "release"}
    for argv, code in cmds:
        assert main(argv) == code, (argv, capsys.readouterr().err)
        err = capsys.readouterr().err
        assert "Traceback" not in err
        if code:
            assert err.count("\n") == 1, err
    answers = pd.read_csv("answers.csv")
    assert answers["query"].tolist() == ["elevation_km", "in_massachusetts", "boston_area"]
    assert pd.read_csv("answers2.csv").shape == (3, 4) and not Path("answers3.csv").exists()
    acc = Accountant.durable("budget.sqlite")
    assert acc.total == 2 and acc.spent == pytest.approx(2, abs=1e-6)


def test_example_files_agree() -> None:
    """The named and the plain query files are the same matrix; visits.csv counts records.csv."""
    U, _ = load_universe(str(ROOT / "examples" / "cities.csv"), spec_of("geodesic"))
    named = load_workload(str(ROOT / "examples" / "queries_named.csv"), U)
    plain = load_workload(str(ROOT / "examples" / "queries_plain.csv"), U)
    np.testing.assert_array_equal(named.dense(), plain.dense())
    assert named.query_names() == plain.query_names()
    rec = pd.read_csv(ROOT / "examples" / "records.csv")["name"].value_counts()
    visits = pd.read_csv(ROOT / "examples" / "visits.csv").set_index("name")["visits"]
    assert rec.reindex(visits.index, fill_value=0).tolist() == visits.tolist()


def test_help_examples_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                           capsys: pytest.CaptureFixture[str]) -> None:
    """The example under `design --help`, `verify --help` and `release --help` runs as shown."""
    from dprivacy.cli import build_parser

    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TQDM_DISABLE", "1")
    parsers = {a.dest: a for a in build_parser()._actions if a.dest == "command"}
    choices = parsers["command"].choices  # type: ignore[attr-defined]
    for name in ("design", "verify", "release"):
        epilog = choices[name].epilog
        block = epilog.split("example (files in the source tree's examples/ folder):\n", 1)[1]
        block = block.split("\n\n", 1)[0]
        words = shlex.split(block.replace("\\\n", " "))
        assert words[:2] == ["dprivacy", name], words
        assert main(words[1:]) == 0, (name, capsys.readouterr().err)
    assert Path("answers.csv").is_file()
