#!/usr/bin/env python3
"""Check the contents of a built dprivacy wheel: what must be in it, and nothing that must not.

Usage: python .ci/check_wheel.py dist/dprivacy-*.whl   (exit 0 = fine, 1 = problems, listed)

Must be present: the licence (PEP 639: ``*.dist-info/licenses/LICENSE`` and ``License-Expression``
metadata), the ``py.typed`` markers, the mechanism-config JSON Schema, every data file of
``datasets/`` under ``dprivacy/_datasets/``, every module of ``dprivacy/`` and ``solvers/``, and
the version of ``dprivacy/_version.py``. Must be absent: tests, experiments, docs, CI files,
compiled files, and any top-level package other than ``dprivacy`` and ``solvers``; matplotlib
only as an optional (extra) requirement.
"""

from __future__ import annotations

import re
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("dprivacy", "solvers")
FORBIDDEN_TOP = ("tests", "experiments", "docs", ".ci", "datasets", "build", "dist")


def source_version() -> str:
    text = (ROOT / "dprivacy" / "_version.py").read_text(encoding="utf-8")
    match = re.search(r'__version__\s*=\s*"([^"]+)"', text)
    if not match:
        raise SystemExit("dprivacy/_version.py has no __version__")
    return match.group(1)


def check(wheel: Path) -> list[str]:
    problems: list[str] = []
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        dist_info = sorted({n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info")})
        if len(dist_info) != 1:
            return [f"expected one .dist-info folder, found {dist_info}"]
        di = dist_info[0]
        meta = Parser().parsestr(zf.read(f"{di}/METADATA").decode("utf-8"))

    required = {
        f"{di}/licenses/LICENSE": "the licence file (PEP 639 license-files)",
        "dprivacy/py.typed": "the PEP 561 marker of dprivacy",
        "solvers/py.typed": "the PEP 561 marker of solvers",
        "dprivacy/schemas/mechanism-config.v1.schema.json": "the mechanism-config JSON Schema (v1)",
        "dprivacy/schemas/mechanism-config.v2.schema.json": "the mechanism-config JSON Schema (v2)",
    }
    for data in sorted((ROOT / "datasets").glob("*.csv")):
        required[f"dprivacy/_datasets/{data.name}"] = "a shipped data set"
    for pkg in PACKAGES:
        for module in sorted((ROOT / pkg).rglob("*.py")):
            if "__pycache__" not in module.parts:
                required[module.relative_to(ROOT).as_posix()] = "a module of the package"
    for name, what in required.items():
        if name not in names:
            problems.append(f"missing {name} ({what})")

    for name in sorted(names):
        top = name.split("/")[0]
        if top in FORBIDDEN_TOP:
            problems.append(f"unintended file {name} (the {top}/ folder must not be shipped)")
        elif top not in PACKAGES and top != di:
            problems.append(f"unintended top-level entry {name}")
        if name.endswith((".pyc", ".pyo")) or "__pycache__" in name.split("/"):
            problems.append(f"compiled file {name}")

    if meta.get("License-Expression") != "MIT":
        problems.append(f"License-Expression is {meta.get('License-Expression')!r}, expected 'MIT'")
    if "LICENSE" not in (meta.get_all("License-File") or []):
        problems.append("METADATA has no 'License-File: LICENSE'")
    if meta.get("Version") != source_version():
        problems.append(f"wheel version {meta.get('Version')} != dprivacy/_version.py "
                        f"{source_version()}")
    for req in meta.get_all("Requires-Dist") or []:
        if req.lower().startswith("matplotlib") and "extra ==" not in req:
            problems.append(f"matplotlib is a runtime requirement ({req}); it belongs in an extra")
    return problems


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    wheel = Path(argv[0])
    problems = check(wheel)
    for p in problems:
        print(f"check_wheel: {p}", file=sys.stderr)
    if problems:
        print(f"check_wheel: {wheel.name}: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print(f"check_wheel: {wheel.name}: contents as intended")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
