"""The fuzz corpus through the real entry point (``python -m dprivacy``): one line, no
traceback, nothing written, nothing charged; and a file the user may not read."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dprivacy.cli import main
from tests.test_cli_fuzz import CASES, INP, _snapshot, _spent, build_corpus


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_corpus(tmp_path_factory.mktemp("fuzz"))


SUBPROCESS = ["demo-seed-negative", "verify-deep.json"]


@pytest.mark.parametrize("name", SUBPROCESS)
def test_subprocess_cases(name: str, corpus: Path) -> None:
    argv = dict(CASES)[name]
    env = {**os.environ, "TQDM_DISABLE": "1", "PYTHONPATH": str(Path(__file__).parents[1])}
    env.pop("DPRIVACY_DEBUG", None)
    before, spent = _snapshot(corpus), _spent(corpus)
    r = subprocess.run([sys.executable, "-m", "dprivacy", *argv], cwd=corpus, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode in (2, 3, 4, 5) and r.stderr.count("\n") == 1, r.stderr
    assert "Traceback" not in r.stderr
    assert _snapshot(corpus) == before and _spent(corpus) == spent


def test_unreadable_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                         capsys: pytest.CaptureFixture[str]) -> None:
    """A file the user may not read: one line naming it, exit 3.

    Run in-process: a subprocess as user 'nobody' (root reads every file) also needs the checkout
    and its venv to be readable by 'nobody', which a fresh clone in a private temporary folder is
    not. As root, the read of u.csv fails the way it does for a user (PermissionError)."""
    (tmp_path / "u.csv").write_text("name,x,y\na,0,0\nb,1,0\n")
    (tmp_path / "q.csv").write_text("1,0\n")
    (tmp_path / "u.csv").chmod(0o000)
    if os.geteuid() == 0:
        read_bytes = Path.read_bytes

        def denied(self: Path) -> bytes:
            if self.name == "u.csv":
                raise PermissionError(13, "Permission denied", str(self))
            return read_bytes(self)

        monkeypatch.setattr(Path, "read_bytes", denied)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TQDM_DISABLE", "1")
    rc = main(["verify", "c.json", *INP])
    err = capsys.readouterr().err
    assert rc == 3 and err.count("\n") == 1, err
    assert "u.csv" in err and "Traceback" not in err
