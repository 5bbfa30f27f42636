"""``dprivacy local optimal``: the optimal d_X-local randomiser LP from the command line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dprivacy.cli import main as cli_main
from dprivacy.local import PersonalBudget, Query, UserAgent, check_dx, randomiser_from_json
from dprivacy.local.query import Code

pytestmark = pytest.mark.timeout(300)


def _grid(tmp_path: Path) -> Path:
    p = tmp_path / "grid.csv"
    rows = ["name,x,y,w"] + [f"p{i}{j},{i},{j},{i + j + 1}" for i in range(3) for j in range(3)]
    p.write_text("\n".join(rows) + "\n")
    return p


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli_main(["local", "optimal", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def _figure(out: str, name: str) -> float:
    text = out.split(name, 1)[1].split(";")[0]
    return float(text.split()[0])


def test_optimal_writes_a_private_T_the_agent_can_use(tmp_path, capsys) -> None:
    grid = _grid(tmp_path)
    base = ["--universe", str(grid), "--metric", "euclidean", "--param", "eps_per_unit=1"]
    code, out, _ = _run(capsys, *base, "--out", str(tmp_path / "T.json"))
    assert code == 0, out
    doc = json.loads((tmp_path / "T.json").read_text())
    T = randomiser_from_json(doc)  # noqa: N806 (the file is a randomiser JSON)
    labels = [f"p{i}{j}" for i in range(3) for j in range(3)]
    assert T.inputs == labels
    xy = np.array([[i, j] for i in range(3) for j in range(3)], dtype=float)
    eps = np.linalg.norm(xy[:, None] - xy[None], axis=-1)
    M = np.zeros((9, 9))  # noqa: N806 (T over all 9 labels, columns named by its outputs)
    M[:, [labels.index(o) for o in T.outputs]] = T.matrix
    assert check_dx(M, eps).ok  # independent of the command's own check
    loss, bound = _figure(out, "expected loss"), _figure(out, "certified lower bound")
    assert bound <= loss + 1e-9 and loss - bound <= 1e-6 * max(1.0, loss)
    assert doc["optimal"]["lower_bound"] == pytest.approx(bound, rel=1e-9)
    expected = float(np.mean(np.sum(M * eps, axis=1)))  # uniform prior, loss = the metric
    assert loss == pytest.approx(expected, rel=1e-9)
    # an independent method (scipy's linprog on every constraint) finds the same optimum
    code, out2, _ = _run(capsys, *base, "--method", "direct", "--out", str(tmp_path / "T2.json"))
    assert code == 0 and _figure(out2, "expected loss") == pytest.approx(loss, rel=1e-6)
    # the agent loads it as the T of a query and answers with one of its outputs
    q = Query("opt", T, Code.builtin("field"), fields=("where",))
    a = UserAgent("u1", {"where": "p11"}, PersonalBudget(":memory:", "u1", total=10.0), sandbox=None,
                  pad=False, rng=0)
    r = a.handle(q.to_dict())
    assert r["status"] == "ok" and r["result"] in T.outputs and r["cost"] == pytest.approx(T.cost())


def test_prior_loss_and_quality_change_the_program(tmp_path, capsys) -> None:
    grid = _grid(tmp_path)
    base = ["--universe", str(grid), "--metric", "euclidean", "--param", "eps_per_unit=0.7"]
    losses = {}
    for extra in ((), ("--prior", "w"), ("--loss", "squared", "--quality", "coords")):
        code, out, _ = _run(capsys, *base, *extra, "--out", str(tmp_path / "T.json"))
        assert code == 0, out
        losses[extra] = _figure(out, "expected loss")
        assert json.loads((tmp_path / "T.json").read_text())["optimal"]["prior"] == (
            "w" if extra[:1] == ("--prior",) else "uniform")
    assert len({round(v, 9) for v in losses.values()}) == 3


def test_optimal_usage_and_input_errors(tmp_path, capsys) -> None:
    grid = _grid(tmp_path)
    base = ["--universe", str(grid), "--metric", "euclidean", "--param", "eps_per_unit=1"]
    assert _run(capsys, *base)[0] == 2  # --out is required
    code, _, err = _run(capsys, *base, "--prior", "nope", "--out", str(tmp_path / "T.json"))
    assert code == 2 and "--prior" in err
    attr = tmp_path / "attr.csv"
    attr.write_text("colour\nred\ngreen\nblue\n")
    code, _, err = _run(capsys, "--universe", str(attr), "--metric", "discrete", "--param", "eps=1",
                        "--quality", "coords", "--out", str(tmp_path / "T.json"))
    assert code == 2 and "coords" in err
    code, out, _ = _run(capsys, "--universe", str(attr), "--metric", "discrete", "--param", "eps=1",
                        "--out", str(tmp_path / "T.json"))
    assert code == 0 and "certified lower bound" in out  # discrete metric: loss = P(misreport)
    assert _run(capsys, *base, "--out", str(tmp_path / "missing" / "T.json"))[0] in (2, 3)
    assert not (tmp_path / "missing").exists()


def test_gap_and_time_limit_give_a_certificate(tmp_path, capsys) -> None:
    grid = tmp_path / "g.csv"
    grid.write_text("name,x,y\n" + "".join(f"c{i}{j},{i},{j}\n" for i in range(5) for j in range(5)))
    base = ["--universe", str(grid), "--metric", "euclidean", "--param", "eps_per_unit=0.5"]
    code, out, _ = _run(capsys, *base, "--gap", "0.01", "--out", str(tmp_path / "T.json"))
    assert code == 0, out
    cert = json.loads((tmp_path / "T.json").read_text())["optimal"]
    assert 0 <= cert["gap"] <= 0.01 and cert["lower_bound"] <= cert["expected_loss"]
    assert cert["dx_check"]["ok"] and cert["dx_check"]["checked"] == "all pairs"
    assert cert["method"] == "lagrangian" and "%" in out
    # the bound is below the optimum found by an independent method
    code, out2, _ = _run(capsys, *base, "--method", "direct", "--out", str(tmp_path / "T2.json"))
    assert code == 0 and cert["lower_bound"] <= _figure(out2, "expected loss") * (1 + 1e-9)
    # one round only: still private, still a valid bound (maybe a wide gap)
    code, out3, _ = _run(capsys, *base, "--time-limit", "0.001", "--out", str(tmp_path / "T3.json"))
    assert code == 0, out3
    c3 = json.loads((tmp_path / "T3.json").read_text())["optimal"]
    assert c3["dx_check"]["ok"] and c3["lower_bound"] <= _figure(out2, "expected loss") * (1 + 1e-9)
    assert _run(capsys, *base, "--gap", "2", "--out", str(tmp_path / "T4.json"))[0] == 2
    code, _, err = _run(capsys, *base, "--method", "direct", "--gap", "0.1",
                        "--out", str(tmp_path / "T4.json"))
    assert code == 2 and "--gap" in err and not (tmp_path / "T4.json").exists()


def test_help_describes_every_flag(capsys) -> None:
    import argparse

    from dprivacy.cli.app import build_parser

    for sub in ("optimal", "simulate"):
        assert cli_main(["local", sub, "--help"]) == 0
        text = capsys.readouterr().out
        parser = build_parser()
        local = next(a for a in parser._subparsers._group_actions[0].choices.values()  # noqa: SLF001
                     if a.prog.endswith("local"))
        sp = local._subparsers._group_actions[0].choices[sub]  # noqa: SLF001
        for action in sp._actions:  # noqa: SLF001
            if isinstance(action, argparse._HelpAction):  # noqa: SLF001
                continue
            assert action.help and action.help != argparse.SUPPRESS, action.dest
            assert any(o in text for o in action.option_strings)
