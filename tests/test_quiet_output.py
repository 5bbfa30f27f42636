"""Solver and Spark banners never reach a command's normal output.

HiGHS prints a copyright banner on the C-level stdout the first time a process builds a model,
whatever its options; Spark's JVM prints its log4j start-up lines on stderr. Both are silenced
where dprivacy starts them (only the Java launcher's own line about incubator modules, printed
before any logging is set up, remains on stderr); each check runs in a fresh process, where the
banner would appear.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           TQDM_DISABLE="1")


def _run(code: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=timeout, env=ENV, cwd=ROOT)


def test_the_lp_solver_prints_no_banner() -> None:
    pytest.importorskip("highspy")
    out = _run("import numpy as np, dprivacy as dp\n"
               "from dprivacy.local import optimal_randomiser\n"
               "U = dp.Universe.from_points(np.array([[0.0, 0], [1, 0], [0, 1]]))\n"
               "r = optimal_randomiser(U, dp.metrics.Euclidean(eps_per_unit=1.0))\n"
               "print('ok', r.check.ok)\n")
    assert out.returncode == 0, out.stderr
    assert out.stdout == "ok True\n", out.stdout              # no "Running HiGHS ..." line
    assert "HiGHS" not in out.stderr


def test_the_banner_silencer_keeps_other_output() -> None:
    """Output printed before and after the silenced model construction still arrives, in order."""
    pytest.importorskip("highspy")
    out = _run("print('before', flush=True)\n"
               "import numpy as np, dprivacy as dp\n"
               "from dprivacy.local import optimal_randomiser\n"
               "optimal_randomiser(dp.Universe.from_points(np.array([[0.0], [1.0]])),\n"
               "                   dp.metrics.Euclidean(1.0))\n"
               "print('after')\n")
    assert out.returncode == 0, out.stderr
    assert out.stdout == "before\nafter\n", out.stdout


def test_a_local_spark_session_starts_quietly() -> None:
    pytest.importorskip("pyspark")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("Spark needs a Java runtime: none on PATH and JAVA_HOME unset")
    out = _run("from dprivacy.tables.relations.engine import local_session\n"
               "s = local_session(1)\nprint(s.range(3).count())\ns.stop()\n", timeout=600)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "3\n"
    for noise in (" WARN ", "Setting default log level", "log4j profile", "setLogLevel"):
        assert noise not in out.stderr, out.stderr
    # what is left is at most the JVM launcher's own line about incubator modules, printed
    # before any logging is configured (the launcher cannot be told to keep quiet)
    left = [line for line in out.stderr.splitlines() if line.strip()]
    assert all(line.startswith("WARNING: Using incubator modules") for line in left), left
