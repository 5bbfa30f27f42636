"""A fuzz corpus of malformed command lines: every one fails cleanly.

Each case exits with a documented non-zero code (2 usage, 3 input, 4 refused, 5 budget; never 1,
the internal-error code), prints exactly one line on stderr and no traceback, writes nothing (no
--out file, no new file at all) and charges nothing (the ledger's spent budget is unchanged).
Cases run in-process through ``main(argv)``; tests/test_cli_subprocess.py runs a few as
``python -m dprivacy``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dprivacy.accounting import Accountant
from dprivacy.cli import main

U = ["--universe", "u.csv", "--metric", "euclidean", "--param", "eps_per_unit=0.5"]
INP = U + ["--queries", "q.csv"]
DESIGN = ["design", "--out", "out.json"]
REL = ["release", "good.json", "--records", "rec.csv", "--out", "out.csv",
       "--ledger", "ledger.sqlite"]


def _files() -> dict[str, bytes | str | None]:
    """Every input file of the corpus (None: a directory)."""
    deep = "[" * 100_000 + "]" * 100_000
    return {
        # universes
        "u.csv": "name,x,y\na,0,0\nb,1,0\nc,0,2\nd,3,3\n",
        "ll.csv": "name,latitude,longitude\na,40,-70\nb,41,-71\nc,42,-72\n",
        "u_empty.csv": "",
        "u_blank.csv": "  \n\n",
        "u_header_only.csv": "name,x,y\n",
        "u_latin1.csv": "name,x,y\nZ\xfcrich,0,0\n".encode("latin-1"),
        "u_nul.csv": b"name,x,y\x00\na,0,0\n",
        "u_semicolon.csv": "name;x;y\na;0;0\nb;1;0\n",
        "u_tab.csv": "name\tx\ty\na\t0\t0\nb\t1\t0\n",
        "u_ragged.csv": "name,x,y\na,0,0,7,8\nb,1\n",
        "u_dupcol.csv": "name,x,x\na,0,0\nb,1,1\n",
        "u_noname_col.csv": "name,,y\na,0,0\nb,1,1\n",
        "u_text_coord.csv": "name,x,y\na,0,0\nb,one,0\n",
        "u_nan_coord.csv": "name,x,y\na,0,0\nb,nan,0\n",
        "u_inf_coord.csv": "name,x,y\na,0,0\nb,inf,0\n",
        "u_huge_coord.csv": "name,x,y\na,0,0\nb,1e308,0\n",
        "u_empty_coord.csv": "name,x,y\na,0,0\nb,,0\n",
        "u_dup.csv": "name,x,y\na,0,0\na,1,1\n",
        "u_nokey.csv": "name,x,y\na,0,0\n,1,1\n",
        "u_lat100.csv": "name,latitude,longitude\na,100,0\nb,0,0\n",
        "u_dir": None,
        # query matrices
        "q.csv": "q1,1,0,0,1\nq2,0,1,1,0\n",
        "q_empty.csv": "",
        "q_header_only.csv": "query,a,b,c,d\n",
        "q_text.csv": "1,0,abc,1\n0,1,1,0\n",
        "q_blank_entry.csv": "1,0,,1\n0,1,1,0\n",
        "q_semicolon.csv": "1;0;0;1\n0;1;1;0\n",
        "q_wide.csv": "1,0,0,1,5\n",
        "q_narrow.csv": "1,0,0\n",
        "q_nan.csv": "1,0,nan,1\n",
        "q_inf.csv": "1,0,inf,1\n",
        "q_huge.csv": "1,0,1e300,1\n",
        "q_subnormal.csv": "1,0,1e-320,1\n",
        "q_dupnames.csv": "q,1,0,0,1\nq,0,1,1,0\n",
        "q_badheader.csv": "query,a,b,zz,d\nq1,1,0,0,1\n",
        "q_latin1.csv": "caf\xe9,1,0,0,1\n".encode("latin-1"),
        "q.txt": "1,0,0,1\n",
        "q_zero.npy": b"",
        "q_garbage.npy": b"\x93NUMPY garbage garbage garbage",
        "q_dir.npy": None,
        # records
        "rec.csv": "name\na\nb\nb\nd\n",
        "rec_nokey.csv": "city\na\nb\n",
        "rec_unknown.csv": "name\na\nzz\n",
        "rec_empty.csv": "",
        "rec_latin1.csv": "name\n\xe9\n".encode("latin-1"),
        "rec_semicolon.csv": "name;n\na;1\n",
        "cnt_text.csv": "name,n\na,3\nb,many\n",
        "cnt_neg.csv": "name,n\na,3\nb,-1\n",
        "cnt_frac.csv": "name,n\na,3\nb,1.5\n",
        "cnt_nan.csv": "name,n\na,3\nb,nan\n",
        "cnt_blank.csv": "name,n\na,3\nb,\n",
        "cnt_huge.csv": "name,n\na,3\nb,1e300\n",
        # configs
        "broken.json": '{"schema": "dprivacy.mechanism-config", "version": 1, "kind": ',
        "deep.json": deep,
        "array.json": "[1, 2, 3]",
        "nan.json": '{"a": NaN}',
        "empty.json": "",
        "latin1.json": '{"a": "\xe9"}'.encode("latin-1"),
        "conf_dir": None,
        "not_sqlite.sqlite": "this is not a database\n",
        "corrupt.sqlite": b"SQLite format 3\x00" + b"garbage" * 600,
        "u_one.csv": "name,x,y\na,0,0\n",
    }


def _config_variants(good: dict) -> dict[str, str]:
    def edit(fn) -> str:  # noqa: ANN001
        d = json.loads(json.dumps(good))
        fn(d)
        return json.dumps(d)

    return {
        "schema.json": edit(lambda d: d.update(schema="something-else")),
        "version.json": edit(lambda d: d.update(version=99)),
        "beta_text.json": edit(lambda d: d["design"].update(beta=["a", "b"])),
        "beta_short.json": edit(lambda d: d["design"].update(beta=[1.0])),
        "beta_big.json": edit(lambda d: d["design"].update(beta=[b * 10 for b in d["design"]["beta"]])),
        "beta_inf.json": json.dumps(good).replace('"beta": [', '"beta": [1e400, ', 1).replace(
            '"w": [', '"w": [1, ', 1),
        "no_design.json": edit(lambda d: d.pop("design")),
        "kind.json": edit(lambda d: d.update(kind="magic")),
        "fingerprint.json": edit(lambda d: d["universe"].update(fingerprint="0" * 64)),
        "eps_forged.json": edit(lambda d: (d["metric"]["params"].update(eps_per_unit=50.0),
                                           d["design"].update(beta=[b * 100 for b in
                                                                    d["design"]["beta"]]))),
    }


CASES: list[tuple[str, list[str]]] = [
    # ---- argparse and flags
    ("no-args", []),
    ("unknown-command", ["frobnicate"]),
    ("unknown-flag", ["design", "--frob"]),
    ("missing-required", ["design", "--universe", "u.csv"]),
    ("bad-method", DESIGN + INP + ["--method", "magic"]),
    ("bad-loss", DESIGN + INP + ["--loss", "l7"]),
    ("n-negative", DESIGN + INP + ["--n", "-1"]),
    ("n-text", DESIGN + INP + ["--n", "ten"]),
    ("demo-seed-negative", ["demo", "--seed", "-1", "--out", "out.json"]),
    ("demo-m-negative", ["demo", "--m", "-3", "--out", "out.json"]),
    ("demo-m-huge", ["demo", "--m", "1000000000", "--out", "out.json"]),
    ("demo-m-text", ["demo", "--m", "five", "--out", "out.json"]),
    ("demo-eps-zero", ["demo", "--eps-per-km", "0", "--out", "out.json"]),
    ("demo-eps-nan", ["demo", "--eps-per-km", "nan", "--out", "out.json"]),
    ("demo-eps-inf", ["demo", "--eps-per-km", "inf", "--out", "out.json"]),
    ("demo-eps-overflow", ["demo", "--eps-per-km", "1e400", "--out", "out.json"]),
    ("demo-out-dir", ["demo", "--out", "u_dir"]),
    ("reproduce-unknown", ["reproduce", "fig99"]),
    # ---- metric parameters
    ("metric-unknown", DESIGN + ["--universe", "u.csv", "--metric", "manhattan", "--queries",
                                 "q.csv"]),
    ("param-missing", DESIGN + ["--universe", "u.csv", "--metric", "euclidean", "--queries",
                                "q.csv"]),
    *[(f"param-{name}", DESIGN + ["--universe", "u.csv", "--metric", "euclidean", "--param",
                                  f"eps_per_unit={v}", "--queries", "q.csv"])
      for name, v in [("abc", "abc"), ("empty", ""), ("nan", "nan"), ("inf", "inf"),
                      ("negative", "-1"), ("zero", "0"), ("overflow", "1e400"),
                      ("subnormal", "1e-320"), ("huge", "1e200"), ("quoted-text", '"abc"'),
                      ("json-list", "[1]"), ("json-object", '{"a": 1}'), ("true", "true")]],
    ("param-unknown", DESIGN + INP + ["--param", "speed=3"]),
    ("param-repeated", DESIGN + INP + ["--param", "eps_per_unit=1"]),
    ("param-no-equals", DESIGN + ["--universe", "u.csv", "--metric", "euclidean", "--param",
                                  "eps_per_unit", "--queries", "q.csv"]),
    ("weights-non-key", DESIGN + ["--universe", "u.csv", "--metric", "attribute", "--param",
                                  "weights=gender:1", "--queries", "q.csv"]),
    ("weights-no-colon", DESIGN + ["--universe", "u.csv", "--metric", "attribute", "--param",
                                   "weights=gender", "--queries", "q.csv"]),
    ("weights-bad-json", DESIGN + ["--universe", "u.csv", "--metric", "attribute", "--param",
                                   "weights={gender", "--queries", "q.csv"]),
    ("weights-text", DESIGN + ["--universe", "u.csv", "--metric", "attribute", "--param",
                               "weights=name:high", "--queries", "q.csv"]),
    ("budgets-list", DESIGN + ["--universe", "u.csv", "--metric", "value", "--param",
                               "budgets=[1]", "--queries", "q.csv"]),
    ("value-rule", DESIGN + ["--universe", "u.csv", "--metric", "value", "--param",
                             'budgets={"name":{"a":1,"b":2}}', "--param", "rule=C",
                             "--queries", "q.csv"]),
    ("blowfish-smooth", DESIGN + ["--universe", "u.csv", "--metric", "blowfish", "--param",
                                  "theta=1", "--param", "eps=1", "--param", "smooth=maybe",
                                  "--queries", "q.csv"]),
    ("geodesic-model", DESIGN + ["--universe", "ll.csv", "--metric", "geodesic", "--param",
                                 "eps_per_km=1", "--param", "model=flat", "--queries", "q.csv"]),
    ("elementwise-no-column", DESIGN + ["--universe", "u.csv", "--metric", "elementwise",
                                        "--param", "eps=nosuch", "--queries", "q.csv"]),
    ("elementwise-short", DESIGN + ["--universe", "u.csv", "--metric", "elementwise",
                                    "--param", "eps=[1,2]", "--queries", "q.csv"]),
    ("elementwise-text-column", DESIGN + ["--universe", "u.csv", "--metric", "elementwise",
                                          "--param", "eps=name", "--queries", "q.csv"]),
    ("geodesic-on-xy", DESIGN + ["--universe", "u.csv", "--metric", "geodesic", "--param",
                                 "eps_per_km=1", "--queries", "q.csv"]),
    ("geodesic-coords-xy", DESIGN + ["--universe", "u.csv", "--coords", "x,y", "--metric",
                                     "geodesic", "--param", "eps_per_km=1", "--queries",
                                     "q.csv"]),
    ("geodesic-lat-100", DESIGN + ["--universe", "u_lat100.csv", "--metric", "geodesic",
                                   "--param", "eps_per_km=1", "--queries", "q.csv"]),
    ("coords-unknown", DESIGN + INP + ["--coords", "a,b"]),
    ("key-unknown", DESIGN + INP + ["--key", "id"]),
    ("builtin-unknown", DESIGN + ["--universe", "builtin:moon", "--metric", "euclidean",
                                  "--param", "eps_per_unit=1", "--queries", "q.csv"]),
    # ---- universe files
    *[(f"universe-{f}", DESIGN + ["--universe", f, "--metric", "euclidean", "--param",
                                   "eps_per_unit=1", "--queries", "q.csv"])
      for f in ["missing.csv", "u_empty.csv", "u_blank.csv", "u_header_only.csv",
                "u_latin1.csv", "u_nul.csv", "u_semicolon.csv", "u_tab.csv", "u_ragged.csv",
                "u_dupcol.csv", "u_noname_col.csv", "u_text_coord.csv", "u_nan_coord.csv",
                "u_inf_coord.csv", "u_huge_coord.csv", "u_empty_coord.csv", "u_dup.csv",
                "u_nokey.csv", "u_dir"]],
    # ---- query files
    *[(f"queries-{f}", DESIGN + U + ["--queries", f])
      for f in ["missing.csv", "q_empty.csv", "q_header_only.csv", "q_text.csv",
                "q_blank_entry.csv", "q_semicolon.csv", "q_wide.csv", "q_narrow.csv",
                "q_nan.csv", "q_inf.csv", "q_huge.csv", "q_subnormal.csv", "q_dupnames.csv",
                "q_badheader.csv", "q_latin1.csv", "q.txt", "q_zero.npy", "q_garbage.npy",
                "q_text.npy", "q_3d.npy", "q_object.npy", "q_nan.npy", "q_huge.npy",
                "q_subnormal.npy", "q_wide.npy", "q_dir.npy", "u_dir"]],
    # ---- --out
    ("out-dir", ["design", "--out", "u_dir"] + INP),
    ("out-trailing-slash", ["design", "--out", "newdir/"] + INP),
    ("out-no-folder", ["design", "--out", "nowhere/c.json"] + INP),
    ("out-empty", ["design", "--out", ""] + INP),
    ("out-is-input", ["design", "--out", "q.csv"] + INP),
    ("release-out-dir", ["release", "good.json", "--records", "rec.csv", "--out", "u_dir",
                         "--ledger", "ledger.sqlite"] + INP),
    # ---- verify: configs
    *[(f"verify-{f}", ["verify", f] + INP)
      for f in ["missing.json", "broken.json", "deep.json", "array.json", "nan.json",
                "empty.json", "latin1.json", "conf_dir", "schema.json", "version.json",
                "beta_text.json", "beta_short.json", "beta_big.json", "beta_inf.json",
                "no_design.json", "kind.json", "fingerprint.json", "eps_forged.json",
                "forged.json"]],
    ("verify-no-inputs", ["verify", "good.json"]),
    ("verify-other-metric", ["verify", "good.json", "--universe", "u.csv", "--metric",
                             "euclidean", "--param", "eps_per_unit=0.7", "--queries", "q.csv"]),
    ("verify-other-queries", ["verify", "good.json"] + U + ["--queries", "q2.csv"]),
    # ---- release: configs, records, counts, ledger
    *[(f"release-config-{f}", ["release", f, "--records", "rec.csv", "--out", "out.csv",
                               "--ledger", "ledger.sqlite"] + INP)
      for f in ["broken.json", "deep.json", "beta_big.json", "eps_forged.json", "forged.json",
                "fingerprint.json", "conf_dir"]],
    *[(f"release-records-{f}", ["release", "good.json", "--records", f, "--out", "out.csv",
                                "--ledger", "ledger.sqlite"] + INP)
      for f in ["missing.csv", "rec_nokey.csv", "rec_unknown.csv", "rec_empty.csv",
                "rec_latin1.csv", "rec_semicolon.csv", "u_dir"]],
    *[(f"release-count-{f}", REL[:3] + [f] + REL[4:] + ["--count-column", "n"] + INP)
      for f in ["cnt_text.csv", "cnt_neg.csv", "cnt_frac.csv", "cnt_nan.csv", "cnt_blank.csv",
                "cnt_huge.csv", "rec.csv"]],
    ("release-no-ledger", ["release", "good.json", "--records", "rec.csv", "--out",
                           "out.csv"] + INP),
    ("release-ledger-dir", REL[:-1] + ["u_dir"] + INP),
    ("release-ledger-not-sqlite", REL[:-1] + ["not_sqlite.sqlite"] + INP),
    ("release-ledger-corrupt", REL[:-1] + ["corrupt.sqlite", "--budget", "1"] + INP),
    ("weights-deep", DESIGN + ["--universe", "u.csv", "--metric", "attribute", "--param",
                               "weights=" + "{" * 100_000, "--queries", "q.csv"]),
    ("universe-device", DESIGN + ["--universe", "/dev/null", "--metric", "euclidean",
                                  "--param", "eps_per_unit=1", "--queries", "q.csv"]),
    ("universe-one-element", DESIGN + ["--universe", "u_one.csv", "--metric", "euclidean",
                                       "--param", "eps_per_unit=1", "--queries", "q1.csv"]),
    ("design-closed-form-m2", DESIGN + INP + ["--method", "closed_form"]),
    ("release-exponential-config", ["release", "exponential.json", "--records", "rec.csv",
                                    "--out", "out.csv", "--ledger", "ledger.sqlite"] + INP),
    ("release-ledger-no-folder", REL[:-1] + ["nowhere/l.sqlite"] + INP),
    ("release-new-budget-without-total", REL[:-1] + ["fresh.sqlite"] + INP),
    ("release-budget-conflict", REL + ["--budget", "7"] + INP),
    ("release-budget-name-new", REL + ["--budget-name", "other"] + INP),
    ("release-budget-negative", REL + ["--budget", "-1"] + INP),
    ("release-budget-nan", REL + ["--budget", "nan"] + INP),
    ("release-budget-text", REL + ["--budget", "lots"] + INP),
    ("release-budget-overflow", REL + ["--budget", "1e400"] + INP),
    ("release-seed-negative", REL + ["--seed", "-5"] + INP),
    ("release-budget-exhausted", ["release", "good.json", "--records", "rec.csv", "--out",
                                  "out.csv", "--ledger", "spent.sqlite"] + INP),
    ("release-other-metric-same-budget", ["release", "good5.json", "--records", "rec.csv",
                                          "--out", "out.csv", "--ledger", "ledger.sqlite",
                                          "--universe", "u.csv", "--metric", "euclidean",
                                          "--param", "eps_per_unit=5", "--queries", "q.csv"]),
]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_corpus(tmp_path_factory.mktemp("fuzz"))


def build_corpus(d: Path) -> Path:
    """Write every corpus file into ``d``, a valid config and two ledgers (one spent)."""
    for name, content in _files().items():
        p = d / name
        if content is None:
            p.mkdir()
        elif isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(content, encoding="utf-8")
    np.save(d / "q_text.npy", np.array([["a", "b", "c", "d"]]))
    np.save(d / "q_3d.npy", np.ones((1, 2, 4)))
    np.save(d / "q_object.npy", np.array([[1, 2, 3, None]], dtype=object), allow_pickle=True)
    np.save(d / "q_nan.npy", np.array([[1, 0, np.nan, 1]]))
    np.save(d / "q_huge.npy", np.array([[1, 0, 1e300, 1]]))
    np.save(d / "q_subnormal.npy", np.array([[1, 0, 1e-320, 1]]))
    np.save(d / "q_wide.npy", np.ones((1, 9)))
    (d / "q2.csv").write_text("q1,1,0,0,1\nq2,0,1,1,0.5\n")
    (d / "q1.csv").write_text("1\n")
    cwd = Path.cwd()
    os.chdir(d)
    try:
        assert main(["design", "--out", "good.json", *INP]) == 0
        assert main(["design", "--out", "good5.json", "--universe", "u.csv", "--metric",
                     "euclidean", "--param", "eps_per_unit=5", "--queries", "q.csv"]) == 0
        # a forged config: beta and eps x 100 with the metric fingerprint recomputed
        import dprivacy as dp

        good = json.loads((d / "good.json").read_text())
        for name, text in _config_variants(good).items():
            (d / name).write_text(text)
        forged = json.loads(json.dumps(good))
        forged["design"]["beta"] = [b * 100 for b in forged["design"]["beta"]]
        forged["metric"]["params"]["eps_per_unit"] = 50.0
        U_ = dp.Universe.from_dataframe(
            __import__("pandas").read_csv("u.csv", dtype=str).assign(
                x=lambda t: t.x.astype(float), y=lambda t: t.y.astype(float)), ["name"],
            coords=["x", "y"])
        forged["metric"]["fingerprint"] = dp.metrics.Euclidean(50.0).fingerprint(U_)
        (d / "forged.json").write_text(json.dumps(forged))
        # a valid config of another kind (exponential), which the command line does not release
        from dprivacy.cli.app import build_parser
        from dprivacy.cli.common import inputs_from

        inp = inputs_from(build_parser().parse_args(["verify", "good.json", *INP]))
        dp.MechanismConfig.from_design(
            inp.workload, inp.universe, inp.metric,
            dp.design(inp.workload, inp.universe, inp.metric), kind="exponential",
        ).save(d / "exponential.json")
        # a live budget (K = 5, one release spent) and an exhausted one (K = 1, spent)
        assert main(REL + ["--budget", "5", *INP]) == 0
        assert main(["release", "good.json", "--records", "rec.csv", "--out", "out2.csv",
                     "--ledger", "spent.sqlite", "--budget", "1", *INP]) == 0
        (d / "out.csv").unlink()
        (d / "out2.csv").unlink()
    finally:
        os.chdir(cwd)
    return d


def _snapshot(d: Path) -> dict[str, tuple[int, int]]:
    """Every file by name, with size and mtime except for ledgers (SQLite checkpoints rewrite
    them on open; what they hold is checked by :func:`_spent`)."""
    return {str(p.relative_to(d)): (0, 0) if ".sqlite" in p.name else
            (p.stat().st_size, p.stat().st_mtime_ns)
            for p in d.rglob("*") if p.is_file() and not p.name.endswith(("-wal", "-shm"))}


def _spent(d: Path) -> tuple[float, float]:
    return (Accountant.durable(d / "ledger.sqlite").spent,
            Accountant.durable(d / "spent.sqlite").spent)


@pytest.mark.parametrize("argv", [c[1] for c in CASES], ids=[c[0] for c in CASES])
def test_malformed_input_fails_cleanly(argv: list[str], corpus: Path,
                                       monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(corpus)
    monkeypatch.setenv("TQDM_DISABLE", "1")
    monkeypatch.delenv("DPRIVACY_DEBUG", raising=False)
    before, spent = _snapshot(corpus), _spent(corpus)
    code = main(argv)
    err = capsys.readouterr().err
    assert code in (2, 3, 4, 5), (code, err)
    assert err.count("\n") == 1 and err.endswith("\n"), err
    assert "Traceback" not in err and err.startswith("dprivacy"), err
    assert _snapshot(corpus) == before, "a file was written or changed"
    assert _spent(corpus) == spent, "budget was charged"


def test_classes_get_their_codes_and_messages(corpus: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """The issue's named cases: each message names the flag or file and what is wrong."""
    monkeypatch.chdir(corpus)
    expect = {
        "demo-seed-negative": (2, "--seed"), "demo-m-negative": (2, "--m"),
        "param-abc": (2, "eps_per_unit"), "param-quoted-text": (2, "eps_per_unit"),
        "param-overflow": (2, "infinity"), "param-subnormal": (2, "subnormal"),
        "weights-non-key": (2, "not key columns"), "universe-u_empty.csv": (3, "empty"),
        "queries-q_zero.npy": (3, "q_zero.npy"), "universe-u_text_coord.csv": (3, "line 3"),
        "release-count-cnt_text.csv": (3, "'many'"), "verify-broken.json": (3, "not valid JSON"),
        "verify-deep.json": (3, "nested"), "geodesic-on-xy": (2, "latitude"),
        "release-ledger-not-sqlite": (2, "not an SQLite"), "verify-forged.json": (4, "REFUSED"),
        "verify-eps_forged.json": (4, "REFUSED"), "release-budget-exhausted": (5, "nothing was"),
        "universe-u_latin1.csv": (3, "UTF-8"), "universe-u_dir": (3, "directory"),
        "universe-u_semicolon.csv": (3, "semicolon"), "param-missing": (2, "no default"),
        "out-no-folder": (2, "does not exist"),
    }
    cases = dict(CASES)
    for name, (code, fragment) in expect.items():
        assert main(cases[name]) == code, name
        err = capsys.readouterr().err
        assert fragment in err, (name, err)


def test_query_csv_with_names_and_no_header_keeps_every_query(corpus: Path) -> None:
    from dprivacy.cli import load_workload

    W = load_workload(str(corpus / "q.csv"))
    assert W.m == 2 and W.query_names() == ["q1", "q2"]
    np.testing.assert_array_equal(W.dense(), [[1, 0, 0, 1], [0, 1, 1, 0]])
    for text, m in [("1,0,0,1\n0,1,1,0\n", 2), ("a,b,c,d\n1,0,0,1\n", 1),
                    ("q,a,b,c,d\nq1,1,0,0,1\n", 1), ("only,1,2,3,4\n", 1), ("1,2,3,4\n", 1)]:
        p = corpus / "tmp_q.csv"
        p.write_text(text)
        try:
            assert load_workload(str(p)).m == m, text
        finally:
            p.unlink()


def test_last_resort_handler(corpus: Path, monkeypatch: pytest.MonkeyPatch,
                             capsys: pytest.CaptureFixture[str]) -> None:
    """An unexpected exception is one line with exit 1; DPRIVACY_DEBUG=1 adds the traceback."""
    from dprivacy.cli import cmd_verify

    def boom(args: object) -> int:
        raise RuntimeError("synthetic bug")

    monkeypatch.chdir(corpus)
    monkeypatch.setattr(cmd_verify, "cmd_verify", boom)
    argv = ["verify", "good.json", *INP]
    monkeypatch.delenv("DPRIVACY_DEBUG", raising=False)
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "internal error" in err and "DPRIVACY_DEBUG=1" in err
    monkeypatch.setenv("DPRIVACY_DEBUG", "1")
    assert main(argv) == 1
    assert "Traceback" in capsys.readouterr().err


def test_query_csv_header_is_never_guessed_from_numbers(tmp_path: Path) -> None:
    """Text element labels in a header order the columns; with numeric labels (ages, zip codes)
    a numeric first line equal to the labels could be a header or a query (F = age): refused,
    named or not; a mixed line is an error."""
    import dprivacy as dp
    from dprivacy.cli import load_workload
    from dprivacy.cli.exits import InputError

    pd = __import__("pandas")
    U_ = dp.Universe.from_dataframe(pd.DataFrame({"city": ["c", "a", "b"]}), ["city"])
    p = tmp_path / "q.csv"
    p.write_text("query,a,b,c\nq1,1,2,3\n")
    W = load_workload(str(p), U_)
    assert W.query_names() == ["q1"] and W.dense().tolist() == [[3, 1, 2]]
    U_ = dp.Universe.from_dataframe(pd.DataFrame({"age": ["10", "20", "30"]}), ["age"])
    for text, fragment in [("10,20,30\n1,2,3\n", "could be a header"),
                           ("sum_age,30,10,20\nq1,3,1,2\n", "could be a header"),
                           ("1,x,3\n1,2,3\n", "line 1, field 2")]:
        p.write_text(text)
        with pytest.raises(InputError, match=fragment):
            load_workload(str(p), U_)


_TOKENS = list(',;\t\n"\'0123456789.-+eE abxyz') + [
    "nan", "inf", "-inf", "1e400", "1e-320", "\x00", "é", "\r\n", "name", "x", "y", "a", "b",
    "c", "d", "n", ",,", "\n\n", "{", "[", "NULL", "  "]


@settings(max_examples=80, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tokens=st.lists(st.sampled_from(_TOKENS), max_size=40),
       encoding=st.sampled_from(["utf-8", "latin-1", "utf-16"]),
       target=st.sampled_from(["universe", "queries", "records", "counts", "config"]))
def test_random_file_contents(tokens: list[str], encoding: str, target: str, corpus: Path,
                              monkeypatch: pytest.MonkeyPatch,
                              capsys: pytest.CaptureFixture[str]) -> None:
    """Random text in any input file: success, or one clean line with a documented code and
    nothing written."""
    import tempfile

    monkeypatch.chdir(corpus)
    monkeypatch.setenv("TQDM_DISABLE", "1")
    data = "".join(tokens).encode(encoding, errors="replace")
    with tempfile.TemporaryDirectory(dir=corpus) as tmp:
        f = Path(tmp) / ("q.csv" if target != "config" else "c.json")
        f.write_bytes(data)
        out = Path(tmp) / "out.file"
        ledger = ["--ledger", str(Path(tmp) / "l.sqlite"), "--budget", "100"]
        argv = {
            "universe": ["design", "--out", str(out), "--universe", str(f), "--metric",
                         "euclidean", "--param", "eps_per_unit=1", "--queries", "q.csv"],
            "queries": ["design", "--out", str(out), *U, "--queries", str(f)],
            "records": ["release", "good.json", "--records", str(f), "--out", str(out), *ledger,
                        *INP],
            "counts": ["release", "good.json", "--records", str(f), "--count-column", "n",
                       "--out", str(out), *ledger, *INP],
            "config": ["verify", str(f), *INP],
        }[target]
        code = main(argv)
        err = capsys.readouterr().err
        assert code in (0, 2, 3, 4, 5), (code, err)
        assert "Traceback" not in err
        if code:
            assert err.count("\n") == 1, err
            assert not out.exists()
