"""What a DAG task's fresh driver JVM pays before its work, with and without the class archive.

    python bench/bench_spark_start.py [--rounds 3]

Each run is a fresh Python process with its own driver JVM, as each DAG task is: the session
start, a first Delta write, three MERGEs of 50 rows into it and two small aggregations, timed
step by step. Runs alternate between the driver mapping the class archive `make spark-classes`
dumped (``pipelines/spark_classes.py``) and the same driver told to map none, so both share the
machine's state. Prints the median of each step per variant and their ratio.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STEPS = ("session", "first write", "MERGE 1", "MERGE 2", "MERGE 3", "aggregation 1", "aggregation 2")


def run_once(home: Path, archive: bool) -> dict[str, float]:
    """The steps in this process (the child of ``main``)."""
    t0 = time.perf_counter()
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    from conf import load_settings
    from pipelines.spark import get_spark

    settings = load_settings("local", home=home)
    if not archive:
        settings = settings.model_copy(
            update={"spark": settings.spark.model_copy(update={"class_archive_dir": None})}
        )
    spark = get_spark(settings, "bench-spark-start")
    seconds = {"session": time.perf_counter() - t0}
    path = str(home / "table")

    def merge(first: int) -> None:
        rows = spark.range(first, first + 50).withColumn("v", F.col("id") * 3)
        (
            DeltaTable.forPath(spark, path)
            .alias("t")
            .merge(rows.alias("s"), "t.id = s.id")
            .whenMatchedUpdateAll()
            .whenNotMatchedInsertAll()
            .execute()
        )

    work = {
        "first write": lambda: (
            spark.range(1000).withColumn("v", F.col("id") * 2).write.format("delta").save(path)
        ),
        "MERGE 1": lambda: merge(990),
        "MERGE 2": lambda: merge(1020),
        "MERGE 3": lambda: merge(1060),
        "aggregation 1": lambda: (
            spark.read.format("delta").load(path).groupBy(F.col("id") % 7).sum("v").collect()
        ),
        "aggregation 2": lambda: (
            spark.read.format("delta").load(path).groupBy(F.col("id") % 5).max("v").collect()
        ),
    }
    for name, step in work.items():
        t = time.perf_counter()
        step()
        seconds[name] = time.perf_counter() - t
    spark.stop()
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3, help="runs per variant, alternating")
    parser.add_argument("--child", nargs=2, metavar=("HOME", "ARCHIVE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_once(Path(args.child[0]), args.child[1] == "yes")))
        return
    from conf import load_settings
    from pipelines.spark import class_archive

    archive = class_archive(load_settings("local", home=REPO / ".turnout"))
    if archive is None or not archive.exists():
        raise SystemExit(f"no class archive at {archive}: run `make spark-classes` first")
    runs: dict[str, list[dict[str, float]]] = {"archive": [], "no archive": []}
    for i in range(args.rounds):
        order = ["archive", "no archive"] if i % 2 == 0 else ["no archive", "archive"]
        for variant in order:
            with tempfile.TemporaryDirectory() as home:
                out = subprocess.run(
                    [sys.executable, __file__, "--child", home, "yes" if variant == "archive" else "no"],
                    capture_output=True, text=True, check=True, cwd=REPO,
                )  # fmt: skip
            runs[variant].append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(f"round {i + 1} {variant}: {sum(runs[variant][-1].values()):.1f} s", file=sys.stderr)
    print(f"archive: {archive} ({archive.stat().st_size / 1e6:.0f} MB); medians of {args.rounds} runs each\n")
    print("| step | class archive: s | none: s | ratio |\n| --- | ---: | ---: | ---: |")
    for step in [*STEPS, "total"]:
        a, b = (
            statistics.median(sum(r.values()) if step == "total" else r[step] for r in runs[v])
            for v in ("archive", "no archive")
        )
        print(f"| {step} | {a:.2f} | {b:.2f} | {a / b:.2f} |")


if __name__ == "__main__":
    main()
