"""Universe construction, histograms, workloads and their sensitivities; bad input raises clearly."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from dprivacy import Universe, Workload
from dprivacy.errors import DPrivacyError, ShapeError, UnknownRecordError, ValidationError


def test_from_points_names_and_histogram():
    U = Universe.from_points([[0, 0], [1, 1], [2, 2]], names=["a", "b", "c"])
    assert U.N == 3 and U.key_columns == ("name",)
    x = U.histogram(pd.DataFrame({"name": ["a", "c", "c", "b", "c"]}))
    np.testing.assert_array_equal(x, [1, 1, 3])


def test_from_points_matches_by_coordinates():
    U = Universe.from_points([[0, 0], [1, 1]])
    x = U.histogram(pd.DataFrame({"x": [1.0, 1.0, 0.0], "y": [1.0, 1.0, 0.0]}))
    np.testing.assert_array_equal(x, [1, 2])


def test_from_domains_order_is_example1():
    U = Universe.from_domains({"G": ["M", "F"], "N": ["Y", "N"], "A": ["A", "B"]})
    assert U.labels() == ["M|Y|A", "M|Y|B", "M|N|A", "M|N|B", "F|Y|A", "F|Y|B", "F|N|A", "F|N|B"]
    assert U.is_full_product()


def test_from_dataframe_distinct_tuples_in_order():
    df = pd.DataFrame({"a": [1, 0, 1, 1], "b": ["x", "y", "x", "z"], "c": [9, 9, 9, 9]})
    U = Universe.from_dataframe(df, ["a", "b"])
    assert U.N == 3 and U.labels() == ["1|x", "0|y", "1|z"]
    np.testing.assert_array_equal(U.histogram(df), [2, 1, 1])


def test_unknown_records_raise_with_count_and_examples_or_drop():
    U = Universe.from_domains({"a": [0, 1]})
    recs = pd.DataFrame({"a": [0, 1, 5, 7, 1]})
    with pytest.raises(UnknownRecordError, match=r"(?s)2 of 5 records.*on_unknown='drop'") as e:
        U.histogram(recs)
    assert "5" in str(e.value) and "7" in str(e.value)
    np.testing.assert_array_equal(U.histogram(recs, on_unknown="drop"), [1, 2])
    np.testing.assert_array_equal(U.element_index(recs, on_unknown="drop"), [0, 1, -1, -1, 1])


def test_missing_key_columns_and_bad_coords():
    U = Universe.from_domains({"a": [0, 1]})
    with pytest.raises(ValidationError, match="key columns"):
        U.histogram(pd.DataFrame({"b": [0]}))
    with pytest.raises(ValidationError, match="finite"):
        Universe.from_points([[0.0, np.nan], [1, 1]])
    with pytest.raises(ValidationError, match="finite"):
        Universe.from_points([[0.0, np.inf], [1, 1]])
    with pytest.raises(ShapeError):
        Universe.from_points([[0, 0], [1, 1]], names=["a"])
    with pytest.raises(ValidationError, match="distinct"):
        Universe.from_points([[0, 0], [1, 1]], names=["a", "a"])


def test_workload_validation():
    with pytest.raises(ValidationError, match=r"F\[0, 1\] = nan"):
        Workload([[0.0, np.nan]])
    with pytest.raises(ValidationError, match=r"F\[1, 0\] = inf"):
        Workload([[0.0, 1.0], [np.inf, 0.0]])
    with pytest.raises(ValidationError, match="finite"):
        Workload(sp.csr_array(np.array([[0.0, np.inf]])))
    with pytest.raises(ShapeError):
        Workload(np.zeros((2, 2, 2)))
    U = Universe.from_points(np.arange(3.0))
    with pytest.raises(ShapeError, match="N = 2 columns.*N = 3"):
        Workload([[1.0, 2.0]]).check_universe(U)
    with pytest.raises(DPrivacyError):
        Workload([["a", "b"]])


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 5), st.integers(1, 12), st.integers(0, 2**31 - 1))
def test_sensitivity_matches_brute_force(m, n, seed):
    F = np.random.default_rng(seed).normal(size=(m, n))
    W = Workload(F)
    brute = max(np.abs(F[:, i] - F[:, j]).sum() for i in range(n) for j in range(n))
    assert W.sensitivity() == pytest.approx(brute, rel=1e-12, abs=1e-12)
    np.testing.assert_allclose(W.ranges(), F.max(1) - F.min(1))
    Ws = Workload(sp.csr_array(np.where(np.abs(F) > 0.5, F, 0.0)))
    Fd = Ws.dense()
    np.testing.assert_allclose(Ws.ranges(), Fd.max(1) - Fd.min(1))
    assert Ws.pair_sensitivity(0, n - 1) == pytest.approx(np.abs(Fd[:, 0] - Fd[:, -1]).sum())


def test_builders():
    W = Workload.random_uniform(4, 7, rng=0)
    assert W.shape == (4, 7) and np.all((W.F >= 0) & (W.F < 1))
    np.testing.assert_array_equal(W.F, Workload.random_uniform(4, 7, rng=0).F)
    B = Workload.random_binary(3, 9, rng=1)
    assert set(np.unique(B.F)) <= {0.0, 1.0}
    R = Workload.range_queries(5, [(0, 2), (3, 3)])
    np.testing.assert_array_equal(R.F, [[1, 1, 1, 0, 0], [0, 0, 0, 1, 0]])
    with pytest.raises(ValidationError):
        Workload.range_queries(5, [(3, 1)])
    assert Workload.range_queries(10, count=6, rng=2).m == 6
    U = Universe.from_domains({"a": [0, 1], "b": [0, 1, 2]})
    M1 = Workload.marginals(U, 1)
    assert M1.m == 5 and np.all(M1.F.sum(axis=1) == [3, 3, 2, 2, 2])
    M2 = Workload.marginals(U, 2)
    np.testing.assert_array_equal(M2.F, np.eye(6))  # 2-way marginals of 2 attributes = identity
    P = Workload.from_predicates(U, {"q": "a == 1", "s": "b * 2"})
    np.testing.assert_array_equal(P.F, [[0, 0, 0, 1, 1, 1], [0, 2, 4, 0, 2, 4]])
    assert P.names == ("q", "s")
    with pytest.raises(ValidationError, match="could not be evaluated"):
        Workload.from_predicates(U, ["no_such_column > 1"])


def test_fingerprints():
    U = Universe.from_points(np.arange(3.0))
    assert U.fingerprint() == Universe.from_points(np.arange(3.0)).fingerprint()
    assert U.fingerprint() != Universe.from_points(np.arange(3.0) + 1).fingerprint()
    assert Workload([[1.0, 2, 3]]).fingerprint() != Workload([[1.0, 2, 4]]).fingerprint()


def test_fingerprints_are_canonical_not_csv(monkeypatch):
    """Fingerprints never go through pandas' CSV writer; equal values give equal fingerprints
    whatever the dtype or storage, and distinct values (text "1" vs number 1) differ."""
    U = Universe.from_domains({"a": [1, 2], "b": ["x", "y"]})
    before = U.fingerprint()

    def no_csv(*args, **kwargs):
        raise AssertionError("fingerprints must not use the CSV writer")

    monkeypatch.setattr(pd.DataFrame, "to_csv", no_csv)
    monkeypatch.setattr(pd.Series, "to_csv", no_csv)
    again = Universe.from_domains({"a": [1, 2], "b": ["x", "y"]})
    assert again.fingerprint() == before
    as_float = Universe(pd.DataFrame({"a": [1.0, 1.0, 2.0, 2.0], "b": ["x", "y", "x", "y"]}),
                        ("a", "b"))
    assert as_float.fingerprint() == before
    as_text = Universe.from_domains({"a": ["1", "2"], "b": ["x", "y"]})
    assert as_text.fingerprint() != before
    # separators inside values cannot collide (length-framed strings)
    u1 = Universe(pd.DataFrame({"k": ["a,b", "c"]}), ("k",))
    u2 = Universe(pd.DataFrame({"k": ["a", "b,c"]}), ("k",))
    assert u1.fingerprint() != u2.fingerprint()
    F = np.array([[0.0, 1.0, 0.0], [2.0, 0.0, -0.0]])
    assert Workload(F).fingerprint() == Workload(sp.csr_array(F)).fingerprint()
    assert Workload(F).fingerprint() == Workload(sp.coo_matrix(F)).fingerprint()
    assert Workload(F).fingerprint() != Workload(F.T.copy().T * 1.5).fingerprint()


@pytest.mark.parametrize("missing", [np.nan, None, pd.NA, pd.NaT])
def test_missing_key_values_are_refused(missing):
    df = pd.DataFrame({"g": ["a", "b", missing], "h": [1, 2, 3]}, dtype=object)
    with pytest.raises(ValidationError, match="key column 'g' has 1 missing value.*element 2"):
        Universe(df, ("g", "h"))
    with pytest.raises(ValidationError, match="missing value"):
        Universe.from_dataframe(df, ["g", "h"])
    with pytest.raises(ValidationError, match="missing value"):
        Universe.from_domains({"g": ["a", missing], "h": [1, 2]})
    with pytest.raises(ValidationError, match="missing value"):
        Universe(pd.DataFrame({"x": [0.0, np.nan]}), ("x",))
    # a missing value outside the key columns is data, not identity: allowed
    assert Universe(pd.DataFrame({"g": ["a", "b"], "note": [1.0, np.nan]}), ("g",)).N == 2


def test_nan_keys_cannot_fake_a_full_product():
    """Before: nunique() skipped NaN, so {a, NaN} x {0, 1} minus one element looked full."""
    df = pd.DataFrame({"g": ["a", "a", np.nan], "h": [0, 1, 0]})
    with pytest.raises(ValidationError, match="missing"):
        Universe(df, ("g", "h"))


def test_inputs_are_copied_and_read_only():
    df = pd.DataFrame({"g": ["a", "b", "c"], "v": [1.0, 2.0, 3.0]})
    coords = np.array([[0.0, 0.0], [1.0, 0.0], [3.0, 0.0]])
    U = Universe(df, ("g",), coords=coords)
    fp = U.fingerprint()
    df.loc[0, "g"] = "z"
    df.loc[1, "v"] = 99.0
    coords[0, 0] = 42.0
    assert U.elements["g"].tolist() == ["a", "b", "c"] and U.elements["v"].tolist() == [1, 2, 3]
    assert U.coords[0, 0] == 0.0 and not U.coords.flags.writeable
    assert Universe(pd.DataFrame({"g": ["a", "b", "c"]}), ("g",),
                    coords=[[0.0, 0.0], [1.0, 0.0], [3.0, 0.0]]).fingerprint() == fp
    with pytest.raises(ValueError):
        U.elements.loc[1, "v"] = 5.0  # our copy is read-only
    dense = np.array([[1.0, 0.0, 2.0]])
    W = Workload(dense)
    dense[0, 0] = 7.0
    assert W.F[0, 0] == 1.0 and not W.F.flags.writeable
    S = sp.csr_array(np.array([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]]))
    Ws = Workload(S)
    fps = Ws.fingerprint()
    S.data[:] = 100.0
    S.indices[:] = 0
    S.indptr[1] = 0
    np.testing.assert_array_equal(Ws.dense(), [[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]])
    assert Ws.fingerprint() == fps == Workload(Ws.dense()).fingerprint()
    for arr in (Ws.F.data, Ws.F.indices, Ws.F.indptr):
        assert not arr.flags.writeable
        with pytest.raises(ValueError):
            arr[0] = 1
    assert U.domains is None
    Ud = Universe.from_domains({"g": ["a", "b"]})
    with pytest.raises(TypeError):
        Ud.domains["g"] = ("c",)  # type: ignore[index]


@pytest.mark.parametrize("store", [np.array, sp.csr_array])
def test_overflowing_and_subnormal_coefficients_are_diagnosed(store):
    """Before: both surfaced later as "eps[0, 1] = 0" / "infinite privacy loss"."""
    with pytest.raises(ValidationError, match=r"F\[0, 1\] = -1e\+308: too large.*overflow"):
        Workload(store(np.array([[0.0, -1e308, 1e308]])))
    with pytest.raises(ValidationError, match=r"F\[1, 2\] = 1e-320 is subnormal"):
        Workload(store(np.array([[0.0, 1.0, 0.0], [0.0, 0.0, 1e-320]])))
    ok = Workload(store(np.array([[0.0, 1e300, 2.2250738585072014e-308]])))  # extreme but normal
    assert ok.m == 1


def test_release_refuses_fractional_counts() -> None:
    """A histogram counts whole records: 0.5 of a record is refused before any noise is drawn."""
    import dprivacy as dp
    from dprivacy.errors import ValidationError

    U = dp.Universe.from_points(np.array([[0.0], [1.0], [2.0]]))
    M = dp.metrics.Euclidean(1.0)
    W = dp.Workload([[0.0, 1.0, 2.0]])
    mech = dp.DXLaplace(W, dp.design(W, U, M))
    with pytest.raises(ValidationError, match=r"non-integer count x\[1\] = 0.5.*whole numbers"):
        mech.release([3, 0.5, 1], secure=False, rng=0)
    assert mech.release([3.0, 2.0, 1.0], secure=False, rng=0).shape == (1,)  # whole floats: fine
