"""Materialization of a built home's gold to a fresh online store, once per engine and offline store.

    python bench/bench_materialize.py --home .turnout [--end 2026-11-09T00:00Z]
        [--engines feast columnar] [--stores sorted] [--online sqlite|redis --redis-url URL]

``--home`` is a TURNOUT_HOME with gold built (``make demo`` builds one). Its gold is left alone:
each run applies the feature definitions to a registry and online store of its own (under
``--scratch``; in Redis, a project of its own) and materializes every view up to ``--end`` with
``pipelines.features.materialize``, so each starts from nothing online, after one untimed run
that warms the JVM up. Runs are every ``--engines`` x ``--stores`` pair: Feast's local compute
engine (``feast``) or turnout's (``columnar``, ``pipelines/online_write.py``), over Feast's stock
Spark offline store (``stock``) or turnout's sorted one, ``--repeat`` times in alternating order
(the median shown). Every run must leave the same bytes online (checked, printed) and report the
same rows per view.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sqlite3
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from bench.bench_training import STORES
from conf import Settings, load_settings
from contracts.instants import parse_instant

ENGINES = {"feast": "local", "columnar": "pipelines.online_write.ColumnarComputeEngine"}


def scratch_settings(
    settings: Settings, engine: str, store: str, scratch: Path, redis_url: str | None = None
) -> Settings:
    """The home's lake, with a registry and online store (or Redis project) of its own."""
    run = scratch / f"{engine}-{store}"
    online: dict[str, str] = {"type": "sqlite", "path": str(run / "online.db")}
    if redis_url:
        url = urlparse(redis_url)
        db = (url.path or "/0").lstrip("/") or "0"
        online = {"type": "redis", "connection_string": f"{url.hostname}:{url.port or 6379},db={db}"}
    feast = settings.feast.model_copy(
        update={
            "project": f"bench_{engine}_{store}_{uuid.uuid4().hex[:6]}",
            "batch_engine": ENGINES[engine],
            "offline_store": STORES[store],
            "registry": str(run / "registry.db"),
            "online_store": online,
        }
    )
    return settings.model_copy(update={"feast": feast})


def online_contents(settings: Settings, redis_url: str | None) -> dict[Any, Any]:
    """What the run left online, as stored (Redis: its project's keys, deleted once read)."""
    project = settings.feast.project
    if not redis_url:
        with sqlite3.connect(settings.feast.online_store["path"]) as db:
            tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
            return {t.removeprefix(project): sorted(db.execute(f'SELECT * FROM "{t}"')) for t in tables}
    import redis

    client = redis.Redis.from_url(redis_url)
    keys = list(client.scan_iter(match=f"*{project}".encode(), count=10_000))
    contents = {k.removesuffix(project.encode()): client.hgetall(k) for k in keys}
    for start in range(0, len(keys), 10_000):
        client.delete(*keys[start : start + 10_000])
    return contents


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
    parser.add_argument("--engines", nargs="+", default=list(ENGINES), choices=list(ENGINES))
    parser.add_argument("--stores", nargs="+", default=["sorted"], choices=list(STORES))
    parser.add_argument("--repeat", type=int, default=3, help="timed runs of each pair (median shown)")
    parser.add_argument("--online", choices=["sqlite", "redis"], default="sqlite")
    parser.add_argument("--redis-url", help="redis://host:port/db, with --online redis")
    parser.add_argument(
        "--scratch", type=Path, help="where the registries and online stores go (default: a temp dir)"
    )
    args = parser.parse_args()
    if (args.online == "redis") != bool(args.redis_url):
        parser.error("--online redis needs --redis-url (and --redis-url needs --online redis)")
    logging.basicConfig(level=logging.WARNING)
    settings = load_settings(home=args.home)
    scratch = args.scratch or Path(tempfile.mkdtemp(prefix="bench-materialize-"))
    end = parse_instant(args.end)
    from pipelines.spark import get_spark

    get_spark(settings)  # started once, outside the timings
    # The first materialization in a JVM pays its warm-up (~15 s here, whichever run goes
    # first): one untimed run, so the runs are compared warm.
    warm = scratch_settings(settings, args.engines[0], args.stores[0], scratch / "warm-up", args.redis_url)
    run(warm, end)
    online_contents(warm, args.redis_url)
    pairs = [(engine, store) for engine in args.engines for store in args.stores]
    timed: dict[str, list[dict[str, Any]]] = {f"{e} / {s}": [] for e, s in pairs}
    contents = {}
    for repeat in range(args.repeat):
        # Alternating order: a JVM still warms up over the first runs, whichever goes first.
        for engine, store in pairs if repeat % 2 == 0 else reversed(pairs):
            these = scratch_settings(settings, engine, store, scratch / str(repeat), args.redis_url)
            timed[f"{engine} / {store}"].append(run(these, end))
            contents[f"{engine} / {store}", repeat] = online_contents(these, args.redis_url)
    # Per run, the repeat with the median total; its views' seconds are that repeat's.
    results = {name: sorted(runs, key=lambda r: r["s"])[len(runs) // 2] for name, runs in timed.items()}
    views = sorted(next(iter(results.values()))["views"])
    print(
        f"materialized {args.home} up to {args.end} ({args.online}), every view from nothing online;"
        f" the median of {args.repeat} repeats, alternating order"
    )
    print("| view | rows | " + " | ".join(f"{r}: s" for r in results) + " |")
    print("| --- | ---: | " + " | ".join("---:" for _ in results) + " |")
    for view in views:
        rows = next(iter(results.values()))["views"][view]["rows"]
        cells = [f"{r['views'][view]['seconds']:.1f}" for r in results.values()]
        print(f"| {view} | {rows:,} | " + " | ".join(cells) + " |")
    rows = next(iter(results.values()))["rows"]
    print(
        f"| **all views** | **{rows:,}** | "
        + " | ".join(f"**{r['s']:.1f}**" for r in results.values())
        + " |"
    )
    print("| rows/s | | " + " | ".join(f"{r['rows'] / r['s']:,.0f}" for r in results.values()) + " |")
    for name, runs in timed.items():
        print(f"{name}: totals " + ", ".join(f"{r['s']:.1f}" for r in runs) + " s")
    counts = {tuple(r["views"][v]["rows"] for v in views) for runs in timed.values() for r in runs}
    print("row counts equal across runs:", len(counts) == 1)
    first = next(iter(contents.values()))
    print("online contents equal across runs:", all(c == first for c in contents.values()))
    if not args.scratch:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
