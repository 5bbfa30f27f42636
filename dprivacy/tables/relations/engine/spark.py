"""A local Spark session for the Spark backend (tests, examples, a laptop).

On a cluster, build the session as usual and pass its DataFrames (or ``backend="spark"``); the
library only switches the session to non-ANSI mode (see :mod:`.backends`).
"""

from __future__ import annotations

import logging
import os
from typing import Any

__all__ = ["local_session"]

log = logging.getLogger(__name__)


def local_session(cores: int = 2, *, app_name: str = "dprivacy") -> Any:
    """A local SparkSession (``local[cores]``) with the UI off, 2 shuffle partitions, quiet
    logs and ANSI mode off; reused if one is already active.

    Parameters:
        cores: worker threads.
        app_name: the application's name.

    Returns:
        The ``pyspark.sql.SparkSession``.
    """
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", os.environ.get("PYSPARK_PYTHON", "python3"))
    session = (
        SparkSession.builder.master(f"local[{int(cores)}]").appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", str(int(cores)))
        .config("spark.sql.ansi.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    log.debug("local Spark session %s started", session.version)
    return session
