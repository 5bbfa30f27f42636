"""Reading and writing the command line's files, with one-line errors that name flag and file.

Every reader checks the path first (exists, is a file, readable, not empty), decodes text as
UTF-8 and turns every parser failure into an :class:`~dprivacy.cli.exits.InputError`; output paths
are checked before any work starts (:func:`check_out`) and written atomically (:func:`write_text`),
so a failed command leaves nothing behind.
"""

from __future__ import annotations

import csv
import io
import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dprivacy._atomic import atomic_write_text
from dprivacy.cli.exits import InputError, UsageError, one_line

if TYPE_CHECKING:
    import pandas as pd

#: Files larger than this are refused (a typo such as a disk image for a CSV would exhaust memory).
MAX_BYTES = 1 << 30
#: JSON nesting deeper than this is refused before Python's parser recurses into it.
MAX_JSON_DEPTH = 64


def _where(flag: str, path: str | os.PathLike) -> str:
    return f"{flag} {str(path)!r}"


def check_input_file(path: str | os.PathLike, flag: str) -> Path:
    """``path`` as a Path once it is known to be an existing, readable, non-empty file."""
    if not str(path).strip():
        raise UsageError(f"{flag} is empty: give a file path")
    p = Path(path)
    where = _where(flag, path)
    try:
        if p.is_dir():
            raise InputError(f"{where} is a directory: give a file")
        if not p.exists():
            raise InputError(f"{where}: no such file; check the path")
        if not p.is_file():
            raise InputError(f"{where} is not a regular file: give a file")
        size = p.stat().st_size
    except OSError as exc:
        raise InputError(f"{where} cannot be accessed: {exc.strerror or exc}") from exc
    if size == 0:
        raise InputError(f"{where} is empty (0 bytes): give a file with content")
    if size > MAX_BYTES:
        raise InputError(f"{where} is {size / 2**30:.1f} GiB, larger than the 1 GiB dprivacy reads")
    return p


def read_bytes(path: str | os.PathLike, flag: str) -> bytes:
    p = check_input_file(path, flag)
    try:
        return p.read_bytes()
    except OSError as exc:
        raise InputError(f"{_where(flag, path)} cannot be read: {exc.strerror or exc}; "
                         "check its permissions") from exc


def read_text(path: str | os.PathLike, flag: str) -> str:
    """The file's text (UTF-8, an optional byte-order mark removed)."""
    data = read_bytes(path, flag)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"{_where(flag, path)} is not UTF-8 text (byte {exc.start}): "
                         "save it as UTF-8") from exc
    if "\x00" in text:
        raise InputError(f"{_where(flag, path)} contains NUL bytes: it is not a text file")
    if not text.strip():
        raise InputError(f"{_where(flag, path)} holds only whitespace: give a file with content")
    return text


def _line(df: pd.DataFrame | pd.Series, k: int) -> int:
    """The file line of row ``k`` (tables from :func:`read_csv` are indexed by line number)."""
    try:
        return int(df.index[k])
    except (TypeError, ValueError, IndexError):
        return k + 2


def read_csv(path: str | os.PathLike, flag: str, *, header: bool = True) -> pd.DataFrame:
    """A CSV as a table of stripped strings, indexed by the line number of each row in the file.

    No type guessing (callers convert columns), every row must have as many fields as the first,
    blank lines are skipped. ``header=False`` reads every line as data (columns 0, 1, ...).
    """
    import pandas as pd

    text = read_text(path, flag)
    where = _where(flag, path)
    reader = csv.reader(io.StringIO(text, newline=""))
    rows: list[list[str]] = []
    lines: list[int] = []
    start = 1
    try:
        for row in reader:
            if any(f.strip() for f in row):
                rows.append([f.strip() for f in row])
                lines.append(start)
            start = reader.line_num + 1
    except csv.Error as exc:
        raise InputError(f"{where} is not a well-formed CSV (line {reader.line_num}: {exc})"
                         ) from exc
    if not rows:
        raise InputError(f"{where} has no rows: give a comma-separated file")
    width = len(rows[0])
    for row, line in zip(rows, lines, strict=True):
        if len(row) != width:
            raise InputError(f"{where}: line {line} has {len(row)} fields but line {lines[0]} has "
                             f"{width}; every row needs the same number of comma-separated "
                             "fields")
    if width == 1:
        for sep, name in ((";", "semicolon"), ("\t", "tab"), ("|", "pipe")):
            if sep in rows[0][0] or (len(rows) > 1 and sep in rows[1][0]):
                raise InputError(f"{where} looks {name}-separated: dprivacy reads "
                                 "comma-separated files; replace the separators with commas")
    if not header:
        return pd.DataFrame(rows, index=lines, dtype=str)
    cols = rows[0]
    if any(c == "" for c in cols):
        raise InputError(f"{where} has a column without a name in its header row {cols}: "
                         "name every column")
    if len(set(cols)) != len(cols):
        dup = sorted({c for c in cols if cols.count(c) > 1})
        raise InputError(f"{where} repeats column(s) {dup} in its header row: name each "
                         "column once")
    return pd.DataFrame(rows[1:], columns=cols, index=lines[1:], dtype=str)


def to_numbers(col: pd.Series, what: str, where: str) -> np.ndarray:
    """A column of strings as finite floats, or an error naming the first bad row (file line)."""
    import pandas as pd

    num = pd.to_numeric(col, errors="coerce").to_numpy(dtype=float)
    bad = ~np.isfinite(num)
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        val = col.iloc[k]
        why = "is empty" if val == "" else f"= {val!r} is not a finite number"
        raise InputError(f"{where}: {what} on line {_line(col, k)} {why}; fix that entry")
    return num


def read_npy(path: str | os.PathLike, flag: str) -> np.ndarray:
    """A numeric .npy array (no pickles)."""
    data = read_bytes(path, flag)
    where = _where(flag, path)
    try:
        arr = np.load(io.BytesIO(data), allow_pickle=False)
    except (ValueError, EOFError, OSError, TypeError) as exc:
        raise InputError(f"{where} is not a numeric .npy array ({one_line(exc, 120)}); save it "
                         "with numpy.save") from exc
    if not isinstance(arr, np.ndarray):
        raise InputError(f"{where} holds several arrays (.npz): give one .npy array")
    if arr.dtype.kind not in "biuf":
        raise InputError(f"{where} has dtype {arr.dtype}, not numbers: save a float array")
    return arr


def _depth_ok(text: str, limit: int) -> bool:
    depth = 0
    in_str = esc = False
    for ch in text:
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
            if depth > limit:
                return False
        elif ch in "]}":
            depth -= 1
    return True


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON (write a number or a string)")


def read_json(path: str | os.PathLike, flag: str) -> Any:
    """A JSON document (strict: no NaN/Infinity; nesting at most ``MAX_JSON_DEPTH`` deep)."""
    text = read_text(path, flag)
    where = _where(flag, path)
    if not _depth_ok(text, MAX_JSON_DEPTH):
        raise InputError(f"{where} is not a dprivacy config: JSON nested more than "
                         f"{MAX_JSON_DEPTH} levels deep")
    try:
        return json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise InputError(f"{where} is not valid JSON (line {exc.lineno}, column {exc.colno}: "
                         f"{exc.msg}); is it truncated or hand-edited?") from exc
    except (ValueError, RecursionError) as exc:
        raise InputError(f"{where} is not valid JSON ({one_line(exc, 120)})") from exc


def check_out(path: str | os.PathLike, flag: str,
              inputs: Iterable[str | os.PathLike | None] = ()) -> Path:
    """Check, before any work, that ``path`` can be written: not a directory, not one of the
    input files, in an existing folder where a file can be created."""
    if not str(path).strip():
        raise UsageError(f"{flag} is empty: give a file path")
    p = Path(path)
    where = _where(flag, path)
    if p.is_dir() or str(path).endswith(("/", os.sep)):
        raise UsageError(f"{where} is a directory: give a file name inside it")
    if p.exists() and not p.is_file():
        raise UsageError(f"{where} exists and is not a regular file: choose another path")
    for other in inputs:
        if other is not None and p.exists() and Path(other).exists():
            try:
                if p.samefile(other):
                    raise UsageError(f"{where} is also an input file: write to another path")
            except OSError:
                pass
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise UsageError(f"{where}: folder {str(parent)!r} does not exist; create it first")
    try:
        fd, tmp = tempfile.mkstemp(prefix=".dprivacy-check-", dir=parent)
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        raise UsageError(f"{where}: cannot write in folder {str(parent)!r} "
                         f"({exc.strerror or exc}); choose a writable folder") from exc
    return p


def write_text(path: str | os.PathLike, text: str, flag: str) -> Path:
    """Write ``text`` atomically (temporary file in the same folder, then ``os.replace``)."""
    return atomic_write_text(path, text, on_create_error=lambda exc: InputError(
        f"{_where(flag, path)}: cannot write ({exc.strerror or exc})"))
