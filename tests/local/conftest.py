"""Fixtures of the local-model tests (see :mod:`tests.local.sandbox_support` for the sandbox rule)."""

from __future__ import annotations

import pytest

from dprivacy.local.device.sandbox import Sandbox
from tests.local.sandbox_support import make_sandbox


@pytest.fixture(scope="module")
def sandbox() -> Sandbox:
    return make_sandbox(pad=False)
