"""Ingestion and gold-feature throughput on a simulated history (default ~1M impressions).

    python bench/bench_pipeline.py [--users 7000] [--days 28]

Prints one table: rows in, seconds, rows/s per stage. Uses a throwaway TURNOUT_HOME.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from conf import load_settings
from pipelines.features.jobs import build_gold
from pipelines.ingest.run import build_silver, ingest_bronze
from pipelines.simulator import SimulationConfig, simulate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=7000)
    parser.add_argument("--days", type=int, default=28)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    home = Path(tempfile.mkdtemp(prefix="turnout-bench-"))
    settings = load_settings("local", home=home, environ={})
    config = SimulationConfig(users=args.users, days=args.days)

    rows: list[tuple[str, int, float]] = []
    t = time.perf_counter()
    summary = simulate(config, Path(settings.landing.root), home / "simulator")
    lines = sum(e.lines_written for e in summary.entities.values())
    rows.append(("simulate (landing lines)", lines, time.perf_counter() - t))

    t = time.perf_counter()
    ingest_bronze(settings, None, None, run_id="bench")
    rows.append(("landing -> bronze (lines)", lines, time.perf_counter() - t))
    t = time.perf_counter()
    silver = build_silver(settings, None, None, run_id="bench")
    silver_rows = sum(v["rows"] for v in silver["tables"].values())
    rows.append(("bronze -> silver (rows)", silver_rows, time.perf_counter() - t))

    end = datetime.fromisoformat(summary.delivered_last.replace("Z", "+00:00")) + timedelta(hours=1)
    t = time.perf_counter()
    gold = build_gold(settings, None, end.astimezone(UTC), run_id="bench")
    gold_rows = sum(v["inserted"] for v in gold["tables"].values())
    rows.append(("silver -> gold (gold rows written)", gold_rows, time.perf_counter() - t))

    impressions = summary.entities["impressions"].generated
    print(f"\npipeline throughput, {args.users} users x {args.days} days ({impressions:,} impressions)\n")
    print(f"| {'stage':36} | {'rows':>10} | {'seconds':>8} | {'rows/s':>9} |")
    print(f"| {'-' * 36} | {'-' * 10} | {'-' * 8} | {'-' * 9} |")
    for name, n, s in rows:
        print(f"| {name:36} | {n:>10,} | {s:>8.1f} | {n / s:>9,.0f} |")


if __name__ == "__main__":
    main()
