"""Benchmark the feature store as serving will use it: materialization throughput and online reads.

    .venv/bin/python bench/bench_features.py [--users 20000] [--events 20000] [--redis redis://127.0.0.1:6390/0]
    .venv/bin/python bench/bench_features.py --history [--users 7000] [--days 28] [--home /tmp/bench]

By default writes synthetic gold tables (the gold contract's columns, Spark-generated) under a
throwaway ``TURNOUT_HOME``. ``--history`` instead simulates ``--users`` x ``--days`` and builds the
real gold tables from it with ``bench_pipeline.build_history`` (simulate -> bronze -> silver ->
gold; 7,000 x 28 is the ~1M-impression history), and ``--from-lake`` reuses a home built that way
(or by ``make demo``). On a simulated history the store is materialized as of the simulated
window's end (the history's "now"), and ``gold.event_embeddings``, which the index stage would
write, gets random vectors for the events the index stage would embed.

Then it applies ``features/``, materializes to SQLite (and Redis when a URL is given, default
``$TURNOUT_TEST_REDIS_URL``) and times online reads two ways:

* **Feast SDK**: ``FeatureStore.get_online_features`` (what a Feast-based server does per request);
* **raw**: the same rows read straight from the store (``sqlite3`` / a pipelined Redis ``HMGET``),
  as bytes, and then also decoded from Feast's protobuf values into Python (what a hand-rolled
  serving path would do).

for 1 user row (``user_features``) and for 15,000 event rows (the event-side views of
``p_rsvp_v1``: ``event_features``, ``event_dynamics``, ``event_embeddings``). A history with fewer
than 15,000 events is read whole, and then once more padded to 15,000 with copies of its own
online rows under new ids (written with ``write_to_online_store``); the report says which.
Prints the tables.
"""

from __future__ import annotations

import argparse
import json
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

import numpy as np

from features.services import p_rsvp_v1

log = logging.getLogger("bench_features")

END = datetime(2026, 3, 9, tzinfo=UTC)
CANDIDATES = 15_000
# The event views p_rsvp_v1 reads, with the features it reads from each (features/services.py).
EVENT_VIEWS = {
    p.name: [f.name for f in p.features]
    for p in p_rsvp_v1.feature_view_projections
    if p.name in ("event_features", "event_dynamics", "event_embeddings")
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


def history_end(home: Path) -> datetime | None:
    """The simulated window's end of a home built from the simulator (None: not one)."""
    manifest = home / "simulator" / "manifest.json"
    if not manifest.exists():
        return None
    return datetime.fromisoformat(json.loads(manifest.read_text())["window_end"]).astimezone(UTC)


def add_random_embeddings(settings: Any, end: datetime) -> int:
    """``gold.event_embeddings`` for the events the index stage would embed at ``end``, with random
    unit vectors instead of the content tower's (the read cost depends only on their size)."""
    from pipelines.index.embeddings import events_to_embed, merge_embeddings
    from pipelines.spark import get_spark

    spark = get_spark(settings)
    events = events_to_embed(spark, settings, "bench-random", end)
    vectors = np.random.default_rng(7).normal(size=(len(events), settings.index.embedding_dim))
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return merge_embeddings(spark, settings, events, vectors.astype(np.float32), "bench-random", end, end)


def gold_ids(settings: Any, table: str, key: str, end: datetime) -> list[str]:
    """Every ``key`` with a row in ``gold.<table>`` by ``end``, sorted."""
    from pyspark.sql import functions as F

    from pipelines.spark import get_spark

    frame = get_spark(settings).read.format("delta").load(settings.lake.table_path("gold", table))
    known = frame.where(F.col("event_timestamp") <= F.lit(end.replace(tzinfo=None)))
    return sorted(r[0] for r in known.select(key).distinct().collect())


def pad_online_events(
    settings: Any, store: Any, event_ids: list[str], end: datetime, total: int
) -> list[str]:
    """Copy the online rows of ``event_ids`` under new ids until ``total`` events exist; return all ids.

    Each copy gets, per event view, exactly the row materialization wrote for its source event
    (the newest in the view's TTL window), so the padded store has the real mix of present and
    absent views per event.
    """
    import pandas as pd
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from pipelines.features.definitions import gold_source_of
    from pipelines.spark import get_spark

    spark = get_spark(settings)
    copies = [(src, f"{src}~{n // len(event_ids) + 1}") for n, src in enumerate(event_ids * 99)]
    copies = copies[: total - len(event_ids)]
    mapping = pd.DataFrame(copies, columns=["source_id", "copy_id"])
    for view_name in EVENT_VIEWS:
        view = store.get_feature_view(view_name)
        if view.most_recent_end_time is None:
            continue  # not materialized (no gold table): absent for the real events too
        columns = ["event_id", *(f.name for f in view.features), "event_timestamp", "created"]
        newest = Window.partitionBy("event_id").orderBy(
            F.col("event_timestamp").desc(), F.col("created").desc()
        )
        rows = (
            spark.read.format("delta")
            .load(gold_source_of(view).path)
            .where(F.col("event_timestamp").between(end - view.ttl, end))
            .withColumn("_n", F.row_number().over(newest))
            .where("_n = 1")
            .select(*columns)
            .toPandas()
        )
        frame = mapping.merge(rows, left_on="source_id", right_on="event_id")
        frame = frame.drop(columns=["source_id", "event_id"]).rename(columns={"copy_id": "event_id"})
        for stamp in ("event_timestamp", "created"):
            frame[stamp] = pd.to_datetime(frame[stamp], utc=True)
        store.write_to_online_store(view_name, df=frame)
        log.info("online %s: %d copied rows", view_name, len(frame))
    return event_ids + [c for _, c in copies]


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
    name: str,
    settings: Any,
    end: datetime,
    user_ids: list[str],
    event_ids: list[str],
    reps: int,
    redis_url: str | None,
) -> tuple[dict[str, Any], dict[str, tuple[float, float]]]:
    from features.views import AFFINITY_FEATURES
    from pipelines.feast_store import get_store
    from pipelines.features.definitions import apply_definitions
    from pipelines.features.materialize import materialize

    apply_definitions(settings)
    report = materialize(settings, end, lookback=timedelta(0))
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

    def sdk_user() -> Any:
        rows = [{"user_id": rng.choice(user_ids)}]
        return store.get_online_features(features=user_refs, entity_rows=rows).to_dict()

    latency = {
        "1 user row, Feast SDK": timed(sdk_user, reps),
        "1 user row, raw fetch (bytes)": timed(lambda: fetch_user([rng.choice(user_ids)]), reps),
        "1 user row, raw fetch + decode": timed(lambda: read_user([rng.choice(user_ids)]), reps),
    }

    def event_reads(candidates: list[str], label: str) -> None:
        def sdk_events() -> Any:
            rows = [{"event_id": e} for e in candidates]
            return store.get_online_features(features=event_refs, entity_rows=rows).to_dict()

        served = sdk_events()
        assert len(served["rsvp_count"]) == len(candidates)
        assert any(v is not None for v in served["capacity"]), "no event features online"
        few = max(5, reps // 20)
        latency[f"{label}, Feast SDK"] = timed(sdk_events, few)
        latency[f"{label}, raw fetch (bytes)"] = timed(lambda: [r(candidates) for r in fetch_events], few)
        latency[f"{label}, raw fetch + decode"] = timed(lambda: [r(candidates) for r in read_events], few)

    if len(event_ids) >= CANDIDATES:
        event_reads(rng.sample(event_ids, CANDIDATES), f"{CANDIDATES:,} event rows")
    else:
        event_reads(event_ids, f"{len(event_ids):,} event rows (every event)")
        padded = pad_online_events(settings, store, event_ids, end, CANDIDATES)
        event_reads(padded, f"{CANDIDATES:,} event rows ({len(event_ids):,} + copies)")
    return report, latency


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--users", type=int, help="synthetic user rows (20,000), or simulated users (7,000)")
    parser.add_argument("--events", type=int, default=20_000, help="synthetic event rows")
    parser.add_argument("--versions", type=int, default=3, help="rows per key in each synthetic gold table")
    parser.add_argument("--history", action="store_true", help="simulate a history and build real gold")
    parser.add_argument("--days", type=int, default=28, help="simulated days (with --history)")
    parser.add_argument("--reps", type=int, default=200, help="timed reads of 1 row (15k rows: reps/20)")
    parser.add_argument(
        "--redis", default=os.environ.get("TURNOUT_TEST_REDIS_URL"), help="redis://host:port/db"
    )
    parser.add_argument("--home", type=Path, help="TURNOUT_HOME to build in (default: a new temp dir)")
    parser.add_argument("--from-lake", type=Path, help="an existing TURNOUT_HOME with gold tables")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("py4j", "feast", "great_expectations"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=".*is an experimental feature", category=RuntimeWarning)

    from conf import load_settings
    from pipelines import feast_store  # noqa: F401  # imports Feast, which resets warning filters

    warnings.filterwarnings("ignore", message=".*is an experimental feature", category=RuntimeWarning)
    home = args.from_lake or args.home or Path(tempfile.mkdtemp(prefix="turnout-bench-"))
    base = load_settings("local", home=home)
    heading: list[str] = []
    if args.history:
        from bench_pipeline import build_history, stage_table

        users = args.users or 7000
        summary, stages = build_history(base, users, args.days)
        impressions = summary.entities["impressions"].generated
        heading += [f"history: {users} users x {args.days} days, {impressions:,} impressions", ""]
        heading += [stage_table(stages), ""]
    end = history_end(home)
    if end is None:
        users = args.users or 20_000
        end = END
        if args.from_lake:
            heading.append(f"gold rows: from {home}")
        else:
            gold = write_synthetic_gold(base, users, args.events, args.versions)
            heading.append(f"gold rows (synthetic): {gold}")
        user_ids = [f"u{i}" for i in range(users)]
        event_ids = [f"e{i}" for i in range(args.events)]
    else:
        embedded = add_random_embeddings(base, end)
        user_ids = gold_ids(base, "user_features", "user_id", end)
        event_ids = gold_ids(base, "event_features", "event_id", end)
        heading.append(
            f"simulated history in {home}, materialized as of {end:%Y-%m-%dT%H:%MZ}: "
            f"{len(user_ids):,} users, {len(event_ids):,} events in gold "
            f"(+{embedded:,} random embeddings)"
        )
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
            name, settings, end, user_ids, event_ids, args.reps, args.redis
        )

    if args.redis:
        import redis

        client = redis.Redis.from_url(args.redis)
        project = backends["redis"].feast.project
        for key in client.scan_iter(match=f"*{project}".encode(), count=10_000):
            client.delete(key)

    lines = ["", *heading, "", "materialization (rows = keys written)", ""]
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
