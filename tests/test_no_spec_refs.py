"""User-facing text cites the paper or the docs, never the project's internal specification.

Shipped files under dprivacy/ and solvers/, the README and the output of the ``dprivacy`` command
must not mention "spec §" or the internal documents DX_MECHANISMS.md / PINQ_PROPER.md, which users
do not have. On failure the message lists every offending file and line.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import dprivacy

PACKAGE_ROOT = Path(dprivacy.__file__).resolve().parent.parent  # the tree that is tested
PROJECT = Path(__file__).resolve().parent.parent
FORBIDDEN = re.compile(r"spec\s*§|DX_MECHANISMS|PINQ_PROPER", re.IGNORECASE)
TEXT_SUFFIXES = {".py", ".json", ".md", ".txt", ".csv", ".toml", ".cfg", ".rst", ".pyi"}


def offending_lines(text: str, where: str) -> list[str]:
    return [f"{where}:{n}: {line.strip()[:120]}" for n, line in enumerate(text.splitlines(), 1)
            if FORBIDDEN.search(line)]


def test_the_pattern_catches_what_it_should() -> None:
    assert offending_lines("see spec §3.8 for the proof", "x")
    assert offending_lines("(spec DX_MECHANISMS.md §7.2)", "x")
    assert offending_lines("PINQ_PROPER.md row 11", "x")
    assert not offending_lines("Theorem 1 (docs/theory.md); respects the metric", "x")


def test_shipped_files_and_readme() -> None:
    files = [p for pkg in ("dprivacy", "solvers") for p in sorted((PACKAGE_ROOT / pkg).rglob("*"))
             if p.is_file() and p.suffix in TEXT_SUFFIXES and "__pycache__" not in p.parts]
    files += [PROJECT / "README.md", PROJECT / "datasets" / "README.md"]  # the latter ships too
    assert len(files) > 20
    bad = [hit for p in files
           for hit in offending_lines(p.read_text(encoding="utf-8", errors="replace"),
                                      str(p.relative_to(PACKAGE_ROOT if p.is_relative_to(PACKAGE_ROOT)
                                                        else PROJECT)))]
    assert not bad, f"{len(bad)} internal-spec citations in shipped text:\n" + "\n".join(bad)


def _cli(*args: str, cwd: Path) -> str:
    env = {**os.environ, "PYTHONPATH": str(PACKAGE_ROOT), "TQDM_DISABLE": "1"}
    res = subprocess.run([sys.executable, "-m", "dprivacy", *args], capture_output=True, text=True,
                         cwd=cwd, env=env, timeout=300)
    return res.stdout + res.stderr


@pytest.mark.slow
def test_cli_output(tmp_path: Path) -> None:
    main_help = _cli("--help", cwd=tmp_path)
    refusal = _cli("no-such-command", cwd=tmp_path)  # argparse lists the valid commands
    assert "choose from" in refusal, refusal
    listed = refusal.split("choose from", 1)[1].split(")")[0]
    commands = [c.strip(" '\"") for c in listed.split(",")]
    assert "demo" in commands, commands
    outputs = {"dprivacy --help": main_help}
    for cmd in commands:
        outputs[f"dprivacy {cmd} --help"] = _cli(cmd, "--help", cwd=tmp_path)
    # the normal output of the main job
    outputs["dprivacy demo"] = _cli("demo", "--out", str(tmp_path / "demo.json"), cwd=tmp_path)
    bad = [hit for what, text in outputs.items() for hit in offending_lines(text, what)]
    assert not bad, f"{len(bad)} internal-spec citations in CLI output:\n" + "\n".join(bad)
