"""One local SparkSession with Delta Lake for the whole test session (and for bench/tables).

`start_spark()` starts a JVM running Spark `local[2]` with delta-spark's SQL extension and
catalog, the UI off, small driver memory and few shuffle partitions; the `spark` fixture
(session-scoped, registered in conftest.py) starts it on first use and stops it at the end.
Starting the JVM is the expensive part (seconds), so every test that needs Spark shares it.

Delta's jars come from Maven Central through Ivy (`spark.jars.packages`) the first time, into a
stable cache directory (TRAINYARD_IVY_DIR, default ~/.cache/trainyard/ivy). After that the
resolved jars are passed directly with `spark.jars`, so a later session starts offline with no
resolution at all. `python tests/spark_session.py` resolves them ahead of time
(scripts/install-deps runs it) and prints the start time.

Needs Java 17 (Debian's openjdk-17-jre-headless) and the pinned `pyspark` and `delta-spark`.
"""

from __future__ import annotations

import glob
import os
import sys
import time
from pathlib import Path

import pytest

# delta-spark 3.3.x is built for Spark 3.5 and Scala 2.12.
DELTA_VERSION = "3.3.2"
DELTA_PACKAGES = (f"io.delta:delta-spark_2.12:{DELTA_VERSION}",
                  f"io.delta:delta-storage:{DELTA_VERSION}")
IVY_DIR = Path(os.environ.get("TRAINYARD_IVY_DIR",
                              Path.home() / ".cache" / "trainyard" / "ivy"))


def _java_home() -> str | None:
    if os.environ.get("JAVA_HOME"):
        return os.environ["JAVA_HOME"]
    for candidate in sorted(glob.glob("/usr/lib/jvm/java-17-openjdk-*")):
        if os.path.exists(os.path.join(candidate, "bin", "java")):
            return candidate
    return None


def _cached_jars() -> list[str]:
    """The Delta jars from an earlier resolution, or [] when one of them is missing."""
    jars = []
    for coordinate in DELTA_PACKAGES:
        _, artifact, version = coordinate.split(":")
        path = IVY_DIR / "jars" / f"io.delta_{artifact}-{version}.jar"
        if not path.is_file():
            return []
        jars.append(str(path))
    return jars


def start_spark(app_name: str = "trainyard-tests", memory: str = "1g"):
    """Starts (or returns the running) local SparkSession with Delta; the caller stops it."""
    from pyspark.sql import SparkSession

    if java_home := _java_home():
        os.environ.setdefault("JAVA_HOME", java_home)
    # The driver and its Python workers run this interpreter (the venv's), not a system one.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    IVY_DIR.mkdir(parents=True, exist_ok=True)
    builder = (SparkSession.builder.master("local[2]").appName(app_name)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.driver.memory", memory)
               .config("spark.sql.shuffle.partitions", "2")
               # Delta's log replay runs in 50 partitions by default: seconds per read on 2 cores.
               .config("spark.databricks.delta.snapshotPartitions", "2")
               .config("spark.default.parallelism", "2")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.driver.extraJavaOptions", "-Duser.timezone=UTC")
               .config("spark.jars.ivy", str(IVY_DIR))
               .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
               .config("spark.sql.catalog.spark_catalog",
                       "org.apache.spark.sql.delta.catalog.DeltaCatalog")
               # Tests vacuum with retention 0 and read Spark's own commits back quickly.
               .config("spark.databricks.delta.retentionDurationCheck.enabled", "false"))
    if jars := _cached_jars():
        builder = builder.config("spark.jars", ",".join(jars))
    else:
        builder = builder.config("spark.jars.packages", ",".join(DELTA_PACKAGES))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


@pytest.fixture(scope="session")
def spark():
    """The session's one local SparkSession with Delta (started on first use)."""
    spark_session = start_spark()
    try:
        yield spark_session
    finally:
        spark_session.stop()


if __name__ == "__main__":
    began = time.monotonic()
    session = start_spark()
    session.range(3).count()
    print(f"spark_session: local[2] with Delta {DELTA_VERSION} started in "
          f"{time.monotonic() - began:.1f} s; jars in {IVY_DIR}/jars")
    session.stop()
