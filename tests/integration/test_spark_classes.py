"""The class archive `make setup` dumps is what a real driver JVM maps (pipelines/spark_classes.py)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from conf import load_settings
from pipelines.spark import class_archive, spark_conf

# A fresh driver told to map its archive or not start at all (-Xshare:on), then a Delta write and
# read: HotSpot refuses an archive dumped by another JVM or classpath, so a session here proves the
# archive named for these jars is the one these jars load.
_DRIVER = textwrap.dedent(
    """
    import sys
    from conf import load_settings
    from pipelines.spark import get_spark

    spark = get_spark(load_settings("local", home=sys.argv[1]), "cds-check", "-Xshare:on")
    path = sys.argv[1] + "/t"
    spark.range(10).write.format("delta").save(path)
    print("rows", spark.read.format("delta").load(path).count())
    """
)


def test_a_driver_jvm_maps_the_archive_setup_dumped_for_its_jars(tmp_path: Path) -> None:
    settings = load_settings("local", home=tmp_path)
    archive = class_archive(settings)
    assert archive is not None and archive.exists(), f"no {archive}: run `make spark-classes`"
    assert f"-XX:SharedArchiveFile={archive}" in spark_conf(settings)["spark.driver.extraJavaOptions"]

    done = subprocess.run(
        [sys.executable, "-c", _DRIVER, str(tmp_path)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "rows 10" in done.stdout
