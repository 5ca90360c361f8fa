"""Small gold Delta tables with exactly the columns the feature jobs write, for Feast tests.

The schemas are written out here from the gold contract (not derived from ``features/``), so a
test that reads them through Feast also checks the Feast declarations against the contract.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from conf import Settings
from contracts.landing import CATEGORIES
from pipelines.features.jobs import GOLD_KEYS

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_AFF = ", ".join(f"aff_{c} double" for c in CATEGORIES)
_STAMPS = "event_timestamp timestamp, created timestamp"

GOLD_DDL: dict[str, str] = {
    "user_features": (
        "user_id string, metro string, home_lat double, home_lng double, home_cell7 string, "
        "history_depth bigint, attended_count bigint, attend_rate_shrunk double, "
        f"travel_tolerance_km double, onboarded bigint, {_AFF}, {_STAMPS}"
    ),
    "event_features": (
        "event_id string, organizer_id string, venue_id string, series_id string, metro string, "
        "category string, is_free bigint, price_cents bigint, capacity bigint, start_ts double, "
        "hour_of_week bigint, week_of_year bigint, days_to_nearest_holiday bigint, venue_lat double, "
        f"venue_lng double, cell5 string, cell7 string, market_key string, {_STAMPS}"
    ),
    "event_dynamics": f"event_id string, rsvp_count bigint, fill_rate double, rsvp_velocity_6h double, {_STAMPS}",
    "organizer_stats": (
        "organizer_id string, org_event_count bigint, org_attend_rate double, org_noshow_rate double, "
        f"org_rating_mean double, org_rating_count bigint, {_STAMPS}"
    ),
    "venue_stats": (
        "venue_id string, venue_attend_rate double, venue_noshow_rate double, venue_rating_mean double, "
        f"venue_rating_count bigint, {_STAMPS}"
    ),
    "series_stats": (
        "series_id string, series_instances bigint, series_attend_rate double, series_noshow_rate double, "
        f"series_rating_mean double, {_STAMPS}"
    ),
    "market_rates": f"market_key string, market_rsvp_rate double, market_impressions bigint, {_STAMPS}",
    "social": f"user_id string, event_id string, friends_going bigint, friends_going_bucket bigint, {_STAMPS}",
    "event_embeddings": f"event_id string, tower_version string, embedding array<float>, {_STAMPS}",
}
GOLD_TABLES = tuple(GOLD_DDL)
T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)  # a Monday; every generated instant is after it


def _naive(t: datetime) -> datetime:
    # Spark reads naive datetimes in the session zone, which get_spark sets to UTC.
    return t.astimezone(UTC).replace(tzinfo=None)


def default_row(table: str, rng: random.Random, key: dict[str, str], ts: datetime) -> dict[str, Any]:
    """One plausible, contract-valid row of ``table`` for ``key`` at instant ``ts``."""
    row: dict[str, Any] = dict(key)
    if table == "user_features":
        depth = rng.randint(0, 40)
        affinities = [rng.random() for _ in CATEGORIES]
        total = sum(affinities)
        row |= {
            "metro": "sf",
            "home_lat": 37.77 + rng.uniform(-0.1, 0.1),
            "home_lng": -122.42 + rng.uniform(-0.1, 0.1),
            "home_cell7": "872830828ffffff",
            "history_depth": depth,
            "attended_count": rng.randint(0, depth),
            "attend_rate_shrunk": rng.random(),
            "travel_tolerance_km": rng.uniform(1, 30),
            "onboarded": rng.randint(0, 1),
            **{f"aff_{c}": a / total for c, a in zip(CATEGORIES, affinities, strict=True)},
        }
    elif table == "event_features":
        free = rng.randint(0, 1)
        hour = rng.randint(0, 167)
        category = rng.choice(CATEGORIES)
        row |= {
            "organizer_id": f"o{rng.randint(0, 5)}",
            "venue_id": f"v{rng.randint(0, 5)}",
            "series_id": rng.choice([None, f"s{rng.randint(0, 3)}"]),
            "metro": "sf",
            "category": category,
            "is_free": free,
            "price_cents": 0 if free else rng.randint(100, 9000),
            "capacity": rng.randint(10, 500),
            "start_ts": (ts + timedelta(days=rng.randint(1, 20))).timestamp(),
            "hour_of_week": hour,
            "week_of_year": rng.randint(1, 53),
            "days_to_nearest_holiday": rng.randint(0, 60),
            "venue_lat": 37.77 + rng.uniform(-0.3, 0.3),
            "venue_lng": -122.42 + rng.uniform(-0.3, 0.3),
            "cell5": "85283083fffffff",
            "cell7": "872830828ffffff",
            "market_key": f"sf|{category}|{hour}",
        }
    elif table == "event_dynamics":
        row |= {
            "rsvp_count": rng.randint(0, 300),
            "fill_rate": rng.random(),
            "rsvp_velocity_6h": rng.random() * 5,
        }
    elif table == "organizer_stats":
        row |= {
            "org_event_count": rng.randint(1, 50),
            "org_attend_rate": rng.random(),
            "org_noshow_rate": rng.random(),
            "org_rating_mean": rng.uniform(1, 5),
            "org_rating_count": rng.randint(0, 100),
        }
    elif table == "venue_stats":
        row |= {
            "venue_attend_rate": rng.random(),
            "venue_noshow_rate": rng.random(),
            "venue_rating_mean": rng.uniform(1, 5),
            "venue_rating_count": rng.randint(0, 100),
        }
    elif table == "series_stats":
        row |= {
            "series_instances": rng.randint(1, 30),
            "series_attend_rate": rng.random(),
            "series_noshow_rate": rng.random(),
            "series_rating_mean": rng.uniform(1, 5),
        }
    elif table == "market_rates":
        row |= {"market_rsvp_rate": rng.random() * 0.2, "market_impressions": rng.randint(0, 10_000)}
    elif table == "social":
        going = rng.randint(0, 6)
        row |= {"friends_going": going, "friends_going_bucket": min(going, 3)}
    elif table == "event_embeddings":
        row |= {"tower_version": "t1", "embedding": [rng.uniform(-1, 1) for _ in range(64)]}
    else:
        raise KeyError(table)
    row["event_timestamp"] = ts
    row["created"] = ts
    return row


def write_gold(
    spark: SparkSession, settings: Settings, table: str, rows: Iterable[dict[str, Any]], mode: str = "append"
) -> int:
    """Append (or overwrite) ``rows`` to ``gold.<table>`` as Delta; returns how many were written."""
    ddl = GOLD_DDL[table]
    columns = [part.strip().split(" ")[0] for part in ddl.split(",")]
    data = []
    for row in rows:
        values = []
        for c in columns:
            v = row[c]
            values.append(_naive(v) if isinstance(v, datetime) else v)
        data.append(tuple(values))
    frame = spark.createDataFrame(data, schema=ddl)
    frame.write.format("delta").mode(mode).save(settings.lake.table_path("gold", table))
    return len(data)


# The gold jobs' keys, plus the embeddings table the index stage writes.
KEYS: dict[str, tuple[str, ...]] = {**GOLD_KEYS, "event_embeddings": ("event_id",)}


def entity_ids(n_users: int, n_events: int) -> dict[str, list[str]]:
    return {
        "user_id": [f"u{i}" for i in range(n_users)],
        "event_id": [f"e{i}" for i in range(n_events)],
        "organizer_id": [f"o{i}" for i in range(6)],
        "venue_id": [f"v{i}" for i in range(6)],
        "series_id": [f"s{i}" for i in range(4)],
    }


def history(
    seed: int, n_users: int = 12, n_events: int = 16, versions: int = 3, span: timedelta = timedelta(days=6)
) -> dict[str, list[dict[str, Any]]]:
    """Every gold table with ``versions`` rows per key at random instants in [T0, T0 + span)."""
    rng = random.Random(seed)
    ids = entity_ids(n_users, n_events)
    out: dict[str, list[dict[str, Any]]] = {t: [] for t in GOLD_TABLES}

    def instants() -> list[datetime]:
        return sorted(
            T0 + timedelta(seconds=rng.randint(0, int(span.total_seconds()))) for _ in range(versions)
        )

    events: dict[str, dict[str, Any]] = {}
    for event_id in ids["event_id"]:
        for ts in instants():
            row = default_row("event_features", rng, {"event_id": event_id}, ts)
            out["event_features"].append(row)
            events[event_id] = row
        for table in ("event_dynamics", "event_embeddings"):
            out[table] += [default_row(table, rng, {"event_id": event_id}, ts) for ts in instants()]
    for user_id in ids["user_id"]:
        out["user_features"] += [
            default_row("user_features", rng, {"user_id": user_id}, ts) for ts in instants()
        ]
        for event_id in rng.sample(ids["event_id"], 4):
            key = {"user_id": user_id, "event_id": event_id}
            out["social"] += [default_row("social", rng, key, ts) for ts in instants()]
    for table, key in (
        ("organizer_stats", "organizer_id"),
        ("venue_stats", "venue_id"),
        ("series_stats", "series_id"),
    ):
        for entity_id in ids[key]:
            out[table] += [default_row(table, rng, {key: entity_id}, ts) for ts in instants()]
    for market_key in sorted({row["market_key"] for row in out["event_features"]}):
        out["market_rates"] += [
            default_row("market_rates", rng, {"market_key": market_key}, ts) for ts in instants()
        ]
    return out


def write_history(spark: SparkSession, settings: Settings, tables: dict[str, list[dict[str, Any]]]) -> None:
    """Overwrite each table with its rows; tables are independent, so write them side by side."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = [
            pool.submit(write_gold, spark, settings, table, rows, "overwrite")
            for table, rows in tables.items()
        ]
        for future in futures:
            future.result()
