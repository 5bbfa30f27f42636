"""The command line's inputs: universe CSVs, query matrices and records, read and checked.

Every loader raises a one-line :class:`~dprivacy.cli.exits.CLIError` naming the flag, the file and
(where it applies) the line, before any design, charge or release happens. Tables are read as
strings and converted column by column, so nothing is guessed: a query CSV's first column holds
names exactly when it is not numeric, and its first row is a header exactly when it is not
numeric; key values are compared as the text written in the files.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from dprivacy.cli.exits import InputError, UsageError
from dprivacy.cli.files import _line, read_csv, read_npy, to_numbers
from dprivacy.cli.params import MetricSpec
from dprivacy.errors import DPrivacyError
from dprivacy.universe import Universe
from dprivacy.workload import Workload

if TYPE_CHECKING:
    import pandas as pd

BUILTIN = ("builtin:us_cities", "builtin:us_cities:STATES (e.g. :CA,NV)", "builtin:us_cities:top=N",
           "builtin:example1", "builtin:line:N (points 0..N-1, records name them 0..N-1)",
           "builtin:grid:NXxNY (points (a, b), a < NX, b < NY, records name them a_b)")
#: the largest built-in line or grid (the strategy's Gram matrix of the workload is N x N)
MAX_BUILTIN_N = 65_536
#: the implicit workloads of ``--workload``
WORKLOADS = ("ranges", "prefixes", "rectangles", "marginals:K")
#: Coordinates and query coefficients are refused beyond this magnitude (products would overflow).
MAX_VALUE = 1e100
#: Non-zero query coefficients below this magnitude are refused (1 / |F| would overflow: a query
#: answered with no noise at all).
MIN_COEF = 1e-100
_LAT = ("latitude", "lat")
_LON = ("longitude", "lon", "lng", "long")


def split_columns(text: str | None) -> list[str] | None:
    """``"a, b"`` -> ``["a", "b"]``; None for None or an empty string."""
    cols = [c.strip() for c in text.split(",") if c.strip()] if text else []
    return cols or None


def _find(cols: list[str], names: tuple[str, ...]) -> str | None:
    low = {c.lower(): c for c in cols}
    return next((low[n] for n in names if n in low), None)


def _coordinate_columns(df: pd.DataFrame, coords: str | None, spec: MetricSpec,
                        where: str) -> list[str] | None:
    cols = list(df.columns)
    given = split_columns(coords)
    if given is not None:
        missing = [c for c in given if c not in cols]
        if missing:
            raise UsageError(f"--coords {coords!r}: {where} has no column(s) {missing}; its "
                             f"columns are {cols}")
        if len(set(given)) != len(given):
            raise UsageError(f"--coords {coords!r} names a column twice")
    if spec.coords == "latlon":
        pool = given or cols
        lat, lon = _find(pool, _LAT), _find(pool, _LON)
        if lat is None or lon is None or (given is not None and len(given) != 2):
            xy = given or [c for c in ("x", "y") if c in cols]
            shown = (f"its coordinate columns are {','.join(xy)}" if xy else
                     "it has no latitude,longitude columns")
            raise UsageError(f"--metric {spec.name} reads coordinates as latitude and longitude "
                             f"in degrees, but {where}: {shown}; name the columns "
                             "latitude,longitude (or lat,lon), or use --metric euclidean")
        return [lat, lon]  # (latitude, longitude), whatever order the file has them in
    if given is not None:
        return given
    for names in ((_LAT, _LON), (("x",), ("y",))):
        a, b = _find(cols, names[0]), _find(cols, names[1])
        if a is not None and b is not None:
            return [a, b]
    if spec.coords == "points":
        raise UsageError(f"--metric {spec.name} needs point coordinates but {where} has no x,y or "
                         f"latitude,longitude columns (columns: {cols}); pass --coords COL1,COL2")
    return None


def universe_from_table(df: pd.DataFrame, where: str, spec: MetricSpec, key: str | None,
                        coords: str | None) -> Universe:
    """A universe from a table of strings (one element per row), every column checked."""
    if len(df) == 0:
        raise InputError(f"{where} has a header but no elements: one row per element")
    xy = _coordinate_columns(df, coords, spec, where)
    cols = list(df.columns)
    keys = split_columns(key)
    if keys is None:
        keys = ["name"] if xy and "name" in cols else (xy or cols)
    missing = [c for c in keys if c not in cols]
    if missing:
        raise UsageError(f"--key {key!r}: {where} has no column(s) {missing}; its columns are "
                         f"{cols}")
    df = df.copy()
    for c in keys:
        col = df[c].astype(str)
        blank = (col == "") | col.str.lower().isin(("nan", "none", "null", "na", "n/a"))
        if blank.any():
            k = int(np.flatnonzero(blank.to_numpy())[0])
            raise InputError(f"{where}: key column {c!r} is missing on line {_line(df, k)} "
                             f"({df[c].iloc[k]!r}); every element needs a value in each key column")
    for c in xy or []:
        v = to_numbers(df[c], f"coordinate {c!r}", where)
        big = np.abs(v) > MAX_VALUE
        if big.any():
            raise InputError(f"{where}: coordinate {c!r} on line {_line(df, int(np.argmax(big)))} is "
                             f"beyond {MAX_VALUE:g}; rescale the coordinates")
        df[c] = v
    dup = df.duplicated(keys, keep="first").to_numpy()
    if dup.any():
        k = int(np.flatnonzero(dup)[0])
        first = df[keys].iloc[k].tolist()
        raise InputError(f"{where}: element {first} on line {_line(df, k)} repeats an earlier one; "
                         "elements must be distinct by their key columns (pass --key with columns "
                         "that identify each element)")
    return Universe.from_dataframe(df, keys, coords=xy)


def load_universe(path: str, spec: MetricSpec, key: str | None = None,
                  coords: str | None = None) -> tuple[Universe, pd.DataFrame]:
    """The universe named by ``--universe`` (a CSV or a builtin) and its full table."""
    from dprivacy.data import load_example1, load_us_cities

    if path == "builtin:us_cities" or path.startswith("builtin:us_cities:"):
        df = us_cities_subset(load_us_cities(), path).astype(str)
    elif path == "builtin:example1":
        df = load_example1().drop(columns="label").astype(str)
    elif path.startswith(("builtin:line:", "builtin:grid:")):
        df = _lattice(path)
        coords = coords or ("x" if path.startswith("builtin:line:") else "x,y")
    elif path.startswith("builtin:"):
        raise UsageError(f"--universe {path!r} is not a built-in universe; choose "
                         f"{', '.join(BUILTIN)}")
    else:
        df = read_csv(path, "--universe")
    where = f"--universe {path!r}"
    if key is None and path.startswith("builtin:us_cities"):
        key = "name,state"
    return universe_from_table(df, where, spec, key, coords), df


def _lattice(path: str) -> pd.DataFrame:
    """The points of ``builtin:line:N`` (0, 1, ..., N-1) or ``builtin:grid:NXxNY`` (element
    a * NY + b at (a, b)), as a table of strings; the key column ``name`` ("17", "3_5") is what
    records give."""
    import pandas as pd

    spec = path.split(":", 2)[2].strip().lower()
    try:
        dims = [int(t) for t in spec.split("x")]
    except ValueError:
        dims = []
    want = 1 if path.startswith("builtin:line:") else 2
    if len(dims) != want or min(dims) < 1 or int(np.prod(dims)) < 2 or \
            int(np.prod(dims)) > MAX_BUILTIN_N:
        raise UsageError(f"--universe {path!r}: give " + ("builtin:line:N" if want == 1 else
                         "builtin:grid:NXxNY") + f" with 2 to {MAX_BUILTIN_N} elements, e.g. "
                         + ("builtin:line:256" if want == 1 else "builtin:grid:64x64"))
    if want == 1:
        x = [str(a) for a in range(dims[0])]
        return pd.DataFrame({"name": x, "x": x})
    a, b = np.divmod(np.arange(dims[0] * dims[1]), dims[1])
    return pd.DataFrame({"name": [f"{i}_{j}" for i, j in zip(a.tolist(), b.tolist(), strict=True)],
                         "x": a.astype(str), "y": b.astype(str)})


def implicit_workload(text: str, U: Universe) -> Any:  # noqa: N803
    """The workload named by ``--workload`` over the universe ``U``: every range or prefix of a
    line, every rectangle of a grid (an :class:`~dprivacy.ImplicitWorkload`, never written out),
    or the K-way marginals of a product universe (a sparse :class:`Workload`)."""
    from dprivacy.implicit_workload import ImplicitWorkload

    where = f"--workload {text!r}"
    kind, _, k = text.strip().partition(":")
    try:
        if kind in ("ranges", "prefixes") and not k:
            W: Any = (ImplicitWorkload.all_ranges(U.N) if kind == "ranges"
                      else ImplicitWorkload.all_prefixes(U.N))
        elif kind == "rectangles" and not k:
            W = ImplicitWorkload.all_rectangles(*_grid_shape(U, where))
        elif kind == "marginals" and k.strip().isdigit():
            return Workload.marginals(U, k=int(k))
        else:
            raise UsageError(f"{where}: choose one of {', '.join(WORKLOADS)} (K a whole number, "
                             "e.g. marginals:2)")
        W.check_universe(U)
    except DPrivacyError as exc:
        raise UsageError(f"{where}: {exc}") from None
    return W


def _grid_shape(U: Universe, where: str) -> tuple[int, int]:  # noqa: N803
    if U.coords is not None and U.coords.shape[1] == 2:
        return (int(np.unique(U.coords[:, 0]).size), int(np.unique(U.coords[:, 1]).size))
    if U.coords is None and len(U.key_columns) == 2:
        return tuple(int(U.elements[c].nunique()) for c in U.key_columns)  # type: ignore[return-value]
    raise UsageError(f"{where}: rectangles need a universe of 2-D points on a full grid (e.g. "
                     "builtin:grid:64x64) or of two key attributes")


def us_cities_subset(cities: pd.DataFrame, path: str, where: str | None = None) -> pd.DataFrame:
    """The shipped US cities named by ``builtin:us_cities[:SELECTION]``: all of them, the
    cities of some states (``builtin:us_cities:CA,NV``), or the ``top=N`` most populous
    (``builtin:us_cities:top=100``), in the file's order.

    Examples
    --------
    >>> from dprivacy.data import load_us_cities
    >>> sorted(set(us_cities_subset(load_us_cities(), "builtin:us_cities:SD,WY")["state"]))
    ['SD', 'WY']
    >>> len(us_cities_subset(load_us_cities(), "builtin:us_cities:top=50"))
    50
    """
    sel = path[len("builtin:us_cities"):].lstrip(":").strip()
    where = where or f"--universe {path!r}"
    if not sel:
        return cities
    if sel.startswith("top="):
        try:
            n = int(sel[4:])
        except ValueError:
            n = -1
        if not 2 <= n <= len(cities):
            raise UsageError(f"{where}: top=N takes a whole number of cities from 2 to "
                             f"{len(cities)}, e.g. builtin:us_cities:top=100")
        keep = cities["population"].astype(float).rank(method="first", ascending=False) <= n
        return cities[keep]
    states = [t.strip().upper() for t in sel.split(",") if t.strip()]
    known = sorted(set(cities["state"]))
    unknown = [t for t in states if t not in known]
    if unknown or not states:
        raise UsageError(f"{where}: {', '.join(unknown) or 'no state'} is not a state of the "
                         f"shipped cities; use two-letter codes from {', '.join(known)} (e.g. "
                         "builtin:us_cities:CA,NV) or top=N")
    sub = cities[cities["state"].isin(states)]
    if len(sub) < 2:
        raise UsageError(f"{where} selects {len(sub)} city: a universe needs at least two "
                         "elements; add states")
    return sub


def _parse_query_table(raw: pd.DataFrame, where: str, labels: list[str] | None
                      ) -> tuple[np.ndarray, list[str] | None, list[str] | None]:
    """(F, query names or None, header labels or None) from a headerless table of strings.

    Column 0 holds query names when it is text on every line below the first (or, for a single
    line, when it is text followed by numbers). Line 1 is a header when its other cells are all
    text, or are exactly the universe's element labels (numeric labels such as zip codes too).
    """
    import pandas as pd

    num = raw.apply(pd.to_numeric, errors="coerce")
    text = raw.to_numpy(dtype=str)
    nonnum = num.isna().to_numpy() & (text != "")
    if raw.shape[1] < 2:
        has_names = False
    elif len(raw) > 1:  # names: every row below the first has a non-number in column 0
        has_names = bool(nonnum[1:, 0].all())
    else:  # a single row: a name followed by numbers
        has_names = bool(nonnum[0, 0]) and not bool(nonnum[0, 1:].any())
    c0 = 1 if has_names else 0
    first = [str(t) for t in text[0, c0:]]
    is_labels = labels is not None and len(first) > 1 and sorted(first) == sorted(labels)
    all_text = len(first) > 0 and bool(nonnum[0, c0:].all())
    if is_labels and not nonnum[0, c0:].any():
        raise InputError(f"{where}: line 1 is both a row of numbers and the list of element "
                         "labels, so it could be a header or a query; drop the header (columns "
                         "in universe order) or save the matrix as .npy")
    has_header = is_labels or all_text
    if has_header and len(raw) == 1:
        raise InputError(f"{where} has a header row but no queries: one query per row")
    r0 = 1 if has_header else 0
    body = num.iloc[r0:, c0:].to_numpy(dtype=float)
    if body.shape[1] == 0:
        raise InputError(f"{where} has no numeric columns: one query per row, one number per "
                         "element, comma-separated")
    bad = ~np.isfinite(body)
    if bad.any():
        r, c = np.argwhere(bad)[0]
        val = text[r + r0, c + c0]
        why = "is empty" if val == "" else f"= {val!r} is not a finite number"
        raise InputError(f"{where}: line {_line(raw, r + r0)}, field {c + c0 + 1} {why}; every entry "
                         "after the optional name column must be a number (a header row must "
                         "be all element names)")
    names = [str(t) for t in text[r0:, 0]] if has_names else None
    return body, names, (first if has_header else None)


def load_workload(path: str, U: Universe | None = None) -> Workload:  # noqa: N803
    """The query matrix of ``--queries`` (.npy, or .csv with optional header and name column)."""
    where = f"--queries {path!r}"
    low = str(path).lower()
    names = header = None
    if low.endswith(".npy"):
        F = read_npy(path, "--queries").astype(float)
        if F.ndim == 1:
            F = F[None, :]
        if F.ndim != 2:
            raise InputError(f"{where} has {F.ndim} dimensions: save an (m, N) matrix")
    elif low.endswith(".csv"):
        raw = read_csv(path, "--queries", header=False)
        F, names, header = _parse_query_table(raw, where, None if U is None else U.labels())
    else:
        raise UsageError(f"{where}: give a .npy or .csv file (one query per row)")
    if F.size == 0:
        raise InputError(f"{where} is an empty matrix {F.shape}: one query per row")
    if not np.all(np.isfinite(F)):
        k, i = np.argwhere(~np.isfinite(F))[0]
        raise InputError(f"{where}: entry ({k}, {i}) = {F[k, i]} is not finite")
    a = np.abs(F)
    if (a > MAX_VALUE).any() or ((a > 0) & (a < MIN_COEF)).any():
        k, i = np.argwhere((a > MAX_VALUE) | ((a > 0) & (a < MIN_COEF)))[0]
        raise InputError(f"{where}: entry ({k}, {i}) = {F[k, i]:g} is outside "
                         f"[{MIN_COEF:g}, {MAX_VALUE:g}] in magnitude; rescale the query")
    if names is not None and len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise InputError(f"{where}: query name {dup!r} is used twice; name each query once")
    if U is not None:
        if F.shape[1] != U.N:
            raise InputError(f"{where} has {F.shape[1]} columns of numbers but the universe has "
                             f"N = {U.N} elements: one column per element, in universe order")
        if header is not None:
            F = _reorder(F, header, U, where)
    return Workload(F, names=tuple(names) if names is not None else None)


def _reorder(F: np.ndarray, header: list[str], U: Universe, where: str) -> np.ndarray:  # noqa: N803
    """Columns named by the header's element labels are put in universe order."""
    labels = U.labels()
    pos = {lab: k for k, lab in enumerate(labels)}
    known = [h in pos for h in header]
    if not any(known):
        return F  # a header of other names (q, c0, c1, ...): columns are in universe order
    if not all(known) or len(set(header)) != len(header):
        bad = next((h for h in header if h not in pos), None) or \
            next(h for h in header if header.count(h) > 1)
        raise InputError(f"{where}: header column {bad!r} is not an element of the universe (or "
                         "is repeated); name each element once, or drop the header")
    out = np.empty_like(F)
    out[:, [pos[h] for h in header]] = F
    return out


def histogram(U: Universe, records: pd.DataFrame, where: str,  # noqa: N803
              count_column: str | None = None) -> np.ndarray:
    """Counts per element of the records' key columns (compared as text)."""
    import pandas as pd

    keys = list(U.key_columns)
    missing = [c for c in keys + ([count_column] if count_column else []) if c not in records]
    if missing:
        raise InputError(f"{where} has no column(s) {missing} (it has {list(records.columns)}); "
                         "records need the universe's key columns" +
                         (" and the --count-column" if count_column else ""))
    def text(df: pd.DataFrame) -> pd.Index:
        t = df[keys].astype(str)
        return pd.Index(t.iloc[:, 0]) if len(keys) == 1 else pd.MultiIndex.from_frame(t)

    idx = np.asarray(text(U.elements).get_indexer(text(records)), dtype=np.int64)
    if (idx < 0).any():
        k = int(np.flatnonzero(idx < 0)[0])
        vals = records[keys].iloc[k].tolist()
        raise InputError(f"{where}: line {_line(records, k)} ({', '.join(map(str, vals))}) is not an element "
                         f"of the universe; {int((idx < 0).sum())} of {len(idx)} records are "
                         "unknown. Fix or remove them")
    if count_column is None:
        return np.bincount(idx, minlength=U.N).astype(float)
    c = to_numbers(records[count_column], f"count {count_column!r}", where)
    bad = (c < 0) | (c != np.round(c)) | (c > 2**53)
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        raise InputError(f"{where}: count {count_column!r} on line {_line(records, k)} = "
                         f"{records[count_column].iloc[k]!r} is not a whole number >= 0")
    return np.bincount(idx, weights=c, minlength=U.N)
