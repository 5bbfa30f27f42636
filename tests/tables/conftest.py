"""Fixtures of the table tests: a session-scoped local Spark session (2 cores, UI off, two
shuffle partitions, quiet logs), started only if a test asks for it."""

from __future__ import annotations

import logging
import os
import shutil

import pytest


@pytest.fixture(scope="session")
def spark():
    pytest.importorskip("pyspark")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("Spark needs a Java runtime: none on PATH and JAVA_HOME unset "
                    "(install one, e.g. the distribution's openjdk-17-jre-headless)")
    from dprivacy.tables.relations.engine import local_session

    logging.getLogger("py4j").setLevel(logging.ERROR)
    session = local_session(2)
    yield session
    session.stop()
