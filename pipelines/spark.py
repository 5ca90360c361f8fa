"""The one place a Spark session is built: Delta configured, UTC session time, sized by settings."""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
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


def _jars(settings: Settings) -> list[str]:
    cfg = settings.spark
    return delta_jars(cfg.jars_dir) + [j for d in cfg.extra_jars_dirs for j in extra_jars(d)]


def java() -> Path:
    """The java that spark-submit runs: $JAVA_HOME's, else the one on PATH."""
    java_home = os.environ.get("JAVA_HOME")
    return Path(java_home, "bin", "java") if java_home else Path(shutil.which("java") or "java")


def class_archive(settings: Settings) -> Path | None:
    """Where the class-data archive for this JVM and classpath belongs (None: the profile keeps
    none). Its name is a digest of both, so an archive is only ever mapped by the JVM and jars it
    was dumped from (`pipelines/spark_classes.py` makes it); HotSpot checks the flags it depends on
    itself and starts without it where they differ."""
    cfg = settings.spark
    if cfg.class_archive_dir is None:
        return None
    import pyspark

    files = [java().resolve(), *map(Path, _jars(settings))]
    parts = [pyspark.__version__, pyspark.__file__]
    parts += [f"{f} {f.stat().st_size} {f.stat().st_mtime_ns}" for f in files if f.exists()]
    digest = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
    return Path(cfg.class_archive_dir) / f"spark-{pyspark.__version__}-{digest}.jsa"


def usable_class_archive(settings: Settings) -> Path | None:
    """The class archive, if one was dumped and checked for this JVM and classpath and is still
    whole: HotSpot maps it without reading it first, so a truncated archive is a SIGBUS at JVM
    start, not a fallback. The dump records the size it checked beside the archive."""
    archive = class_archive(settings)
    if archive is None or not archive.exists():
        return None
    size = archive.with_name(archive.name + ".size")
    if not size.exists() or size.read_text().strip() != str(archive.stat().st_size):
        log.warning("class archive %s is not the one the dump checked: not mapped", archive)
        return None
    return archive


def spark_conf(settings: Settings) -> dict[str, str]:
    """Every Spark setting turnout relies on, as one dict: the session below, and Feast's Spark
    offline store (``feature_store.yaml`` ``spark_conf``) if it ever has to start a session itself."""
    cfg = settings.spark
    driver_flags = (
        f"-Duser.timezone=UTC -Dderby.system.home={settings.home} "
        f"-Dlog4j2.configurationFile=file:{LOG4J_CONFIG} -Dturnout.log.dir={settings.home / 'logs'}"
    )
    archive = usable_class_archive(settings)
    if archive is not None:
        driver_flags += f" -XX:SharedArchiveFile={archive}"
    conf = {
        "spark.master": cfg.master,
        "spark.jars": ",".join(_jars(settings)),
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
        "spark.driver.extraJavaOptions": driver_flags,
        # Python workers (pandas UDFs) run the driver's interpreter, i.e. this project's .venv;
        # a cluster profile points this at the executors' interpreter through `conf`.
        "spark.pyspark.python": sys.executable,
    }
    conf.update(cfg.conf)
    return conf


def get_spark(settings: Settings, app_name: str = "turnout", driver_flags: str = "") -> SparkSession:
    """Return the process's Spark session, creating it on first call (with ``driver_flags`` added
    to the driver JVM's options: `pipelines/spark_classes.py` dumps the class archive so)."""
    from pyspark.sql import SparkSession

    # PySpark launches local Python workers from PYSPARK_PYTHON (default: whatever `python3` is
    # on PATH), not from the conf; point it at this interpreter so workers see the same packages.
    conf = spark_conf(settings)
    conf["spark.driver.extraJavaOptions"] = f"{conf['spark.driver.extraJavaOptions']} {driver_flags}".strip()
    os.environ.setdefault("PYSPARK_PYTHON", conf["spark.pyspark.python"])
    (settings.home / "logs").mkdir(parents=True, exist_ok=True)
    builder = SparkSession.builder.appName(app_name)
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    mapped = [
        f for f in conf["spark.driver.extraJavaOptions"].split() if f.startswith("-XX:SharedArchiveFile=")
    ]
    log.info(
        "spark session %s on %s, %s",
        spark.version,
        settings.spark.master,
        f"classes mapped from {mapped[0].split('=', 1)[1]}"
        if mapped
        else "no class archive mapped (`make spark-classes` dumps one)",
    )
    return spark
