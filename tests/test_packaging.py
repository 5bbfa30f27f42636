"""Packaging: a light import, one version source, and the CI wheel-contents checker itself."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import dprivacy

ROOT = Path(__file__).resolve().parent.parent
PACKAGE_ROOT = Path(dprivacy.__file__).resolve().parent.parent


def test_import_does_not_load_plotting_or_engines(tmp_path: Path) -> None:
    """``import dprivacy`` loads neither matplotlib nor an optional engine or web stack."""
    code = ("import sys, dprivacy\n"
            "heavy = [m for m in ('matplotlib', 'pyspark', 'duckdb', 'fastapi', 'distributed')\n"
            "         if m in sys.modules]\n"
            "assert not heavy, heavy\n")
    env = {**os.environ, "PYTHONPATH": str(PACKAGE_ROOT)}
    res = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr


#: Libraries that take a large share of a second to import; the command line's --help and the
#: core objects (universes, workloads, metrics, the design entry point) must not load them.
SLOW_LIBRARIES = ("cvxpy", "scipy.optimize", "scipy.stats", "ot", "networkx", "matplotlib")


def _import_report(code: str, tmp_path: Path) -> tuple[list[str], float]:
    """(slow libraries in sys.modules, cumulative -X importtime of the top module in s) after code."""
    probe = (code + "\nimport sys\n"
             f"print(','.join(m for m in {SLOW_LIBRARIES!r} if m in sys.modules))\n")
    env = {**os.environ, "PYTHONPATH": str(PACKAGE_ROOT)}
    res = subprocess.run([sys.executable, "-X", "importtime", "-c", probe], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    total = 0
    for line in res.stderr.splitlines():  # "import time: self | cumulative | name", top level
        parts = line.split("|")
        if len(parts) == 3 and parts[2].rstrip() == parts[2].strip() and not parts[2].startswith("  "):
            total += int(parts[1])
    loaded = [m for m in res.stdout.strip().split(",") if m]
    return loaded, total / 1e6


def test_import_and_help_stay_light(tmp_path: Path) -> None:
    """``import dprivacy``, the core objects and the command line's parser load no slow library.

    The time bound is generous (the machine may be loaded); the module check is the strict part:
    cvxpy, scipy.optimize/stats and POT load only where a solver or a transport problem runs.
    """
    loaded, seconds = _import_report("import dprivacy", tmp_path)
    assert loaded == [] and seconds < 0.5, (loaded, seconds)
    loaded, seconds = _import_report(
        "import dprivacy as dp\n"
        "dp.Universe, dp.Workload, dp.metrics.Euclidean, dp.design, dp.MechanismConfig\n"
        "from dprivacy.cli import build_parser\nbuild_parser()", tmp_path)
    assert loaded == [], loaded
    assert seconds < 2.0, seconds
    res = subprocess.run([sys.executable, "-m", "dprivacy", "--help"], cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": str(PACKAGE_ROOT)},
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and "design" in res.stdout, res.stderr


def test_one_version_source() -> None:
    from dprivacy._version import __version__

    assert dprivacy.__version__ == __version__
    assert "version =" not in (ROOT / "pyproject.toml").read_text().split("[project]")[1].split("[")[0]


def _checker():
    spec = importlib.util.spec_from_file_location("check_wheel", ROOT / ".ci" / "check_wheel.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _fake_wheel(path: Path, skip: set[str], extra: dict[str, str]) -> Path:
    """A wheel-shaped zip with what a good wheel holds, minus ``skip``, plus ``extra``."""
    di = "dprivacy-0.0.dist-info"
    version = _checker().source_version()
    files = {f"{di}/METADATA": ("Metadata-Version: 2.4\nName: dprivacy\nVersion: " + version
                                + "\nLicense-Expression: MIT\nLicense-File: LICENSE\n"
                                "Requires-Dist: matplotlib>=3.8; extra == 'plot'\n\n"),
             f"{di}/licenses/LICENSE": "MIT", "dprivacy/py.typed": "", "solvers/py.typed": "",
             "dprivacy/schemas/mechanism-config.v1.schema.json": "{}",
             "dprivacy/schemas/mechanism-config.v2.schema.json": "{}"}
    for data in (ROOT / "datasets").glob("*.csv"):
        files[f"dprivacy/_datasets/{data.name}"] = ""
    for pkg in ("dprivacy", "solvers"):
        for module in (ROOT / pkg).rglob("*.py"):
            if "__pycache__" not in module.parts:
                files[module.relative_to(ROOT).as_posix()] = ""
    files.update(extra)
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in files.items():
            if name not in skip:
                zf.writestr(name, text)
    return path


def test_wheel_checker_accepts_a_complete_wheel_and_names_each_problem(tmp_path: Path) -> None:
    check = _checker().check
    assert check(_fake_wheel(tmp_path / "good.whl", set(), {})) == []
    bad = check(_fake_wheel(tmp_path / "bad.whl",
                            {"dprivacy-0.0.dist-info/licenses/LICENSE", "dprivacy/py.typed",
                             "dprivacy/_datasets/us_cities.csv"},
                            {"tests/test_x.py": "", "experiments/fig.py": "", "docs/conf.py": "",
                             "dprivacy/__pycache__/x.cpython-311.pyc": ""}))
    text = "\n".join(bad)
    for needle in ("licenses/LICENSE", "dprivacy/py.typed", "us_cities.csv", "tests/test_x.py",
                   "experiments/fig.py", "docs/conf.py", "compiled file"):
        assert needle in text, (needle, text)
