"""Size caps on a query's JSON: each cap refuses before anything is built, within bounds passes."""

from __future__ import annotations

import pytest

from dprivacy.errors import ValidationError
from dprivacy.local import Query, randomiser_from_json
from dprivacy.local.limits import Limits, check_query_json, check_randomiser_json

SMALL = Limits(max_side=4, max_cells=12, max_length=5, max_pair_work=40, max_id=8, max_fields=2)
ROW = [0.5, 0.5]


@pytest.mark.parametrize(("d", "why"), [
    ({"kind": "product", "matrices": [ROW, ROW], "length": 6}, "length"),
    ({"kind": "product", "matrices": [ROW, ROW], "length": 2.0}, "whole number"),
    ({"kind": "product", "matrices": [ROW, ROW], "length": True}, "whole number"),
    ({"kind": "product", "matrices": [[ROW, ROW]] * 6}, "coordinate matrices"),
    ({"kind": "product", "matrices": [ROW, ROW], "length": 4}, "entries"),  # 16 cells > 12
    ({"kind": "matrix", "matrix": [[0.2] * 5]}, "entries"),  # a row of 5 > 4 outputs
    ({"kind": "matrix", "matrix": [[1.0]] * 5}, "rows"),
    ({"kind": "matrix", "matrix": [[1.0]], "outputs": list(range(5))}, "labels"),
    ({"kind": "product", "matrices": [[0.25] * 4] * 3, "length": 1}, "pairs"),  # 3*12 = 36 ok
])
def test_each_cap_refuses(d: dict, why: str) -> None:
    if why == "pairs":  # 36 <= 40 passes; a second coordinate (72) does not
        check_randomiser_json(d, SMALL)
        with pytest.raises(ValidationError, match="pairs"):
            check_randomiser_json({**d, "length": 2, "matrices": [[0.5, 0.5]] * 3}, Limits(
                max_side=4, max_cells=100, max_length=5, max_pair_work=10))
        return
    with pytest.raises(ValidationError, match=why if why != "entries" else "entr|outputs"):
        check_randomiser_json(d, SMALL)


def test_query_caps_and_defaults() -> None:
    with pytest.raises(ValidationError, match="id"):
        check_query_json({"id": "x" * 9}, SMALL)
    with pytest.raises(ValidationError, match="fields"):
        check_query_json({"id": "q", "fields": ["a", "b", "c"]}, SMALL)
    hostile = {"id": "h", "T": {"kind": "product", "matrices": [ROW, ROW], "length": 10**9},
               "pre": {"builtin": "field"}, "fields": ["a"]}
    with pytest.raises(ValidationError, match="length"):
        Query.from_dict(hostile)  # the default caps, before the billion coordinates are built
    ok = randomiser_from_json({"kind": "product", "matrices": [ROW, ROW], "length": 1000,
                               "domain": "one_hot"})
    assert ok.length == 1000
