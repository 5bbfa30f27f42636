"""Reduce ``pre``'s output to an element of T's input domain *inside the sandbox*.

Analyst code decides what ``pre`` returns: a value of any size and depth, returned at any
moment before its time bound. If the agent parsed that value, its own work after ``pre`` (and so
the moment its reply leaves) would depend on what ``pre`` returned, a timing channel past the
padding. So the sandbox's runner reduces the value before it leaves the sandbox:

* a bounded walk accepts only exact JSON types (``None``, ``bool``, ``int``, ``float``, ``str``,
  ``list``/``tuple``, ``dict`` with text keys), stops as soon as the value is larger than the
  largest element of T's domain or deeper than :data:`MAX_DEPTH`, and then looks the value up;
* what leaves the sandbox is a fixed-format record: ``D`` and the element's row index as 8 hex
  digits (a matrix randomiser), ``D`` and 4 hex digits per coordinate (a product randomiser), or
  ``N`` (not an element of the domain).

The agent reads at most :func:`record_size` bytes of the sandbox's output, a number fixed by T,
and decodes them with :func:`decode` (O(size of T)). Analyst code runs in the same interpreter
as the runner and may tamper with it; then the record is whatever the analyst chose, which is no
more than choosing ``pre``'s output: the agent accepts only a well-formed record naming an
element of the domain, and anything else becomes a uniformly random element.

Privacy condition: none (the reduction is a function of ``pre``'s output; domain enforcement keeps
T's input in its domain).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from dprivacy.local.randomiser import MatrixRandomiser, ProductRandomiser, Randomiser

__all__ = ["MAX_DEPTH", "REDUCER", "decode", "domain_spec", "record_size"]

#: Deepest value the in-sandbox walk accepts.
MAX_DEPTH = 64
#: Bytes that start the record the runner writes.
MARK = b"\x1eR"

#: Runner source: reads ``{"code", "entry", "args", "spec"}`` on stdin, runs ``entry(*args)`` with
#: stdout and stderr sent to /dev/null, reduces the result with the spec and writes the record
#: to the original stdout, then exits at once (threads of the analyst's do not outlive it).
REDUCER = r"""
import json, os, sys
req = json.loads(sys.stdin.read())
res = os.dup(1)
nul = os.open("/dev/null", os.O_WRONLY)
os.dup2(nul, 1)
os.dup2(nul, 2)
spec = req["spec"]

def small(v, budget, depth_cap):
    stack, used = [(v, 0)], 0
    while stack:
        x, d = stack.pop()
        t = type(x)
        if d > depth_cap:
            return False
        if x is None or t is bool or t is float:
            used += 1
        elif t is int:
            if x.bit_length() > 4 * budget + 64:
                return False
            used += 1
        elif t is str:
            used += len(x) + 2
        elif t is list or t is tuple:
            used += 2 + len(x)
            if used > budget:
                return False
            stack.extend((y, d + 1) for y in x)
        elif t is dict:
            used += 2 + 2 * len(x)
            if used > budget:
                return False
            for k, y in x.items():
                if type(k) is not str:
                    return False
                used += len(k)
                stack.append((y, d + 1))
        else:
            return False
        if used > budget:
            return False
    return True

def reduce(v):
    if spec["kind"] == "labels":
        if not small(v, spec["budget"], spec["depth"]):
            return b"N"
        try:
            key = json.dumps(v, sort_keys=True, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError):
            return b"N"
        i = spec["index"].get(key)
        return b"N" if i is None else b"D%08x" % i
    rows, n = spec["rows"], spec["length"]
    if (type(v) is not list and type(v) is not tuple) or len(v) != n:
        return b"N"
    shared = type(rows) is int
    for i, x in enumerate(v):
        if type(x) is not int or not 0 <= x < (rows if shared else rows[i]):
            return b"N"
    if spec["one_hot"] and sum(v) != 1:
        return b"N"
    return b"D" + "".join(["%04x" % x for x in v]).encode()

try:
    ns = {"__name__": "analyst", "__builtins__": __builtins__}
    exec(compile(req["code"], "<analyst>", "exec"), ns)
    out = reduce(ns[req["entry"]](*req["args"]))
except BaseException:
    out = b"N"
os.write(res, b"\x1eR" + out)
os._exit(0)
"""


def _key(v: Any) -> str:
    return json.dumps(v, sort_keys=True, separators=(",", ":"))


def domain_spec(T: Randomiser) -> dict[str, Any]:  # noqa: N803 (the paper's symbol)
    """The description of T's input domain the runner reduces ``pre``'s output with (JSON).

    Examples
    --------
    >>> R = MatrixRandomiser([[0.75, 0.25], [0.25, 0.75]], inputs=["yes", "no"])
    >>> domain_spec(R)["index"]
    {'"yes"': 0, '"no"': 1}
    """
    if isinstance(T, MatrixRandomiser):
        assert T.inputs is not None  # set by the randomiser
        keys = [_key(v) for v in T.inputs]
        return {"kind": "labels", "index": {k: i for i, k in enumerate(keys)},
                "budget": max(len(k) for k in keys) + 2, "depth": MAX_DEPTH, "size": len(keys)}
    if isinstance(T, ProductRandomiser):
        rows = [int(m.shape[0]) for m in T.matrices]
        shared: Any = rows[0] if len(set(rows)) == 1 else rows
        return {"kind": "vector", "rows": shared, "length": int(T.length or 0),
                "one_hot": T.domain == "one_hot"}
    raise TypeError(f"no in-sandbox reduction for a {type(T).__name__}")


def record_size(spec: dict[str, Any]) -> int:
    """Largest record (bytes) the runner writes for ``spec``: all the agent ever reads."""
    if spec["kind"] == "labels":
        return len(MARK) + 1 + 8
    return len(MARK) + 1 + 4 * int(spec["length"])


def decode(raw: bytes, spec: dict[str, Any]) -> int | list[int] | None:
    """The row index (matrix) or index vector (product) a record names, None for anything else.

    Work is O(:func:`record_size`), whatever the sandbox wrote.

    Examples
    --------
    >>> spec = {"kind": "labels", "index": {"0": 0, "1": 1}, "budget": 3, "depth": 64, "size": 2}
    >>> decode(b"\\x1eRD00000001", spec), decode(b"\\x1eRD00000002", spec), decode(b"\\x1eRN", spec)
    (1, None, None)
    """
    if len(raw) != record_size(spec) or not raw.startswith(MARK + b"D"):
        return None
    body = raw[len(MARK) + 1:]
    try:
        if spec["kind"] == "labels":
            i = int(body.decode("ascii"), 16)
            return i if 0 <= i < int(spec["size"]) else None
        v = np.frombuffer(bytes.fromhex(body.decode("ascii")), dtype=">u2").astype(np.int64)
    except (UnicodeDecodeError, ValueError):
        return None
    rows = np.asarray(spec["rows"], dtype=np.int64)
    if v.size != int(spec["length"]) or bool(np.any(v >= rows)):
        return None
    if spec["one_hot"] and int(v.sum()) != 1:
        return None
    return [int(x) for x in v.tolist()]
