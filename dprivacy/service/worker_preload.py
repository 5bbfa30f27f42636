"""Loaded once by the fork server of the analysts' workers (:mod:`dprivacy.service.workers`),
so that every worker it forks starts with the engine's modules imported and the budget
kernels compiled, instead of paying for them on its first query."""

from __future__ import annotations

import ibis  # noqa: F401 - imported for the forks
import ibis.backends.duckdb  # noqa: F401

import dprivacy.service.execute  # noqa: F401
import dprivacy.service.sources  # noqa: F401
import dprivacy.tables  # noqa: F401
from dprivacy.tables.budgets import slot_kernels

slot_kernels.warm()
