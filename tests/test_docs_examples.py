"""Every code block of README.md and docs/**/*.md runs as written.

A page is one session: its ```python blocks run in order in one namespace, and its ```bash
blocks run command by command (a command continued with ``\\`` is one command) in the same
scratch directory, which holds a copy of ``examples/``. A command is expected to exit 0 unless
its line ends with the comment ``# exit N``. ``dprivacy`` commands run in this process (the
console script's entry point); other commands run under ``bash``. The few blocks that cannot run
offline or inside the test suite are listed in :data:`SKIP`, each with its reason. Where a page
prints data-independent values (budgets, refusals), the test checks them too.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
BLOCK = re.compile(r"^```(python|bash)\n(.*?)^```", re.S | re.M)
PAGES = ["README.md"] + sorted(str(p.relative_to(ROOT)) for p in DOCS.rglob("*.md")
                               if "_build" not in p.parts and "_autosummary" not in p.parts)

#: (page, the block's first line) -> why the block is not run.
SKIP: dict[tuple[str, str], str] = {
    ("README.md", "pip install . && dprivacy demo                 # the main job"):
        "installs from the network and runs the whole test suite (CI runs these two commands)",
    ("docs/quickstart.md", "pip install . && dprivacy demo                 # the main job"):
        "installs from the network and runs the whole test suite (CI runs these two commands)",
    ("docs/quickstart.md", 'pip install ".[docs]" && sphinx-build -W --keep-going -b html docs '
                           "docs/_build/html"):
        "installs from the network; CI builds the documentation itself",
    ("docs/local.md", 'pip install ".[local]"'): "installs from the network",
    ("docs/local.md", "# the aggregator and one user's agent: long-running services (stop them "
                      "with Ctrl-C)"):
        "starts services that run until stopped (tests/local/aggregator/test_transport.py runs them)",
    ("docs/local.md", "python -m experiments.local_optimal_vs_planar            # the full run"):
        "the full run takes minutes (tests/local/test_experiment.py runs the quick mode)",
    ("docs/service.md", "dprivacy serve --config service.toml --host 127.0.0.1 --port 8765"):
        "starts a service that runs until stopped (tests/service/test_crash.py runs it)",
    ("docs/reproduction.md", "dprivacy reproduce --all"):
        "the full reproduction takes minutes (tests/test_experiments.py runs the quick mode)",
}


def blocks(page: str) -> list[tuple[str, str]]:
    """(language, code) of every python/bash block of ``page``, in order."""
    return BLOCK.findall((ROOT / page).read_text(encoding="utf-8"))


def commands(code: str) -> list[tuple[str, int]]:
    """(command line, expected exit code) of every command of a bash block."""
    out, current = [], ""
    for line in code.splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            current += line.rstrip()[:-1] + " "
            continue
        current += line
        m = re.search(r"#\s*exit (\d+)\s*$", current)
        out.append((current, int(m.group(1)) if m else 0))
        current = ""
    return out


def run_bash(code: str, page: str, env: dict[str, str]) -> list[str]:
    """Run a bash block's commands; return what the dprivacy commands printed."""
    from dprivacy.cli import main

    printed = []
    for line, expected in commands(code):
        words = shlex.split(line, comments=True)
        if words and words[0] == "dprivacy" and not any(w in ("|", ">", "&&", ";") for w in words):
            code_ = main(words[1:])
        else:
            proc = subprocess.run(["bash", "-c", line], env=env, capture_output=True, text=True,
                                  timeout=600)
            code_ = proc.returncode
            printed.append(proc.stdout)
            if code_ != expected:
                pytest.fail(f"{page}: `{line}` exited {code_}, the page says {expected}\n"
                            f"{proc.stdout}\n{proc.stderr}")
        assert code_ == expected, f"{page}: `{line}` exited {code_}, the page says {expected}"
    return printed


def test_readme_is_short_and_keeps_the_two_commands() -> None:
    """A newcomer reads it in five minutes; CI runs its test command."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    assert 'pip install . && dprivacy demo' in text
    assert 'pip install ".[test]" && python -m pytest -q' in text
    for target in ("docs/theory.md", "docs/cli.md", "docs/reproduction.md", "docs/tables.md"):
        assert f"]({target}" in text and (ROOT / target).is_file(), target


def test_every_page_is_found() -> None:
    assert "README.md" in PAGES and "docs/tutorials/configs.md" in PAGES
    assert sum(len(blocks(p)) for p in PAGES) >= 40
    for page, first in SKIP:  # no stale entries: every skipped block exists
        assert any(code.splitlines()[0] == first for _, code in blocks(page)), (page, first)


@pytest.mark.parametrize("page", [p for p in PAGES if blocks(p)])
def test_page_runs(page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                   capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TQDM_DISABLE", "1")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]))
    if page == "docs/config-schema.md":  # the page validates a config file it assumes exists
        assert run_python_setup(tmp_path)
    namespace: dict = {"__name__": "__docs__"}
    ran = 0
    for k, (lang, code) in enumerate(blocks(page)):
        if (page, code.splitlines()[0]) in SKIP:
            continue
        ran += 1
        if lang == "python":
            exec(compile(code, f"{page} block {k + 1}", "exec"), namespace)  # noqa: S102
        else:
            run_bash(code, page, env)
    assert ran, f"{page}: every block is skipped"
    check_page_output(page, capsys.readouterr().out)


def run_python_setup(where: Path) -> bool:
    import numpy as np

    import dprivacy as dp

    U = dp.Universe.from_points(np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0]]))
    M, W = dp.metrics.Euclidean(eps_per_unit=0.5), dp.Workload(np.array([[1.0, 0.0, 2.0]]))
    dp.MechanismConfig.from_design(W, U, M, dp.design(W, U, M)).save(where / "config.json")
    return (where / "config.json").is_file()


def check_page_output(page: str, out: str) -> None:
    """The data-independent values a page states in its comments are the ones printed."""
    if page == "README.md":  # every value the README's comments state (seeded or exact)
        for line in ("[27.63 30.01 27.18  3.93]\n", "3.16\n", "[82.8 89.9 81.4 11.8]\n", "0.7\n",
                     "1.0986\n", "[0.308 0.692]\n"):
            assert line in out, (line, out)
    if page == "docs/tutorials/configs.md":
        assert out.count("refused:") == 2, out  # both tampered loads were refused
    if page == "docs/local.md":
        for line in ("1.0986122886681098\n", "inf\n", "0.75\n", "3.0\n2.0\n",
                     "{'total': 1.0, 'field/income': 0.5}", "{'total': 0.6, 'field/income': 0.1}",
                     "20 ['cost', 'query', 'result', 'status', 'user']", "401\n",
                     "is not an output of T", "[-1, 1]\n", "True True ", "(16, 16)\n"):
            assert line in out, (line, out)
    if page == "docs/service.md":  # budgets and refusals the page states
        for line in ("remaining 1.0\n", "remaining 0.75\n", "refused: BudgetExceededError\n",
                     "refused: UnsupportedOperationError\n", "True\n", "(3,)\n"):
            assert line in out, (line, out)
    if page == "docs/tutorials/strategy.md":  # all ranges: two prefixes each, Lap(1/0.1)
        assert "32896 (32896,) 20.0\n" in out, out
    if page == "docs/tutorials/tables.md":
        remaining = [line.split()[1] for line in out.splitlines() if line.startswith("remaining")]
        assert remaining == ["0.9", "0.7", "0.6", "0.5", "0.5", "0.9"], out
        assert "Janitor" in out, out  # the grouped answer has a row for a key with no record
        assert "refused: BudgetExceededError" in out, out
        assert "group_by needs as_pinq first" in out, out
        for budgets in ("[0.6, 0.6, 1.0, 0.6, 1.0]", "[0.6, 0.6, 0.2, 0.6, 0.2]",
                        "[1.0, 1.0, 1.0, 0.7, 0.7]"):
            assert budgets in out, out


def test_api_summaries_are_not_cut_at_a_citation() -> None:
    """docs/conf.py extends autosummary's abbreviations so that a first sentence citing
    "eq. (5)" or "Def. 3" is not cut there ("The d_X-private Laplace mechanism, eq.")."""
    pytest.importorskip("sphinx")
    import sphinx.ext.autosummary as autosummary

    assert isinstance(autosummary.WELL_KNOWN_ABBREVIATIONS, tuple)
    text = (DOCS / "conf.py").read_text(encoding="utf-8")
    assert "_autosummary.WELL_KNOWN_ABBREVIATIONS = " in text and '"eq."' in text
