"""The data universe X = {chi_1, ..., chi_N} (paper §2.1) and histograms of records over it.

A :class:`Universe` is an ordered table of N distinct elements.  Each element is a complete tuple of
attribute values ("every element is a complete tuple") and/or a point with coordinates.
Records (rows of a pandas DataFrame) are mapped to elements through the universe's *key columns*,
and a database of n records becomes the histogram x in N^N with ||x||_1 = n.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Literal

import numpy as np

from dprivacy.errors import ShapeError, UnknownRecordError, ValidationError
from dprivacy.fingerprints import Hasher, canonical_json, values_bytes

if TYPE_CHECKING:
    import pandas as pd

OnUnknown = Literal["raise", "drop"]


def _coordinate_names(d: int) -> tuple[str, ...]:
    return ("x", "y") if d == 2 else tuple(f"x{k}" for k in range(d))


@dataclass(frozen=True, eq=False)
class Universe:
    """An ordered data universe of N elements.

    Build it with :meth:`from_points`, :meth:`from_dataframe` or :meth:`from_domains`; the
    constructor only validates.

    Attributes
    ----------
    elements : pandas.DataFrame
        One row per element, in universe order (index 0..N-1).
    key_columns : tuple of str
        The columns of ``elements`` (and of record tables) that identify an element.
    coords : numpy.ndarray or None
        (N, d) coordinates of the elements when the universe is a point set, else None.
    domains : dict or None
        For a cartesian-product universe, the value list of each attribute.
    """

    elements: pd.DataFrame
    key_columns: tuple[str, ...]
    coords: np.ndarray | None = None
    domains: Mapping[str, tuple] | None = field(default=None)

    def __post_init__(self) -> None:
        import pandas as pd

        if not isinstance(self.elements, pd.DataFrame):
            raise ValidationError("Universe.elements must be a pandas DataFrame")
        if len(self.elements) == 0:
            raise ValidationError("a universe needs at least one element")
        if isinstance(self.key_columns, str):
            raise ValidationError(f"key_columns = {self.key_columns!r}: give a sequence of column "
                                  f"names, e.g. ({self.key_columns!r},)")
        keys = tuple(self.key_columns)
        if not keys:
            raise ValidationError("a universe needs at least one key column")
        object.__setattr__(self, "key_columns", keys)
        missing = [c for c in keys if c not in self.elements.columns]
        if missing:
            raise ValidationError(f"key columns {missing} are not columns of the elements table")
        # frozen at the boundary: our own deep copy, read-only where pandas allows it
        el = self.elements.copy(deep=True)
        for c in keys:
            na = el[c].isna().to_numpy()
            if na.any():
                i = int(np.flatnonzero(na)[0])
                raise ValidationError(
                    f"key column {c!r} has {int(na.sum())} missing value(s) (NaN/None), the first "
                    f"at element {i}: every element is a complete tuple of key values; fill them "
                    "with a real value (e.g. 'unknown') or drop those elements"
                )
        if el[list(keys)].duplicated().any():
            dup = el[el[list(keys)].duplicated()].head(3)
            raise ValidationError(
                f"universe elements must be distinct; duplicated keys, e.g.\n{dup.to_string()}"
            )
        _read_only(el)
        object.__setattr__(self, "elements", el)
        if self.domains is not None:
            object.__setattr__(self, "domains", MappingProxyType(
                {str(a): tuple(v) for a, v in self.domains.items()}))
        if self.coords is not None:
            xy = np.asarray(self.coords)
            if xy.ndim != 2 or xy.shape[0] != len(self.elements):
                raise ShapeError(
                    f"coords has shape {xy.shape}; expected ({len(self.elements)}, d)"
                )
            try:
                xy = np.array(xy, dtype=float, copy=True)
            except (TypeError, ValueError) as exc:
                raise ValidationError(f"coords must be numbers: {exc}") from exc
            if not np.all(np.isfinite(xy)):
                bad = np.argwhere(~np.isfinite(xy))[0]
                raise ValidationError(
                    f"coords[{bad[0]}, {bad[1]}] = {xy[bad[0], bad[1]]}: coordinates must be finite"
                )
            xy.setflags(write=False)
            object.__setattr__(self, "coords", xy)

    # ------------------------------------------------------------------ builders
    @classmethod
    def from_points(
        cls, coords: np.ndarray, names: Sequence[str] | None = None,
        columns: Sequence[str] | None = None,
    ) -> Universe:
        """A universe of N points with coordinates ``coords`` of shape (N, d).

        Records are matched by ``name`` when names are given, else by the coordinate columns
        (``x``, ``y`` in 2-D; ``x0``, ``x1``, ... otherwise, or ``columns``).

        Examples
        --------
        >>> U = Universe.from_points([[0, 0], [3, 4]], names=["a", "b"])
        >>> U.N
        2
        """
        import pandas as pd

        c = np.asarray(coords, dtype=float)
        if c.ndim == 1:
            c = c[:, None]
        if c.ndim != 2:
            raise ShapeError(f"coords must be an (N, d) array, got shape {c.shape}")
        if not np.all(np.isfinite(c)):
            bad = np.argwhere(~np.isfinite(c))[0]
            raise ValidationError(
                f"coords[{bad[0]}, {bad[1]}] = {c[bad[0], bad[1]]}: coordinates must be finite"
            )
        cols = tuple(columns) if columns is not None else _coordinate_names(c.shape[1])
        if len(cols) != c.shape[1]:
            raise ShapeError(f"{len(cols)} column names for {c.shape[1]}-D coordinates")
        df = pd.DataFrame(c, columns=list(cols))
        if names is not None:
            names = list(names)
            if len(names) != len(df):
                raise ShapeError(f"{len(names)} names for {len(df)} points")
            df.insert(0, "name", names)
            keys: tuple[str, ...] = ("name",)
        else:
            keys = cols
        return cls(df, keys, coords=c)

    @classmethod
    def from_dataframe(
        cls, df: pd.DataFrame, columns: Sequence[str], coords: Sequence[str] | None = None
    ) -> Universe:
        """The distinct tuples of ``df[columns]`` (in order of first appearance) as elements.

        ``coords`` optionally names numeric columns of the distinct elements used as coordinates
        (they must be functions of ``columns``).
        """
        columns = list(columns)
        missing = [c for c in columns if c not in df.columns]
        if missing:
            raise ValidationError(f"columns {missing} are not in the DataFrame ({list(df.columns)})")
        keep = columns + [c for c in (coords or []) if c not in columns]
        el = df[keep].drop_duplicates(subset=columns).reset_index(drop=True)
        xy = el[list(coords)].to_numpy(dtype=float) if coords else None
        return cls(el, tuple(columns), coords=xy)

    @classmethod
    def from_domains(cls, domains: Mapping[str, Sequence]) -> Universe:
        """The cartesian product of attribute domains, e.g. ``{"G": ["M", "F"], "A": [0, 1]}``.

        Elements are ordered lexicographically in the order the domains are given (the first
        attribute varies slowest), as in the paper's Example 1 (MYA, MYB, MNA, ...).
        """
        import pandas as pd

        if not domains:
            raise ValidationError("from_domains needs at least one attribute")
        doms = {}
        for a, vals in domains.items():
            vals = tuple(vals)
            if len(vals) == 0:
                raise ValidationError(f"attribute {a!r} has an empty domain")
            if len(set(vals)) != len(vals):
                raise ValidationError(f"attribute {a!r} has repeated values in its domain")
            doms[a] = vals
        rows = list(itertools.product(*doms.values()))
        df = pd.DataFrame(rows, columns=list(doms))
        return cls(df, tuple(doms), domains=doms)

    # ---------------------------------------------------------------- properties
    @property
    def N(self) -> int:  # noqa: N802 (the paper's symbol)
        """Number of elements."""
        return len(self.elements)

    def __len__(self) -> int:
        return self.N

    @property
    def attributes(self) -> tuple[str, ...]:
        """The key columns (attributes that identify an element)."""
        return self.key_columns

    def labels(self) -> list[str]:
        """A short readable label per element (its key values joined)."""
        keys = self.elements[list(self.key_columns)].astype(str)
        return keys.agg("|".join, axis=1).tolist() if len(self.key_columns) > 1 else \
            keys.iloc[:, 0].tolist()

    def is_full_product(self) -> bool:
        """True when the elements are exactly the cartesian product of their attribute values."""
        sizes = [self.elements[c].nunique() for c in self.key_columns]
        return int(np.prod(sizes, dtype=float)) == self.N

    def fingerprint(self) -> str:
        """sha256 of the elements in order: key column names, their values and the coordinates.

        Canonical and versioned (:mod:`dprivacy.fingerprints`): it does not depend on how pandas
        prints values, and equal values give equal fingerprints whatever their dtype (1 == 1.0).
        Computed once (a universe is immutable).
        """
        cached = self.__dict__.get("_fingerprint")
        if cached is None:
            h = Hasher("universe").add(canonical_json(list(self.key_columns))).add(str(self.N))
            for c in self.key_columns:
                h.add(values_bytes(self.elements[c]))
            if self.coords is not None:
                h.add(canonical_json(list(self.coords.shape)))
                h.add(np.ascontiguousarray(self.coords, dtype="<f8").tobytes())
            cached = h.hexdigest()
            self.__dict__["_fingerprint"] = cached
        return cached

    def identity_parts(self) -> dict:
        """What a config records of this universe besides its fingerprint, so that a config
        refused for another universe can say what differs (:func:`universe_difference`): the key
        columns, the first labels, and sha256 digests of the labels and the coordinates, each
        in universe order and as a set (order-free)."""
        labels = self.labels()
        h_lab = Hasher("labels").add(canonical_json(labels)).hexdigest()
        h_set = Hasher("label-set").add(canonical_json(sorted(labels))).hexdigest()
        out: dict = {"key_columns": list(self.key_columns), "first_labels": labels[:3],
                     "labels_sha256": h_lab, "label_set_sha256": h_set,
                     "coords_sha256": None, "coord_set_sha256": None}
        if self.coords is not None:
            c = np.ascontiguousarray(self.coords, dtype="<f8")
            rows = c[np.lexsort(c.T[::-1])] if c.shape[1] else c
            out["coords_sha256"] = Hasher("coords").add(canonical_json(list(c.shape))).add(
                c.tobytes()).hexdigest()
            out["coord_set_sha256"] = Hasher("coord-set").add(canonical_json(list(c.shape))).add(
                np.ascontiguousarray(rows).tobytes()).hexdigest()
        return out

    def column_fingerprint(self, columns: Sequence[str]) -> str:
        """Canonical sha256 of the values of ``columns`` (e.g. a budget column a metric reads)."""
        h = Hasher("columns")
        for c in columns:
            if c not in self.elements.columns:
                raise ValidationError(f"column {c!r} is not a column of the universe's elements")
            h.add(c).add(values_bytes(self.elements[c]))
        return h.hexdigest()

    def legacy_fingerprint_v1(self) -> str:
        """The fingerprint of config version 1 (pandas' CSV writer); only to read old configs."""
        h = hashlib.sha256()
        h.update(repr(self.key_columns).encode())
        h.update(self.elements[list(self.key_columns)].to_csv(index=False).encode())
        if self.coords is not None:
            h.update(np.ascontiguousarray(self.coords, dtype="<f8").tobytes())
        return h.hexdigest()

    # ---------------------------------------------------------------- histograms
    def _index(self) -> pd.Index:
        import pandas as pd

        keys = self.elements[list(self.key_columns)]
        if len(self.key_columns) == 1:
            return pd.Index(keys.iloc[:, 0])
        return pd.MultiIndex.from_frame(keys)

    def element_index(self, records: pd.DataFrame, on_unknown: OnUnknown = "raise") -> np.ndarray:
        """The element index of every record (row of ``records``), -1 for unknown ones.

        Raises :class:`UnknownRecordError` naming how many records are unknown and showing the
        first few, unless ``on_unknown="drop"``.
        """
        import pandas as pd

        if on_unknown not in ("raise", "drop"):
            raise ValidationError(f"on_unknown must be 'raise' or 'drop', got {on_unknown!r}")
        if not isinstance(records, pd.DataFrame):
            raise ValidationError("records must be a pandas DataFrame")
        missing = [c for c in self.key_columns if c not in records.columns]
        if missing:
            raise ValidationError(
                f"records lack the universe's key columns {missing}; they have {list(records.columns)}"
            )
        rec = records[list(self.key_columns)]
        if len(self.key_columns) == 1:
            target = pd.Index(rec.iloc[:, 0])
        else:
            target = pd.MultiIndex.from_frame(rec)
        idx = np.asarray(self._index().get_indexer(target), dtype=np.int64)
        unknown = idx < 0
        if unknown.any() and on_unknown == "raise":
            first = rec[unknown].head(5).to_string(index=False)
            raise UnknownRecordError(
                f"{int(unknown.sum())} of {len(rec)} records are not elements of the universe; "
                f"first ones:\n{first}\nFix the data or pass on_unknown='drop' to count and drop them."
            )
        return idx

    def histogram(self, records: pd.DataFrame, on_unknown: OnUnknown = "raise") -> np.ndarray:
        """Counts of records per element: the histogram x with ||x||_1 = n (paper §2.1).

        With ``on_unknown="drop"`` unknown records are dropped; their number is available as
        ``len(records) - x.sum()``.
        """
        idx = self.element_index(records, on_unknown)
        return np.bincount(idx[idx >= 0], minlength=self.N).astype(np.int64)

    def check_histogram(self, x: np.ndarray) -> np.ndarray:
        """Validate a histogram for this universe: shape (N,), finite, non-negative."""
        return check_histogram(x, self.N)


def universe_difference(want: Mapping, have: Mapping) -> str:
    """What differs between two universes described by ``{"N": ..., **identity_parts()}``:
    size, key columns, order, labels and coordinates, as one readable sentence."""
    out = []
    if want.get("N") != have.get("N"):
        out.append(f"size: {want.get('N')} elements in the config, {have.get('N')} given")
    if want.get("key_columns") != have.get("key_columns"):
        out.append(f"key columns: {want.get('key_columns')} in the config, "
                   f"{have.get('key_columns')} given")
    same_set = want.get("label_set_sha256") == have.get("label_set_sha256")
    if want.get("labels_sha256") != have.get("labels_sha256"):
        if same_set:
            out.append("order: the same element labels in another order")
        else:
            out.append(f"labels: the config's begin {want.get('first_labels')}, the given "
                       f"universe's {have.get('first_labels')}")
    if want.get("coords_sha256") != have.get("coords_sha256"):
        if want.get("coords_sha256") is None or have.get("coords_sha256") is None:
            out.append("coordinates: " + ("the config's universe has none" if
                                          want.get("coords_sha256") is None
                                          else "the given universe has none"))
        elif want.get("coord_set_sha256") == have.get("coord_set_sha256"):
            if same_set and want.get("labels_sha256") == have.get("labels_sha256"):
                out.append("coordinates: the same points attached to other elements")
            elif not any(x.startswith("order") for x in out):
                out.append("order: the same coordinates in another order")
        else:
            out.append("coordinates: other values")
    return "; ".join(out) or "the element values differ (same labels and coordinates)"


def _read_only(df: pd.DataFrame) -> None:
    """Make the numpy blocks of ``df`` read-only (best effort: pandas' internals may change;
    the deep copy made before is what protects against the caller's later writes)."""
    try:
        for blk in df._mgr.blocks:
            vals = getattr(blk, "values", None)
            if isinstance(vals, np.ndarray):
                vals.setflags(write=False)
    except (AttributeError, ValueError):  # pragma: no cover - other pandas internals
        pass


def check_histogram(x, N: int, *, whole: bool = True) -> np.ndarray:  # noqa: N803
    """Validate a histogram of length N (finite, non-negative, whole counts); return it as floats.

    A histogram counts records, and d_X-privacy protects the move of one whole record: a
    fractional count (0.5 of a record) is refused rather than released under a guarantee that
    does not cover it. Weighted sums belong in the queries F, not in x. ``whole=False`` allows
    fractional masses (e.g. the distributions compared by :func:`dprivacy.group_privacy_loss`).
    """
    try:
        arr = np.asarray(x, dtype=float)
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"histogram x must hold numbers (counts of records): {exc}") from exc
    if arr.ndim != 1 or arr.shape[0] != N:
        raise ShapeError(f"histogram x has shape {arr.shape}; expected ({N},), one count per element")
    if not np.all(np.isfinite(arr)):
        raise ValidationError("histogram x has NaN or infinite counts")
    if np.any(arr < 0):
        raise ValidationError(f"histogram x has a negative count at index {int(np.argmin(arr))}")
    frac = arr != np.round(arr)
    if whole and np.any(frac):
        k = int(np.argmax(frac))
        raise ValidationError(
            f"histogram x has a non-integer count x[{k}] = {float(arr[k])!r}: a histogram counts records "
            "(whole numbers >= 0); round or aggregate the records first, and put weights in the "
            "queries F rather than in x")
    return arr
