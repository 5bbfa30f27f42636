"""The Python examples of the documentation's tutorials run as written.

Each tutorial's ```python blocks are executed in order in one namespace (the page is one session).
Where a page prints data-independent values (budgets, refusals), the test checks them too.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


@pytest.mark.parametrize("page", ["tutorials/cities.md", "tutorials/blowfish.md",
                                  "tutorials/configs.md", "tutorials/tables.md", "local.md"])
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
    if page == "local.md":
        # the data-independent figures the page states in its comments
        for line in ("1.0986122886681098\n", "inf\n", "0.75\n", "3.0\n2.0\n",
                     "{'total': 1.0, 'field/income': 0.5}", "{'total': 0.6, 'field/income': 0.1}",
                     "20 ['cost', 'post_ok', 'query', 'result', 'status', 'user']", "True Optimal"):
            assert line in out, (line, out)
    if page.endswith("tables.md"):
        # the budgets the page states in its comments are the ones the library reports
        remaining = [line.split()[1] for line in out.splitlines() if line.startswith("remaining")]
        assert remaining == ["0.9", "0.7", "0.6", "0.6", "0.9"], out
        assert "refused: BudgetExceededError" in out, out
        assert "group_by needs as_pinq first" in out, out
        for budgets in ("[0.6, 0.6, 1.0, 0.6, 1.0]", "[0.6, 0.6, 0.2, 0.6, 0.2]",
                        "[1.0, 1.0, 1.0, 0.7, 0.7]"):
            assert budgets in out, out
