"""A synthetic world for tests and the benchmark: a dense metro catalog, users, counters and two
small LightGBM heads, built in-process in seconds (no Spark, no registry, no online store).

The feature names are read from the real feature services (``features/services.py``), so the
assembled frames have the real model's shape.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pandas as pd

from contracts.instants import to_micros
from contracts.landing import CATEGORIES
from features.services import p_attend_v1, p_rsvp_v1
from features.views import (
    AFFINITY_FEATURES,
    EMBEDDING_DIM,
    market_rates,
    organizer_stats,
    series_stats,
    user_features,
    venue_stats,
)
from models.calibration import SamplingCorrection, fit_segment_calibrators
from models.heads import Head, distill_first_stage, fit_booster, model_columns, segments
from published.feature_store import service_feature_names
from published.geo_index import GeoIndex, GeoParams, build_geo_index
from serving.availability import SQLiteAvailability
from serving.config import ServingConfig
from serving.features import UserRow
from serving.impressions import ImpressionSink, MemoryImpressionLog
from serving.snapshot import REQUEST_SIDE, EventSnapshot
from serving.state import CachedUserSource, ModelHolder, ServingState

# The real services' features (Feast short names, service order), so frames have the real shape.
RSVP_FEATURES = service_feature_names(p_rsvp_v1)
ATTEND_FEATURES = service_feature_names(p_attend_v1)
USER_SIDE = frozenset(f.name for f in user_features.features)
# The synthetic catalog draws the entity stats per event; grouped by the view that holds them.
ORGANIZER = [f.name for f in organizer_stats.features]
VENUE = [f.name for f in venue_stats.features]
SERIES = [f.name for f in series_stats.features]
MARKET = [f.name for f in market_rates.features]
CENTER = (40.7128, -74.0060)  # a dense metro
ZONE = "America/New_York"
TOWER = "tower-syn"  # the synthetic content tower: snapshot vectors and heads agree on it


def event_side_columns(embedding_dim: int = EMBEDDING_DIM) -> list[str]:
    cols = model_columns(RSVP_FEATURES, embedding_dim) + model_columns(ATTEND_FEATURES, embedding_dim)
    return [c for c in dict.fromkeys(cols) if c not in REQUEST_SIDE and c not in USER_SIDE]


def make_catalog(
    n_events: int, now: datetime, seed: int = 0, radius_km: float = 35.0, n_organizers: int | None = None
) -> pd.DataFrame:
    """``n_events`` live events within ``radius_km`` of CENTER starting in the next 21 days."""
    rng = np.random.default_rng(seed)
    n_org = n_organizers or max(4, n_events // 8)
    r = radius_km * np.sqrt(rng.random(n_events))
    theta = rng.random(n_events) * 2 * np.pi
    lat = CENTER[0] + r * np.cos(theta) / 111.0
    lng = CENTER[1] + r * np.sin(theta) / (111.0 * np.cos(np.radians(CENTER[0])))
    now_s = now.timestamp()
    start = now_s + 600 + np.floor(rng.random(n_events) * 21 * 86_400 - 1200).clip(0)
    organizer = rng.integers(0, n_org, n_events)
    capacity = rng.integers(20, 400, n_events)
    rsvp_count = np.minimum(rng.poisson(15, n_events), capacity)
    frame = pd.DataFrame(
        {
            "event_id": [f"e{i:06d}" for i in range(n_events)],
            "organizer_id": [f"o{o:05d}" for o in organizer],
            "category": np.asarray(CATEGORIES)[rng.integers(0, len(CATEGORIES), n_events)],
            "metro": "nyc",
            "timezone": ZONE,
            "venue_lat": lat,
            "venue_lng": lng,
            "start_ts": start,
            "is_free": rng.integers(0, 2, n_events),
            "price_cents": rng.integers(0, 5000, n_events),
            "capacity": capacity,
            "hour_of_week": rng.integers(0, 168, n_events),
            "week_of_year": 45,
            "days_to_nearest_holiday": rng.integers(0, 30, n_events),
            "rsvp_count": rsvp_count,
            "fill_rate": rsvp_count / capacity,
            "rsvp_velocity_6h": rng.gamma(1.0, 1.0, n_events),
            # a fifth of organizers are new: no stats row yet (NaN), which makes them cold
            "org_event_count": np.where(organizer % 5 == 0, np.nan, rng.integers(0, 40, n_events)),
            "org_attend_rate": rng.beta(4, 4, n_events),
            "org_noshow_rate": rng.beta(2, 6, n_events),
            "org_rating_mean": rng.uniform(3, 5, n_events),
            "org_rating_count": rng.integers(0, 200, n_events),
            "venue_attend_rate": rng.beta(4, 4, n_events),
            "venue_noshow_rate": rng.beta(2, 6, n_events),
            "venue_rating_mean": rng.uniform(3, 5, n_events),
            "venue_rating_count": rng.integers(0, 200, n_events),
            "series_instances": rng.integers(0, 10, n_events),
            "series_attend_rate": rng.beta(4, 4, n_events),
            "series_noshow_rate": rng.beta(2, 6, n_events),
            "series_rating_mean": rng.uniform(3, 5, n_events),
            "market_rsvp_rate": rng.beta(2, 30, n_events),
            "market_impressions": rng.integers(100, 10_000, n_events),
        }
    )
    emb = rng.normal(size=(n_events, EMBEDDING_DIM)).astype(np.float32)
    return pd.concat(
        [frame, pd.DataFrame(emb, columns=[f"embedding_{j}" for j in range(EMBEDDING_DIM)])], axis=1
    )


def make_snapshot(catalog: pd.DataFrame, built_at: datetime) -> EventSnapshot:
    return EventSnapshot.from_frame(catalog, event_side_columns(), built_at.timestamp(), "synthetic", TOWER)


def make_index(catalog: pd.DataFrame, now: datetime, params: GeoParams | None = None) -> GeoIndex:
    frame = pd.DataFrame(
        {
            "event_id": catalog["event_id"],
            "start_us": (catalog["start_ts"].to_numpy() * 1e6).astype(np.int64),
            "lat": catalog["venue_lat"],
            "lng": catalog["venue_lng"],
        }
    )
    live = frame[frame["start_us"] > to_micros(now)]
    return build_geo_index(live, now, params or GeoParams())


def _training_frame(n: int, columns: list[str], seed: int) -> tuple[pd.DataFrame, np.ndarray]:
    """Random model rows whose label leans on distance, affinity, friends, market rate, org rate."""
    rng = np.random.default_rng(seed)
    x = pd.DataFrame(rng.normal(size=(n, len(columns))), columns=columns)
    x["distance_km"] = rng.uniform(0, 40, n)
    x["category_affinity"] = rng.beta(2, 5, n)
    x["friends_going"] = rng.poisson(0.3, n).astype(float)
    x["market_rsvp_rate"] = rng.beta(2, 30, n)
    x["org_attend_rate"] = rng.beta(4, 4, n)
    x["history_depth"] = rng.integers(0, 10, n).astype(float)
    x["is_free"] = rng.integers(0, 2, n).astype(float)
    z = (
        -2.0
        - 0.06 * x["distance_km"]
        + 3.0 * x["category_affinity"]
        + 0.8 * x["friends_going"]
        + 12.0 * x["market_rsvp_rate"]
        + 1.5 * x["org_attend_rate"]
        + 0.4 * x["is_free"]
    )
    y = (rng.random(n) < 1 / (1 + np.exp(-z))).astype(float)
    return x[columns], y


def make_head(
    name: str,
    rows: int = 4000,
    rounds: int = 20,
    params: dict[str, Any] | None = None,
    schema_hash: str = "synthetic",
    seed: int = 1,
) -> Head:
    """A calibrated head on the real service's columns, trained on synthetic rows."""
    features = RSVP_FEATURES if name == "rsvp" else ATTEND_FEATURES
    columns = model_columns(features, EMBEDDING_DIM)
    x, y = _training_frame(rows, columns, seed)
    xv, yv = _training_frame(rows // 2, columns, seed + 1)
    booster = fit_booster(
        x,
        y,
        xv,
        yv,
        {"num_boost_round": rounds, "early_stopping_round": 0, **(params or {})},
        seed=seed,
        num_threads=1,
    )
    correction = SamplingCorrection()
    calibrators = fit_segment_calibrators(
        correction.apply(booster.predict(xv)), yv, segments(xv), min_rows=200
    )
    first_stage = distill_first_stage(booster, columns, x, seed, num_threads=1) if name == "rsvp" else None
    return Head(
        name, booster, list(features), columns, EMBEDDING_DIM, schema_hash, correction, calibrators, TOWER,
        first_stage,
    )  # fmt: skip


@dataclass
class World:
    """A synthetic serving world: catalog, index, users and the authoritative counters."""

    now: datetime
    catalog: pd.DataFrame
    index: GeoIndex
    snapshot: EventSnapshot
    users: dict[str, UserRow]
    availability: SQLiteAvailability


class DictUsers:
    """A user source over a dict; ``fail`` simulates the online store being down."""

    def __init__(self, users: dict[str, UserRow]) -> None:
        self.users = users
        self.fail = False

    def get(self, user_id: str, now: datetime) -> UserRow | None:
        if self.fail:
            raise ConnectionError("online store unreachable (injected)")
        return self.users.get(user_id)


def make_world(n_events: int = 600, n_users: int = 50, seed: int = 0, now: datetime | None = None) -> World:
    now = now or datetime(2026, 11, 5, 15, 0, tzinfo=UTC)  # a Thursday
    rng = np.random.default_rng(seed + 100)
    catalog = make_catalog(n_events, now, seed)
    users: dict[str, UserRow] = {}
    ids = [f"u{i:05d}" for i in range(n_users)]
    for uid in ids:
        values: dict[str, Any] = {
            "home_lat": CENTER[0] + rng.normal(0, 0.05),
            "home_lng": CENTER[1] + rng.normal(0, 0.05),
            "history_depth": int(rng.integers(0, 12)),
            "attended_count": int(rng.integers(0, 6)),
            "attend_rate_shrunk": float(rng.beta(4, 4)),
            "travel_tolerance_km": float(rng.uniform(3, 30)),
            "onboarded": int(rng.integers(0, 2)),
            **{a: float(rng.beta(2, 5)) for a in AFFINITY_FEATURES},
        }
        friends = tuple(str(f) for f in rng.choice(ids, size=min(8, n_users), replace=False) if f != uid)
        users[uid] = UserRow(uid, values, friends)
    availability = SQLiteAvailability(":memory:")
    availability.set_capacity(
        zip(
            catalog["event_id"],
            catalog["capacity"].astype(int),
            catalog["rsvp_count"].astype(int),
            strict=True,
        )
    )
    events = catalog["event_id"].to_numpy()
    availability.add_rsvps((u, str(e)) for u in ids for e in rng.choice(events, size=3, replace=False))
    return World(now, catalog, make_index(catalog, now), make_snapshot(catalog, now), users, availability)


def make_state(
    world: World,
    heads: tuple[Head, Head | None] | None,
    config: ServingConfig | None = None,
    impressions: ImpressionSink | None = None,
    user_source: DictUsers | None = None,
    with_index: bool = True,
) -> ServingState:
    cfg = config or ServingConfig()
    models = ModelHolder(expected_tower=world.snapshot.tower_version)
    if heads is not None:
        models.offer(heads[0], heads[1], "rsvp:v1+attend:v1")
    return ServingState(
        config=cfg,
        snapshot=world.snapshot,
        models=models,
        users=CachedUserSource(user_source or DictUsers(world.users), cfg.user_cache_size),
        availability=world.availability,
        impressions=impressions if impressions is not None else MemoryImpressionLog(),
        index=world.index if with_index else None,
        index_version="synthetic" if with_index else None,
        clock=lambda: world.now,
        seed=7,
        as_of=world.now,
    )
