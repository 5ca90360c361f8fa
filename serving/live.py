"""The serving state built from what the pipeline publishes, as of one instant ``now``.

``load_serving_state(settings, now)`` assembles the parts ``serving.synthetic`` fakes:

* **index**: the published geo index (``pipelines.index.geo_store.load_live_index``), refused if
  it was built with another content tower than the published one. Without one, retrieval scans
  the snapshot (``served_by`` says ``+index_scan``).
* **models**: the registry's ``champion`` of each head (``pipelines.training.registry.load_head``),
  offered to the ``ModelHolder`` with the schema hash the *online store's* registry declares for
  each feature service: a head trained on another schema is refused (metro popularity serves).
* **the event snapshot**: which events exist, where, when and in which zone is read from silver
  (``silver.events`` joined to ``silver.venues``: the timezone lives only there), as of ``now``:
  created by ``now``, starting after ``now`` and within the index horizon. Their *feature values*
  come from the **Feast online store**, view by view (event_features, event_dynamics,
  event_embeddings by event; organizer, venue, series and market stats by their keys), so serving
  reads exactly what materialization wrote, with each view's TTL applied at ``now`` as the offline
  join applies it. The online store holds only the newest value of each key: a value stamped
  after ``now`` (``now`` earlier than the last materialization) is treated as missing rather
  than leaking the future. An embedding from another tower than the index's is dropped (NaN).
* **users**: the user's row from the online store's ``user_features`` view (same TTL rule), and
  their friends from ``silver.friendships`` (known by ``now``, both directions).
* **the capacity counter**: ``settings.serving.availability`` (never the lake): SQLite in
  ``local``, the booking path's Redis in ``cluster``. With ``seed_from_silver`` (the local
  stand-in) it is loaded at start-up with every RSVP to a live event made by ``now`` (the
  already-RSVPed and friends-going sets), seats taken from the newest ``capacity_snapshots`` row by
  ``now`` (the RSVP count where there is none), and every cancellation by ``now``.
* **popularity**: the metro-popularity fallback scores an event by its RSVPs so far (silver) plus
  its market's shrunk RSVP rate as a tie-break.

Silver is read through Spark (the lake is Delta; there is no Spark-free Delta reader in the
lock file), so loading costs a Spark session; requests never touch Spark. ``refresh_snapshot_fn``
re-reads the online store (and, when the request clock has moved on, silver's live events and
friendships as of the clock's instant) on the refresher's thread, and ``refresh_models_fn``
re-reads the champions and installs them when an alias moved. A champion trained on another
feature schema or on another content tower's embeddings than the published index's is refused.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from conf import Settings
from features.views import EMBEDDING_DIM
from models.heads import EMBEDDING_COLUMN, SERVICE_OF_HEAD, Head
from serving.availability import open_availability
from serving.config import ServingConfig
from serving.features import UserRow
from serving.impressions import ImpressionSink, LandingImpressionLog
from serving.snapshot import META_COLUMNS, REQUEST_SIDE, EventSnapshot
from serving.state import CachedUserSource, ModelHolder, ServingState

if TYPE_CHECKING:
    from feast import FeatureStore
    from pyspark.sql import DataFrame, SparkSession

    from pipelines.index.geo import GeoIndex

log = logging.getLogger(__name__)

HEADS = ("rsvp", "attend")
# Online views read per event, and the entity views reached through an event's keys.
EVENT_VIEWS = ("event_features", "event_dynamics", "event_embeddings")
KEYED_VIEWS = {
    "organizer_stats": "organizer_id",
    "venue_stats": "venue_id",
    "series_stats": "series_id",
    "market_rates": "market_key",
}
USER_VIEW = "user_features"
# Routing columns the snapshot takes from silver, never from a feature row.
_SILVER_OWNED = frozenset({"event_id", "organizer_id", "venue_id", "series_id", "category", "metro"})


class NotPublished(RuntimeError):
    """The pipeline has not published what serving needs (no index, or no champion)."""


def _naive_utc(t: datetime) -> datetime:
    return t.astimezone(UTC).replace(tzinfo=None)


def _epoch_s(values: pd.Series) -> np.ndarray:
    """Spark's naive-UTC timestamps (session zone UTC) -> epoch seconds (any datetime64 unit)."""
    stamps = pd.to_datetime(values)
    if stamps.dt.tz is None:
        stamps = stamps.dt.tz_localize("UTC")
    return np.asarray((stamps - pd.Timestamp(0, tz="UTC")).dt.total_seconds(), dtype=float)


def _is_number_column(values: pd.Series) -> bool:
    """Numeric dtype, or Feast's object column of numbers and None (ints with missing values)."""
    if pd.api.types.is_bool_dtype(values) or pd.api.types.is_numeric_dtype(values):
        return True
    present = values.dropna()
    return len(present) > 0 and all(isinstance(v, (int, float, np.number)) for v in present)


# ---- silver --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SilverState:
    """What serving reads from silver as of ``now``: live events, friends, RSVPs, counters."""

    events: pd.DataFrame  # one row per live event: META_COLUMNS + venue_id, series_id, rsvps_so_far
    friends: dict[str, tuple[str, ...]]
    rsvps: list[tuple[str, str]]  # (user_id, event_id) for live events, made by now
    capacity: list[tuple[str, int | None, int]]  # (event_id, capacity, taken) for live events
    cancelled: list[str]


def read_silver_state(
    spark: SparkSession, settings: Settings, now: datetime, horizon_days: float
) -> SilverState:
    """Live events at ``now`` and the authoritative request-time state around them."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    def table(name: str) -> DataFrame:
        return spark.read.format("delta").load(settings.lake.table_path("silver", name))

    at = F.lit(_naive_utc(now))
    until = F.lit(_naive_utc(now + timedelta(days=horizon_days)))
    venues = table("venues").select(
        "venue_id", "metro", F.col("lat").alias("venue_lat"), F.col("lng").alias("venue_lng")
    )
    events = (
        table("events")
        .filter((F.col("created_at") <= at) & (F.col("start_at") > at) & (F.col("start_at") <= until))
        .select(
            "event_id",
            "organizer_id",
            "venue_id",
            "series_id",
            "category",
            "timezone",
            "capacity",
            "start_at",
        )
        .join(venues, "venue_id", "left")
        .cache()
    )
    live = events.select("event_id")
    rsvps = (
        table("rsvps")
        .filter(F.col("rsvp_at") <= at)
        .join(live, "event_id")
        .select("user_id", "event_id")
        .distinct()
    )
    newest = Window.partitionBy("event_id").orderBy(F.col("snapshot_at").desc())
    snapshots = (
        table("capacity_snapshots")
        .filter(F.col("snapshot_at") <= at)
        .join(live, "event_id")
        .withColumn("_n", F.row_number().over(newest))
        .filter("_n = 1")
        .select("event_id", F.col("capacity").alias("snap_capacity"), "seats_taken")
    )
    cancelled = (
        table("event_cancellations")
        .filter(F.col("cancelled_at") <= at)
        .join(live, "event_id")
        .select("event_id")
    )
    friendships = table("friendships").filter(F.col("created_at") <= at).select("user_id", "friend_id")

    ev = events.toPandas()
    rs = rsvps.toPandas()
    snap = snapshots.toPandas()
    fr = friendships.toPandas()
    cancelled_ids = [str(e) for e in cancelled.toPandas()["event_id"]]
    events.unpersist()

    counts = rs.groupby("event_id").size()
    ev["rsvps_so_far"] = ev["event_id"].map(counts).fillna(0).astype(int)
    ev["start_ts"] = _epoch_s(ev["start_at"])
    ev = ev.drop(columns=["start_at"]).sort_values("event_id", ignore_index=True)

    merged = ev[["event_id", "capacity", "rsvps_so_far"]].merge(snap, on="event_id", how="left")
    # The newest booking-counter reading wins; an event without one has its RSVPs as seats taken.
    cap = merged["snap_capacity"].fillna(merged["capacity"])
    taken = merged["seats_taken"].fillna(merged["rsvps_so_far"])
    capacity: list[tuple[str, int | None, int]] = [
        (str(e), None if pd.isna(c) else int(c), int(t))
        for e, c, t in zip(merged["event_id"].tolist(), cap.tolist(), taken.tolist(), strict=True)
    ]
    both = pd.concat(
        [fr, fr.rename(columns={"user_id": "friend_id", "friend_id": "user_id"})], ignore_index=True
    )
    friends = {str(u): tuple(sorted(map(str, g))) for u, g in both.groupby("user_id")["friend_id"]}
    pairs = [(str(u), str(e)) for u, e in zip(rs["user_id"], rs["event_id"], strict=True)]
    log.info(
        "silver as of %s: %d live events, %d RSVPs to them, %d cancelled, %d users with friends",
        now.isoformat(), len(ev), len(pairs), len(cancelled_ids), len(friends),
    )  # fmt: skip
    return SilverState(ev, friends, pairs, capacity, cancelled_ids)


# ---- the online store ----------------------------------------------------------------------------


@dataclass(frozen=True)
class OnlineView:
    """One online feature view's names and TTL, read once from the registry (Feast rebuilds the
    view from its proto on every ``get_feature_view``, ~1 ms: too slow per request)."""

    name: str
    features: tuple[str, ...]
    ttl_s: float

    @classmethod
    def of(cls, store: FeatureStore, name: str) -> OnlineView:
        view = store.get_feature_view(name)
        ttl_s = view.ttl.total_seconds() if view.ttl is not None else 0.0
        return cls(name, tuple(f.name for f in view.features), ttl_s)

    def read(self, store: FeatureStore, key: str, keys: list[str], now: datetime) -> dict[str, list[Any]]:
        """Each feature's values for ``keys`` of ``key``; a value stamped before ``now - ttl``
        (Feast does not apply TTL online) or after ``now`` (the store is ahead of the instant
        served) is missing (None), as the point-in-time join reads it."""
        response = store.get_online_features(
            features=[f"{self.name}:{n}" for n in self.features], entity_rows=[{key: k} for k in keys]
        ).to_dict(include_event_timestamps=True)
        now_s = now.timestamp()
        oldest = now_s - self.ttl_s if self.ttl_s > 0 else -np.inf
        out: dict[str, list[Any]] = {}
        for name in self.features:
            stamps = response.get(f"{name}__ts")
            column = response[name]
            if stamps is not None:
                column = [
                    v if ts is not None and oldest <= ts <= now_s else None
                    for v, ts in zip(column, stamps, strict=True)
                ]
            out[name] = column
        return out


def read_online_view(
    store: FeatureStore, view_name: str, key: str, values: Iterable[Any], now: datetime
) -> pd.DataFrame:
    """Every feature of one online view for ``values`` of its key, one row per distinct value
    (TTL applied as ``OnlineView.read`` says)."""
    keys = sorted({str(v) for v in values if v is not None and not (isinstance(v, float) and np.isnan(v))})
    view = OnlineView.of(store, view_name)
    if not keys:
        return pd.DataFrame({key: [], **{n: [] for n in view.features}})
    return pd.DataFrame({key: keys, **view.read(store, key, keys, now)})


def _spread_embeddings(frame: pd.DataFrame, dim: int) -> pd.DataFrame:
    matrix = np.full((len(frame), dim), np.nan)
    for i, vec in enumerate(frame[EMBEDDING_COLUMN].to_numpy()):
        if vec is not None and len(vec) == dim:
            matrix[i] = np.asarray(vec, dtype=float)
    spread = pd.DataFrame(matrix, columns=[f"{EMBEDDING_COLUMN}_{j}" for j in range(dim)], index=frame.index)
    return pd.concat([frame.drop(columns=[EMBEDDING_COLUMN]), spread], axis=1)


def build_event_snapshot(
    store: FeatureStore,
    events: pd.DataFrame,
    now: datetime,
    embedding_dim: int,
    tower_version: str | None,
    user_feature_names: frozenset[str],
) -> EventSnapshot:
    """Silver's live events with their online feature rows, as one columnar snapshot."""
    started = time.time()
    frame = events.copy()
    for view_name in EVENT_VIEWS:
        rows = read_online_view(store, view_name, "event_id", frame["event_id"], now)
        if view_name == "event_embeddings":
            stale = rows["tower_version"].astype(object) != tower_version
            if tower_version is not None and stale.any():
                log.warning(
                    "%d embeddings from another tower than %s: dropped", int(stale.sum()), tower_version
                )
                rows.loc[stale, EMBEDDING_COLUMN] = None
            rows = _spread_embeddings(rows.drop(columns=["tower_version"]), embedding_dim)
        keep = [
            c for c in rows.columns if c == "event_id" or (c not in _SILVER_OWNED and c not in frame.columns)
        ]
        frame = frame.merge(rows[keep], on="event_id", how="left")
    for view_name, key in KEYED_VIEWS.items():
        if key not in frame.columns:
            continue
        rows = read_online_view(store, view_name, key, frame[key], now)
        frame = frame.merge(rows, on=key, how="left")
    market = frame["market_rsvp_rate"] if "market_rsvp_rate" in frame.columns else pd.Series(0.0, frame.index)
    frame["popularity"] = frame["rsvps_so_far"].astype(float) + pd.to_numeric(market, errors="coerce").fillna(
        0.0
    )
    skip = {*META_COLUMNS, "popularity", "rsvps_so_far", *user_feature_names, *REQUEST_SIDE}
    numeric = [c for c in frame.columns if c not in skip and _is_number_column(frame[c])]
    snapshot = EventSnapshot.from_frame(frame, numeric, now.timestamp(), "online_store", tower_version)
    log.info(
        "event snapshot: %d events x %d features in %.1f s",
        len(snapshot),
        len(numeric),
        time.time() - started,
    )
    return snapshot


class OnlineUserSource:
    """The user's ``user_features`` row from the online store and their friends from silver."""

    def __init__(self, store: FeatureStore, friends: dict[str, tuple[str, ...]]) -> None:
        self.store = store
        self.friends = friends
        self.view = OnlineView.of(store, USER_VIEW)

    def get(self, user_id: str, now: datetime) -> UserRow | None:
        columns = self.view.read(self.store, "user_id", [user_id], now)
        values = {name: column[0] for name, column in columns.items()}
        if all(v is None or (isinstance(v, float) and np.isnan(v)) for v in values.values()):
            return None  # unknown (or expired) user: the cold-start path
        return UserRow(user_id, values, self.friends.get(user_id, ()))


# ---- the registry --------------------------------------------------------------------------------


def expected_schema_hashes(store: FeatureStore) -> dict[str, str]:
    """What the online store can serve for each head's feature service, as a schema hash."""
    from pipelines.features.store import schema_hash

    return {service: schema_hash(service, store=store) for service in SERVICE_OF_HEAD.values()}


def model_refresher(settings: Settings) -> Callable[[ModelHolder], None]:
    """Reload the champions when either alias moved and offer them to the holder."""
    from pipelines.training.registry import load_head

    seen: dict[str, str] = {}

    def refresh(holder: ModelHolder) -> None:
        loaded: dict[str, tuple[Head, Any]] = {}
        for head in HEADS:
            got = load_head(settings, head)
            if got is not None:
                loaded[head] = got
        if "rsvp" not in loaded:
            raise NotPublished("the registry has no p_rsvp champion")
        versions = {h: str(mv.version) for h, (_, mv) in loaded.items()}
        if versions == seen and holder.current is not None:
            return
        label = "+".join(f"{h}:v{v}" for h, v in versions.items())
        attend = loaded["attend"][0] if "attend" in loaded else None
        holder.last_refusal = None
        if holder.offer(loaded["rsvp"][0], attend, label):
            seen.clear()
            seen.update(versions)

    return refresh


# ---- the whole state -----------------------------------------------------------------------------


def load_serving_state(
    settings: Settings,
    now: datetime,
    config: ServingConfig | None = None,
    impressions: ImpressionSink | None = None,
    spark: SparkSession | None = None,
    require_model: bool = True,
    clock: Callable[[], datetime] | None = None,
) -> ServingState:
    """The serving state from the published index, the champions, the online store and silver.

    ``now`` is the instant loaded; ``clock`` the request clock (default: pinned to ``now``, as the
    demo serves its history's last instant; a live service passes the wall clock, and each
    snapshot refresh then reads the events live at the clock's instant). Impressions go
    to the landing zone unless ``impressions`` is given. Raises ``NotPublished`` when there is no
    published index, or (``require_model``) no p_rsvp champion that fits the online schema.
    """
    from pipelines.features.store import get_store
    from pipelines.index.geo import GeoParams
    from pipelines.index.geo_store import load_live_index
    from pipelines.index.run import geo_store
    from pipelines.index.tower import current_tower_version
    from pipelines.spark import get_spark

    now = now.astimezone(UTC)
    cfg = config or ServingConfig()
    started = time.time()
    try:
        live = load_live_index(geo_store(settings), current_tower_version(settings))
    except Exception as e:
        raise NotPublished(f"no usable published index: {e}") from e

    store = get_store(settings, offline=False)
    models = ModelHolder(expected_schema_hashes(store), live.tower_version)
    refresh_models = model_refresher(settings)
    try:
        refresh_models(models)
    except NotPublished:
        if require_model:
            raise
    if require_model and models.current is None:
        raise NotPublished(f"no champion fits the online store's schema: {models.last_refusal}")
    if models.current is None:
        log.warning("no usable model (%s): serving metro popularity", models.last_refusal or "no champion")

    params = GeoParams.from_settings(settings.index)
    spark = spark or get_spark(settings)
    silver = read_silver_state(spark, settings, now, params.horizon_days)
    user_names = frozenset(f.name for f in store.get_feature_view(USER_VIEW).features)
    embedding_dim = (
        models.current.scorer.rsvp.embedding_dim
        if models.current is not None and models.current.scorer.rsvp is not None
        else EMBEDDING_DIM
    )

    request_clock = clock or (lambda: now)
    users = OnlineUserSource(store, silver.friends)
    loaded: dict[datetime, SilverState] = {now: silver}

    def snapshot() -> EventSnapshot:
        at = request_clock().astimezone(UTC)
        if at not in loaded:  # the clock moved on: the events (and friendships) live now
            loaded.clear()
            loaded[at] = read_silver_state(spark, settings, at, params.horizon_days)
            users.friends = loaded[at].friends
        events = loaded[at].events
        return build_event_snapshot(store, events, at, embedding_dim, live.tower_version, user_names)

    availability = open_availability(settings.serving.availability)
    if settings.serving.availability.seed_from_silver:
        availability.add_rsvps(silver.rsvps)
        availability.set_capacity(silver.capacity)  # authoritative seats taken, after the RSVPs' +1s
        availability.cancel(silver.cancelled)

    def follow_index(served: str | None) -> tuple[GeoIndex, str] | None:
        """A newly published index, if the pointer moved; refused when built with another tower
        (this process's snapshot and champions read that tower's embeddings: restart to move)."""
        pointer = geo_store(settings).read_pointer()
        if pointer is None or pointer.version == served:
            return None
        fresh = load_live_index(geo_store(settings), live.tower_version)
        return fresh.index, fresh.version

    state = ServingState(
        config=cfg,
        snapshot=build_event_snapshot(
            store, silver.events, now, embedding_dim, live.tower_version, user_names
        ),
        models=models,
        users=CachedUserSource(users, cfg.user_cache_size),
        availability=availability,
        impressions=impressions if impressions is not None else LandingImpressionLog(settings.landing.root),
        index=live.index,
        index_version=live.version,
        clock=request_clock,
        refresh_snapshot_fn=snapshot,
        refresh_models_fn=refresh_models,
        refresh_index_fn=follow_index,
    )
    if models.current is not None:
        state.health["model"].set("ok", models.current.version)
    elif models.last_refusal:
        state.health["model"].set("down", f"refused: {models.last_refusal}; serving metro popularity")
    log.info(
        "serving state as of %s in %.1f s: index %s, model %s, %d events",
        now.isoformat(), time.time() - started, live.version, state.model_version(), len(state.snapshot),
    )  # fmt: skip
    return state
