"""Benchmark the feature store as serving will use it: materialization throughput and online reads.

    .venv/bin/python bench/bench_features.py [--users 20000] [--events 20000] [--redis redis://127.0.0.1:6390/0]

Writes synthetic gold tables (the gold contract's columns, Spark-generated) under a throwaway
``TURNOUT_HOME`` unless ``--from-lake`` points at an existing one (e.g. after ``make demo``), applies
``features/``, materializes to SQLite (and Redis when a URL is given, default
``$TURNOUT_TEST_REDIS_URL``), then times online reads two ways:

* **Feast SDK**: ``FeatureStore.get_online_features`` (what a Feast-based server does per request);
* **raw**: the same rows read straight from the store (``sqlite3`` / a pipelined Redis ``HMGET``),
  as bytes, and then also decoded from Feast's protobuf values into Python (what a hand-rolled
  serving path would do).

for 1 user row (``user_features``) and for 15,000 event rows (the event-side views of
``p_rsvp_v1``: ``event_features``, ``event_dynamics``, ``event_embeddings``). Prints two tables.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import sqlite3
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

log = logging.getLogger("bench_features")

END = datetime(2026, 3, 9, tzinfo=UTC)
EVENT_VIEWS = {
    "event_features": [
        "is_free",
        "price_cents",
        "capacity",
        "hour_of_week",
        "week_of_year",
        "days_to_nearest_holiday",
    ],
    "event_dynamics": ["rsvp_count", "fill_rate", "rsvp_velocity_6h"],
    "event_embeddings": ["embedding"],
}


def write_synthetic_gold(settings: Any, users: int, events: int, versions: int) -> dict[str, int]:
    """Gold tables for the views the reads touch, generated in Spark (versions per key, spread over a week)."""
    from pyspark.sql import functions as F

    from features.views import AFFINITY_FEATURES
    from pipelines.spark import get_spark

    spark = get_spark(settings)
    week = 7 * 86400

    def stamped(n: int, key: str, prefix: str) -> Any:
        frame = spark.range(n * versions).withColumn(
            key, F.concat(F.lit(prefix), (F.col("id") % n).cast("string"))
        )
        ts = F.timestamp_seconds(F.lit(int(END.timestamp()) - week) + (F.rand(7) * week).cast("long"))
        return frame.withColumn("event_timestamp", ts).withColumn("created", F.col("event_timestamp"))

    users_df = stamped(users, "user_id", "u").select(
        "user_id",
        F.lit("sf").alias("metro"),
        (37.7 + F.rand(1) * 0.2).alias("home_lat"),
        (-122.5 + F.rand(2) * 0.2).alias("home_lng"),
        F.lit("872830828ffffff").alias("home_cell7"),
        (F.rand(3) * 40).cast("long").alias("history_depth"),
        (F.rand(4) * 10).cast("long").alias("attended_count"),
        F.rand(5).alias("attend_rate_shrunk"),
        (F.rand(6) * 30).alias("travel_tolerance_km"),
        (F.rand(8) > 0.5).cast("long").alias("onboarded"),
        *[(F.rand(10 + i) / 16).alias(name) for i, name in enumerate(AFFINITY_FEATURES)],
        "event_timestamp",
        "created",
    )
    events_df = stamped(events, "event_id", "e").select(
        "event_id",
        F.lit("o1").alias("organizer_id"),
        F.lit("v1").alias("venue_id"),
        F.lit(None).cast("string").alias("series_id"),
        F.lit("sf").alias("metro"),
        F.lit("music").alias("category"),
        (F.rand(1) > 0.5).cast("long").alias("is_free"),
        (F.rand(2) * 5000).cast("long").alias("price_cents"),
        (10 + F.rand(3) * 500).cast("long").alias("capacity"),
        (F.lit(END.timestamp()) + F.rand(4) * 21 * 86400).alias("start_ts"),
        (F.rand(5) * 168).cast("long").alias("hour_of_week"),
        (1 + F.rand(6) * 52).cast("long").alias("week_of_year"),
        (F.rand(7) * 60).cast("long").alias("days_to_nearest_holiday"),
        (37.7 + F.rand(8) * 0.2).alias("venue_lat"),
        (-122.5 + F.rand(9) * 0.2).alias("venue_lng"),
        F.lit("85283083fffffff").alias("cell5"),
        F.lit("872830828ffffff").alias("cell7"),
        F.lit("sf|music|100").alias("market_key"),
        "event_timestamp",
        "created",
    )
    dynamics_df = stamped(events, "event_id", "e").select(
        "event_id",
        (F.rand(1) * 300).cast("long").alias("rsvp_count"),
        F.rand(2).alias("fill_rate"),
        (F.rand(3) * 5).alias("rsvp_velocity_6h"),
        "event_timestamp",
        "created",
    )
    embeddings_df = stamped(events, "event_id", "e").select(
        "event_id",
        F.lit("t1").alias("tower_version"),
        F.array(*[(F.rand(100 + i) * 2 - 1).cast("float") for i in range(64)]).alias("embedding"),
        "event_timestamp",
        "created",
    )
    counts = {}
    for table, frame in (
        ("user_features", users_df),
        ("event_features", events_df),
        ("event_dynamics", dynamics_df),
        ("event_embeddings", embeddings_df),
    ):
        frame.write.format("delta").mode("overwrite").save(settings.lake.table_path("gold", table))
        counts[table] = frame.count()
        log.info("gold.%s: %d rows", table, counts[table])
    return counts


def percentiles(samples: list[float]) -> tuple[float, float]:
    """p50 and p99 in milliseconds."""
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return statistics.median(ordered) * 1000, p99 * 1000


def timed(fn: Callable[[], Any], reps: int, warmup: int = 2) -> tuple[float, float]:
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(reps):
        started = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - started)
    return percentiles(samples)


def _entity_key(join_key: str, value: str) -> Any:
    from feast.protos.feast.types.EntityKey_pb2 import EntityKey
    from feast.protos.feast.types.Value_pb2 import Value

    return EntityKey(join_keys=[join_key], entity_values=[Value(string_val=value)])


def _decode(blob: bytes) -> Any:
    from feast.protos.feast.types.Value_pb2 import Value
    from feast.type_map import feast_value_type_to_python_type

    value = Value()
    value.ParseFromString(blob)
    return feast_value_type_to_python_type(value)


def sqlite_reader(
    settings: Any, view: str, features: list[str], join_key: str, decode: bool
) -> Callable[[list[str]], Any]:
    """Raw read of ``features`` of ``view`` for entity ids (decoded or as bytes): one query per view."""
    from feast.infra.key_encoding_utils import serialize_entity_key

    connection = sqlite3.connect(settings.feast.online_store["path"], check_same_thread=False)
    table = f"{settings.feast.project}_{view}"
    wanted = set(features)

    def read(ids: list[str]) -> dict[bytes, dict[str, Any]]:
        keys = [
            serialize_entity_key(_entity_key(join_key, i), entity_key_serialization_version=3) for i in ids
        ]
        out: dict[bytes, dict[str, Any]] = {}
        for start in range(0, len(keys), 30_000):  # SQLite's bound-parameter limit is 32,766
            chunk = keys[start : start + 30_000]
            rows = connection.execute(
                f'SELECT entity_key, feature_name, value FROM "{table}" '
                f"WHERE entity_key IN ({','.join('?' * len(chunk))})",
                chunk,
            )
            for key, name, blob in rows:
                if name in wanted:
                    out.setdefault(key, {})[name] = _decode(blob) if decode else blob
        return out

    return read


def redis_reader(
    url: str, settings: Any, view: str, features: list[str], join_key: str, decode: bool
) -> Callable[[list[str]], Any]:
    """Raw read through one pipelined HMGET per entity, as Feast lays the hash out."""
    import redis
    from feast.infra.online_stores.helpers import _mmh3, _redis_key

    client = redis.Redis.from_url(url)
    fields = [_mmh3(f"{view}:{name}") for name in features]
    project = settings.feast.project

    def read(ids: list[str]) -> list[dict[str, Any]]:
        with client.pipeline(transaction=False) as pipe:
            for i in ids:
                pipe.hmget(_redis_key(project, _entity_key(join_key, i), 3), fields)  # type: ignore[arg-type]  # bytes keys work
            replies = pipe.execute()
        if not decode:
            return replies
        return [
            {name: _decode(blob) for name, blob in zip(features, reply, strict=True) if blob is not None}
            for reply in replies
        ]

    return read


def bench_backend(
    name: str, settings: Any, users: int, events: int, reps: int, redis_url: str | None
) -> tuple[dict[str, Any], dict[str, tuple[float, float]]]:
    from features.views import AFFINITY_FEATURES
    from pipelines.features.store import apply_definitions, get_store, materialize

    apply_definitions(settings)
    report = materialize(settings, END, lookback=timedelta(0))
    store = get_store(settings)
    rng = random.Random(1)
    user_features = [
        "history_depth",
        "attended_count",
        "attend_rate_shrunk",
        "travel_tolerance_km",
        "onboarded",
    ]
    user_features += list(AFFINITY_FEATURES)
    user_refs = [f"user_features:{f}" for f in user_features]
    event_refs = [f"{view}:{f}" for view, names in EVENT_VIEWS.items() for f in names]
    candidates = [f"e{i}" for i in rng.sample(range(events), min(15_000, events))]

    def sdk_user() -> Any:
        user = f"u{rng.randrange(users)}"
        return store.get_online_features(features=user_refs, entity_rows=[{"user_id": user}]).to_dict()

    def sdk_events() -> Any:
        rows = [{"event_id": e} for e in candidates]
        return store.get_online_features(features=event_refs, entity_rows=rows).to_dict()

    def readers(decode: bool) -> tuple[Callable[[list[str]], Any], list[Callable[[list[str]], Any]]]:
        if name == "sqlite":
            user = sqlite_reader(settings, "user_features", user_features, "user_id", decode)
            events = [sqlite_reader(settings, v, f, "event_id", decode) for v, f in EVENT_VIEWS.items()]
        else:
            assert redis_url is not None
            user = redis_reader(redis_url, settings, "user_features", user_features, "user_id", decode)
            events = [
                redis_reader(redis_url, settings, v, f, "event_id", decode) for v, f in EVENT_VIEWS.items()
            ]
        return user, events

    fetch_user, fetch_events = readers(decode=False)
    read_user, read_events = readers(decode=True)

    assert len(sdk_events()["rsvp_count"]) == len(candidates)
    n = f"{len(candidates):,}"
    few = max(5, reps // 20)
    latency = {
        "1 user row, Feast SDK": timed(sdk_user, reps),
        "1 user row, raw fetch (bytes)": timed(lambda: fetch_user([f"u{rng.randrange(users)}"]), reps),
        "1 user row, raw fetch + decode": timed(lambda: read_user([f"u{rng.randrange(users)}"]), reps),
        f"{n} event rows, Feast SDK": timed(sdk_events, few),
        f"{n} event rows, raw fetch (bytes)": timed(lambda: [r(candidates) for r in fetch_events], few),
        f"{n} event rows, raw fetch + decode": timed(lambda: [r(candidates) for r in read_events], few),
    }
    return report, latency


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--users", type=int, default=20_000)
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--versions", type=int, default=3, help="rows per key in each gold table")
    parser.add_argument("--reps", type=int, default=200, help="timed reads of 1 row (15k rows: reps/20)")
    parser.add_argument(
        "--redis", default=os.environ.get("TURNOUT_TEST_REDIS_URL"), help="redis://host:port/db"
    )
    parser.add_argument("--from-lake", type=Path, help="an existing TURNOUT_HOME with gold tables")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("py4j", "feast", "great_expectations"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=".*is an experimental feature", category=RuntimeWarning)

    from conf import load_settings
    from pipelines.features import store  # noqa: F401  # imports Feast, which resets warning filters

    warnings.filterwarnings("ignore", message=".*is an experimental feature", category=RuntimeWarning)
    home = args.from_lake or Path(tempfile.mkdtemp(prefix="turnout-bench-"))
    base = load_settings("local", home=home)
    gold = {} if args.from_lake else write_synthetic_gold(base, args.users, args.events, args.versions)
    backends = {"sqlite": base}
    if args.redis:
        parsed = urlparse(args.redis)
        online = {"type": "redis", "connection_string": f"{parsed.hostname}:{parsed.port or 6379}"}
        feast = base.feast.model_copy(
            update={
                # A fresh project per run: Redis skips writes not newer than what it holds, so
                # keys left by an earlier run of the same data would turn writes into no-ops.
                "project": f"turnout_bench_{os.getpid()}",
                "registry": str(home / "feast-redis" / "registry.db"),
                "online_store": online,
            }
        )
        backends["redis"] = base.model_copy(update={"feast": feast})

    throughput: dict[str, dict[str, Any]] = {}
    latency: dict[str, dict[str, tuple[float, float]]] = {}
    for name, settings in backends.items():
        log.info("benchmarking %s", name)
        throughput[name], latency[name] = bench_backend(
            name, settings, args.users, args.events, args.reps, args.redis
        )

    if args.redis:
        import redis

        client = redis.Redis.from_url(args.redis)
        project = backends["redis"].feast.project
        for key in client.scan_iter(match=f"*{project}".encode(), count=10_000):
            client.delete(key)

    lines = ["", f"gold rows: {gold or 'from ' + str(home)}", "", "materialization (rows = keys written)", ""]
    lines.append("| view | " + " | ".join(f"{b} rows | {b} s | {b} rows/s" for b in backends) + " |")
    lines.append("|---" * (1 + 3 * len(backends)) + "|")
    views = sorted(v for v, r in throughput["sqlite"]["views"].items() if r["status"] == "materialized")
    for view in views:
        cells = []
        for b in backends:
            r = throughput[b]["views"][view]
            cells += [f"{r['rows']:,}", f"{r['seconds']:.1f}", f"{r['rows_per_s']:,.0f}"]
        lines.append(f"| {view} | " + " | ".join(cells) + " |")
    lines += ["", "online read latency, ms (p50 / p99)", ""]
    lines.append("| read | " + " | ".join(backends) + " |")
    lines.append("|---" * (1 + len(backends)) + "|")
    for metric in latency["sqlite"]:
        cells = [f"{latency[b][metric][0]:.2f} / {latency[b][metric][1]:.2f}" for b in backends]
        lines.append(f"| {metric} | " + " | ".join(cells) + " |")
    print("\n".join(lines))  # the report is for people; everything else went to the log


if __name__ == "__main__":
    main()
