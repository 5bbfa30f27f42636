"""Reading a mechanism config for ``verify`` and ``release``: checked against YOUR inputs.

The universe, metric and workload always come from the command line (a config records
fingerprints of what it was made for, and those are compared with the inputs given; the values
recorded in the file are never used in their place), so a file whose beta, metric parameters and
fingerprints were all edited consistently is refused like any other mismatch.
"""

from __future__ import annotations

from typing import Any

from dprivacy.cli.common import Inputs, guard
from dprivacy.cli.exits import InputError, RefusedError, one_line
from dprivacy.cli.files import read_json
from dprivacy.errors import ConfigError, ConfigMismatchError, PrivacyViolationError


def load_config(path: str, inp: Inputs) -> Any:
    """The config at ``path`` bound to (and verified for) the caller's inputs."""
    from dprivacy.config import MechanismConfig

    doc = read_json(path, "CONFIG")
    where = f"CONFIG {path!r}"
    try:
        cfg = MechanismConfig.from_dict(doc)
    except ConfigError as exc:
        raise InputError(f"{where} is not a dprivacy mechanism config: {one_line(exc)}") from exc
    try:
        with guard(where):
            return cfg.bind(inp.workload, inp.universe, inp.metric)
    except InputError as exc:
        cause = exc.__cause__
        if isinstance(cause, (ConfigError, ConfigMismatchError, PrivacyViolationError)):
            raise RefusedError(f"REFUSED: {where}: {one_line(cause)}") from cause
        raise
