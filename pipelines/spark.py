"""The one place a Spark session is built: Delta configured, UTC session time, sized by settings."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from conf import Settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

# Spark's JVM log goes to $TURNOUT_HOME/logs/spark.log; only errors reach the console.
LOG4J_CONFIG = Path(__file__).resolve().parent.parent / "conf" / "log4j2.properties"


class JarsMissing(RuntimeError):
    """A folder of jars a profile names is empty: the `make` target that fills it has not run."""


class DeltaJarsMissing(JarsMissing):
    """Delta's jars are fetched by `make setup` (Maven Central); without them Spark has no Delta."""


def _jars_in(jars_dir: str) -> list[str]:
    """The jar files of a folder, sorted for a stable classpath."""
    return sorted(str(p) for p in Path(jars_dir).glob("*.jar"))


def delta_jars(jars_dir: str) -> list[str]:
    """The jar files `make jars` copied from Maven Central."""
    jars = _jars_in(jars_dir)
    if not any("delta-spark" in Path(j).name for j in jars):
        raise DeltaJarsMissing(
            f"no delta-spark jar in {jars_dir}: run `make jars` (needs Maven and network once)"
        )
    return jars


def extra_jars(jars_dir: str) -> list[str]:
    """The jars of one of ``spark.extra_jars_dirs``; a folder without any is an error that names it."""
    jars = _jars_in(jars_dir)
    if not jars:
        raise JarsMissing(
            f"no jar in {jars_dir} (spark.extra_jars_dirs): for the S3A connector run `make jars-s3`"
        )
    return jars


def spark_conf(settings: Settings) -> dict[str, str]:
    """Every Spark setting turnout relies on, as one dict: the session below, and Feast's Spark
    offline store (``feature_store.yaml`` ``spark_conf``) if it ever has to start a session itself."""
    cfg = settings.spark
    conf = {
        "spark.master": cfg.master,
        "spark.jars": ",".join(
            delta_jars(cfg.jars_dir) + [j for d in cfg.extra_jars_dirs for j in extra_jars(d)]
        ),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.sql.session.timeZone": "UTC",
        "spark.executor.extraJavaOptions": "-Duser.timezone=UTC",
        "spark.driver.memory": cfg.driver_memory,
        "spark.sql.shuffle.partitions": str(cfg.shuffle_partitions),
        "spark.default.parallelism": str(cfg.shuffle_partitions),
        "spark.databricks.delta.snapshotPartitions": str(cfg.delta_snapshot_partitions),
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.warehouse.dir": str(settings.home / "spark-warehouse"),
        "spark.driver.extraJavaOptions": (
            f"-Duser.timezone=UTC -Dderby.system.home={settings.home} "
            f"-Dlog4j2.configurationFile=file:{LOG4J_CONFIG} -Dturnout.log.dir={settings.home / 'logs'}"
        ),
        # Python workers (pandas UDFs) run the driver's interpreter, i.e. this project's .venv;
        # a cluster profile points this at the executors' interpreter through `conf`.
        "spark.pyspark.python": sys.executable,
    }
    conf.update(cfg.conf)
    return conf


def get_spark(settings: Settings, app_name: str = "turnout") -> SparkSession:
    """Return the process's Spark session, creating it on first call."""
    from pyspark.sql import SparkSession

    # PySpark launches local Python workers from PYSPARK_PYTHON (default: whatever `python3` is
    # on PATH), not from the conf; point it at this interpreter so workers see the same packages.
    os.environ.setdefault("PYSPARK_PYTHON", spark_conf(settings)["spark.pyspark.python"])
    (settings.home / "logs").mkdir(parents=True, exist_ok=True)
    builder = SparkSession.builder.appName(app_name)
    for key, value in spark_conf(settings).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    log.info("spark session %s on %s", spark.version, settings.spark.master)
    return spark
