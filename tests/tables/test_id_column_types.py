"""An id column must hold integers on every backend (review finding): the DuckDB backend cast a
float or string id column with TRY_CAST, so ids 0.4 and 1.6 became persons 0 and 2 — a record
of one table charged as another person of a table sharing the ledger — while the pandas backend
refused the same frame."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dprivacy.errors import ValidationError
from dprivacy.tables import ProPerTable
from dprivacy.tables.budgets.budget_table import BudgetTable

BACKENDS = [{}, {"backend": "duckdb"}]


@pytest.mark.parametrize("kw", BACKENDS, ids=["pandas", "duckdb"])
@pytest.mark.parametrize("ids", [[0.4, 1.6, 3.0], ["7", " 8", "9"]], ids=["float", "str"])
def test_non_integer_ids_are_refused_on_every_backend(kw, ids):
    df = pd.DataFrame({"pid": ids, "x": [1.0, 2.0, 3.0]})
    ledger = BudgetTable() if kw else None
    with pytest.raises(ValidationError, match="non-negative integers"):
        ProPerTable(df, 1.0, id_column="pid", **({"ledger": ledger} if ledger else {}), **kw)
    if ledger is not None:
        assert ledger.store.size == 0  # nobody registered under a rounded id


@pytest.mark.parametrize("kw", BACKENDS, ids=["pandas", "duckdb"])
def test_integer_ids_of_any_width_are_kept(kw):
    df = pd.DataFrame({"pid": np.array([5, 1, 9], dtype=np.int32), "x": [1.0, 2.0, 3.0]})
    ledger = BudgetTable() if kw else None
    t = ProPerTable(df, 1.0, id_column="pid", **({"ledger": ledger} if ledger else {}), **kw)
    assert t.noisy_count(0.5) is not None
    if ledger is not None:
        assert sorted(ledger.store.ids.tolist()) == [1, 5, 9]
        assert ledger.remaining([1, 5, 9]).tolist() == [0.5, 0.5, 0.5]
