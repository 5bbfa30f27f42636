"""The fuzz corpus through the real entry point (``python -m dprivacy``): one line, no
traceback, nothing written, nothing charged; and a file the user may not read."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

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


@pytest.mark.skipif(shutil.which("setpriv") is None and os.geteuid() == 0,
                    reason="needs setpriv to drop root, or a non-root user")
def test_unreadable_file(tmp_path: Path) -> None:
    """A file the user may not read: one line naming it (run as 'nobody' when we are root)."""
    tmp_path.chmod(0o755)
    (tmp_path / "u.csv").write_text("name,x,y\na,0,0\nb,1,0\n")
    (tmp_path / "q.csv").write_text("1,0\n")
    (tmp_path / "u.csv").chmod(0o000)
    prefix = (["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
              if os.geteuid() == 0 else [])
    env = {**os.environ, "TQDM_DISABLE": "1", "PYTHONPATH": str(Path(__file__).parents[1])}
    r = subprocess.run([*prefix, sys.executable, "-m", "dprivacy", "verify", "c.json", *INP],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 3 and r.stderr.count("\n") == 1, r.stderr
    assert "u.csv" in r.stderr and "Traceback" not in r.stderr
