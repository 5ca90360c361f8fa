"""Materialization of a built home's gold to a fresh online store, once per offline store.

    python bench/bench_materialize.py --home .turnout [--end 2026-11-09T00:00Z] [--stores stock sorted]

``--home`` is a TURNOUT_HOME with gold built (``make demo`` builds one). Its gold is left alone:
each run applies the feature definitions to a registry and SQLite online store of its own (under
``--scratch``) and materializes every view up to ``--end`` with ``pipelines.features.materialize``,
so each starts from nothing online, after one untimed run that warms the JVM up. With Feast's
stock Spark store the report's row counts come from a second Spark job per view (a distinct count
of the window's keys); the sorted store counts the rows Feast's own pull returned. Both must
report the same rows.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.bench_training import STORES
from conf import Settings, load_settings
from contracts.instants import parse_instant


def scratch_settings(settings: Settings, store: str, scratch: Path) -> Settings:
    """The home's lake, with a registry and online store of its own under ``scratch``."""
    feast = settings.feast.model_copy(
        update={
            "offline_store": STORES[store],
            "registry": str(scratch / store / "registry.db"),
            "online_store": {"type": "sqlite", "path": str(scratch / store / "online.db")},
        }
    )
    return settings.model_copy(update={"feast": feast})


def run(settings: Settings, end: Any) -> dict[str, Any]:
    from pipelines.features import definitions
    from pipelines.features.materialize import materialize

    definitions.apply_definitions(settings)
    t0 = time.perf_counter()
    report = materialize(settings, end)
    return {"s": time.perf_counter() - t0, **report}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--home", type=Path, required=True, help="TURNOUT_HOME with gold built")
    parser.add_argument("--end", default="2026-11-09T00:00Z", help="materialize up to this instant")
    parser.add_argument("--stores", nargs="+", default=["stock", "sorted"], choices=list(STORES))
    parser.add_argument(
        "--scratch", type=Path, help="where the registries and online stores go (default: a temp dir)"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    settings = load_settings(home=args.home)
    scratch = args.scratch or Path(tempfile.mkdtemp(prefix="bench-materialize-"))
    from pipelines.spark import get_spark

    get_spark(settings)  # started once, outside the timings
    # The first materialization in a JVM pays its warm-up (~15 s here, whichever store goes
    # first): one untimed run, so the stores are compared warm.
    run(scratch_settings(settings, args.stores[0], scratch / "warm-up"), parse_instant(args.end))
    results = {
        store: run(scratch_settings(settings, store, scratch), parse_instant(args.end))
        for store in args.stores
    }
    views = sorted(next(iter(results.values()))["views"])
    print(f"materialized {args.home} up to {args.end} (SQLite), every view from nothing online")
    print("| view | " + " | ".join(f"{s}: rows | {s}: s" for s in results) + " |")
    print("| --- | " + " | ".join("---: | ---:" for _ in results) + " |")
    for view in views:
        cells = [
            f"{r['views'][view]['rows']:,} | {r['views'][view]['seconds']:.1f}" for r in results.values()
        ]
        print(f"| {view} | " + " | ".join(cells) + " |")
    totals = [f"**{r['rows']:,}** | **{r['s']:.1f}**" for r in results.values()]
    print("| all views | " + " | ".join(totals) + " |")
    print("| rows/s | " + " | ".join(f"{r['rows'] / r['s']:,.0f} | " for r in results.values()) + " |")
    counts = {tuple(r["views"][v]["rows"] for v in views) for r in results.values()}
    print("row counts equal across stores:", len(counts) == 1)
    if not args.scratch:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
