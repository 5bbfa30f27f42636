"""The Python examples of the documentation's tutorials run as written.

Each tutorial's ```python blocks are executed in order in one namespace (the page is one session).
The tables tutorial is left out: it shows the per-record table API, which its own tests cover.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


@pytest.mark.parametrize("page", ["tutorials/cities.md", "tutorials/blowfish.md",
                                  "tutorials/configs.md"])
def test_tutorial_runs(page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    blocks = BLOCK.findall((DOCS / page).read_text(encoding="utf-8"))
    assert blocks, f"{page} has no python examples"
    namespace: dict = {"__name__": "__tutorial__"}
    for k, code in enumerate(blocks):
        exec(compile(code, f"{page} block {k + 1}", "exec"), namespace)  # noqa: S102
    out = capsys.readouterr().out
    if page.endswith("configs.md"):
        assert out.count("refused:") == 2, out  # both tampered loads were refused
