"""Ingestion and gold-feature throughput on a simulated history (default ~1M impressions).

    python bench/bench_pipeline.py [--users 7000] [--days 28]

Prints one table: rows in, seconds, rows/s per stage. Uses a throwaway TURNOUT_HOME.
``build_history`` is also what ``bench_features.py --history`` builds its gold tables with.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from datetime import UTC, timedelta
from pathlib import Path

from conf import Settings, load_settings
from contracts.instants import parse_instant
from pipelines.features.jobs import build_gold
from pipelines.ingest.run import build_silver, ingest_bronze
from simulator import SimulationConfig, SimulationSummary, simulate

Stage = tuple[str, int, float]


def build_history(settings: Settings, users: int, days: int) -> tuple[SimulationSummary, list[Stage]]:
    """Simulate ``users`` x ``days`` into ``settings.home``, ingest it, build gold; time each stage."""
    config = SimulationConfig(users=users, days=days)
    stages: list[Stage] = []
    t = time.perf_counter()
    summary = simulate(config, Path(settings.landing.root), settings.home / "simulator")
    lines = sum(e.lines_written for e in summary.entities.values())
    stages.append(("simulate (landing lines)", lines, time.perf_counter() - t))

    t = time.perf_counter()
    ingest_bronze(settings, None, None, run_id="bench")
    stages.append(("landing -> bronze (lines)", lines, time.perf_counter() - t))
    t = time.perf_counter()
    silver = build_silver(settings, None, None, run_id="bench")
    silver_rows = sum(v["rows"] for v in silver["tables"].values())
    stages.append(("bronze -> silver (rows)", silver_rows, time.perf_counter() - t))

    end = parse_instant(summary.delivered_last) + timedelta(hours=1)
    t = time.perf_counter()
    gold = build_gold(settings, None, end.astimezone(UTC), run_id="bench")
    gold_rows = sum(v["inserted"] for v in gold["tables"].values())
    stages.append(("silver -> gold (gold rows written)", gold_rows, time.perf_counter() - t))
    return summary, stages


def stage_table(stages: list[Stage]) -> str:
    lines = [f"| {'stage':36} | {'rows':>10} | {'seconds':>8} | {'rows/s':>9} |"]
    lines.append(f"| {'-' * 36} | {'-' * 10} | {'-' * 8} | {'-' * 9} |")
    for name, n, s in stages:
        lines.append(f"| {name:36} | {n:>10,} | {s:>8.1f} | {n / s:>9,.0f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=7000)
    parser.add_argument("--days", type=int, default=28)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    home = Path(tempfile.mkdtemp(prefix="turnout-bench-"))
    settings = load_settings("local", home=home, environ={})
    summary, stages = build_history(settings, args.users, args.days)

    impressions = summary.entities["impressions"].generated
    print(f"\npipeline throughput, {args.users} users x {args.days} days ({impressions:,} impressions)\n")
    print(stage_table(stages))


if __name__ == "__main__":
    main()
