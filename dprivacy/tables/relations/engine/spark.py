"""A local Spark session for the Spark backend (tests, examples, a laptop).

On a cluster, build the session as usual and pass its DataFrames (or ``backend="spark"``); the
library only switches the session to non-ANSI mode (see :mod:`.backends`).
"""

from __future__ import annotations

import atexit
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["local_session"]

log = logging.getLogger(__name__)

#: log4j2 configuration of the local JVM: errors only, on stderr. Without it Spark prints its
#: start-up banner ("Using Spark's default log4j profile", "Setting default log level", WARN
#: lines) before ``setLogLevel`` can act. The shell's "default log level" line is printed only
#: when the levels of the loggers named below differ from the root's.
QUIET_LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
logger.repl.name = org.apache.spark.repl.Main
logger.repl.level = error
logger.submit.name = org.apache.spark.deploy.SparkSubmit
logger.submit.level = error
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = error
"""


_QUIET_FILE: list[str] = []  # the file written for this process, once


def _quiet_log4j2() -> str:
    """A ``file:`` URI of :data:`QUIET_LOG4J2`, written once per process to a private temporary
    file (removed at exit)."""
    if not _QUIET_FILE:
        fd, name = tempfile.mkstemp(prefix="dprivacy-log4j2-", suffix=".properties")
        with os.fdopen(fd, "w") as f:
            f.write(QUIET_LOG4J2)
        atexit.register(lambda: Path(name).unlink(missing_ok=True))
        _QUIET_FILE.append(Path(name).as_uri())
    return _QUIET_FILE[0]


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
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={_quiet_log4j2()}")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    log.debug("local Spark session %s started", session.version)
    return session
