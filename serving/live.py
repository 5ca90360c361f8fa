"""The serving state built from what the batch side published, as of one instant ``now``.

``load_serving_state(settings, now)`` assembles the parts ``serving.synthetic`` fakes, each from
a reader in ``published``; nothing here starts Spark or reads the lake:

* **index**: the published geo index (``published.index_store``), refused if it was built with
  another content tower than the published one. Without one, retrieval scans the snapshot
  (``served_by`` says ``+index_scan``).
* **catalog**: the live events, RSVP lists, friendships, counters and user homes the index job
  published beside the index (``published.catalog``), as of the index's build instant.
* **models**: the registry's ``champion`` of each head (``published.registry``), offered to the
  ``ModelHolder`` with the schema hash the *online store's* registry declares for each feature
  service: a head trained on another schema is refused (metro popularity serves).
* **the event snapshot**: the catalog's events with their *feature values* from the **Feast
  online store**, view by view (event_features, event_dynamics, event_embeddings by event;
  organizer, venue, series and market stats by their keys), so serving reads exactly what
  materialization wrote, with each view's TTL applied at ``now`` as the offline join applies it.
  An embedding from another tower than the index's is dropped (NaN).
* **users**: the user's row from the online store's ``user_features`` view (same TTL rule) and
  their friends from the catalog.
* **the capacity counter**: ``settings.serving.availability``: SQLite in ``local``, the booking
  path's Redis in ``cluster``. With ``seed_from_silver`` (the local stand-in) it is loaded with
  the catalog's RSVPs, seats taken and cancellations.
* **popularity**: the metro-popularity fallback scores an event by its RSVPs so far plus its
  market's shrunk RSVP rate as a tie-break.

``refresh_snapshot_fn`` follows the catalog pointer and re-reads the online store on the
refresher's thread; ``refresh_models_fn`` asks the registry which versions hold ``champion`` (one
cheap lookup per head) and downloads a head only when its alias moved.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from conf import Settings
from features.views import EMBEDDING_DIM
from models.heads import EMBEDDING_COLUMN, HEADS, SERVICE_OF_HEAD, Head
from published.catalog import Catalog, catalog_store, load_live_catalog, read_catalog
from published.feature_store import open_online_store, read_online_view, schema_hashes
from published.index_store import geo_store, load_live_index
from published.registry import alias_versions, load_head
from published.tower import current_tower_version
from serving.availability import WritableAvailability, open_availability
from serving.config import ServingConfig
from serving.features import UserRow
from serving.impressions import ImpressionSink, LandingImpressionLog
from serving.snapshot import META_COLUMNS, REQUEST_SIDE, EventSnapshot
from serving.state import CachedUserSource, ModelHolder, ServingState

if TYPE_CHECKING:
    from feast import FeatureStore

    from published.geo_index import GeoIndex

log = logging.getLogger(__name__)

# Online views read per event, and the entity views reached through an event's keys.
EVENT_VIEWS = ("event_features", "event_dynamics", "event_embeddings")
KEYED_VIEWS = {
    "organizer_stats": "organizer_id",
    "venue_stats": "venue_id",
    "series_stats": "series_id",
    "market_rates": "market_key",
}
USER_VIEW = "user_features"
# Routing columns the snapshot takes from the catalog, never from a feature row.
_CATALOG_OWNED = frozenset({"event_id", "organizer_id", "venue_id", "series_id", "category", "metro"})


class NotPublished(RuntimeError):
    """The pipeline has not published what serving needs (no index, or no champion)."""


def _is_number_column(values: pd.Series) -> bool:
    """Numeric dtype, or Feast's object column of numbers and None (ints with missing values)."""
    if pd.api.types.is_bool_dtype(values) or pd.api.types.is_numeric_dtype(values):
        return True
    present = values.dropna()
    return len(present) > 0 and all(isinstance(v, (int, float, np.number)) for v in present)


def _spread_embeddings(frame: pd.DataFrame, dim: int) -> pd.DataFrame:
    matrix = np.full((len(frame), dim), np.nan)
    for i, vec in enumerate(frame[EMBEDDING_COLUMN].to_numpy()):
        if vec is not None and len(vec) == dim:
            matrix[i] = np.asarray(vec, dtype=float)
    spread = pd.DataFrame(matrix, columns=[f"{EMBEDDING_COLUMN}_{j}" for j in range(dim)], index=frame.index)
    return pd.concat([frame.drop(columns=[EMBEDDING_COLUMN]), spread], axis=1)


def live_events_at(catalog: Catalog, now: datetime) -> pd.DataFrame:
    """The catalog's events still live at ``now`` (created by then, not started)."""
    ev = catalog.events
    now_s = now.timestamp()
    return ev[(ev["created_ts"] <= now_s) & (ev["start_ts"] > now_s)].reset_index(drop=True)


def build_event_snapshot(
    store: FeatureStore,
    events: pd.DataFrame,
    now: datetime,
    embedding_dim: int,
    tower_version: str | None,
    user_feature_names: frozenset[str],
) -> EventSnapshot:
    """The catalog's live events with their online feature rows, as one columnar snapshot."""
    started = time.time()
    frame = events.drop(columns=["created_ts", "capacity"], errors="ignore")
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
            c for c in rows.columns if c == "event_id" or (c not in _CATALOG_OWNED and c not in frame.columns)
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
    """The user's ``user_features`` row from the online store and their friends from the catalog."""

    def __init__(self, store: FeatureStore, friends: dict[str, tuple[str, ...]]) -> None:
        from published.feature_store import OnlineView

        self.store = store
        self.friends = friends
        self.view = OnlineView.of(store, USER_VIEW)

    def get(self, user_id: str, now: datetime) -> UserRow | None:
        columns = self.view.read(self.store, "user_id", [user_id], now)
        values = {name: column[0] for name, column in columns.items()}
        if all(v is None or (isinstance(v, float) and np.isnan(v)) for v in values.values()):
            return None  # unknown (or expired) user: the cold-start path
        return UserRow(user_id, values, self.friends.get(user_id, ()))


def model_refresher(settings: Settings) -> Callable[[ModelHolder], None]:
    """Reload the champions when either alias moved and offer them to the holder.

    Each call asks the registry which versions hold ``champion`` (no download); the heads' files
    are fetched only when that answer changed since the last model installed or refused.
    """
    seen: dict[str, str] = {}

    def refresh(holder: ModelHolder) -> None:
        versions = alias_versions(settings, HEADS)
        if "rsvp" not in versions:
            raise NotPublished("the registry has no p_rsvp champion")
        if versions == seen:
            return
        loaded: dict[str, tuple[Head, Any]] = {}
        for head in versions:
            got = load_head(settings, head)
            if got is not None:
                loaded[head] = got
        if "rsvp" not in loaded:
            raise NotPublished("the registry has no p_rsvp champion")
        versions = {h: str(mv.version) for h, (_, mv) in loaded.items()}
        label = "+".join(f"{h}:v{v}" for h, v in versions.items())
        attend = loaded["attend"][0] if "attend" in loaded else None
        holder.last_refusal = None
        holder.offer(loaded["rsvp"][0], attend, label)
        # Installed or refused, these versions were judged: ask again only when an alias moves.
        seen.clear()
        seen.update(versions)

    return refresh


def seed_availability(availability: WritableAvailability, catalog: Catalog) -> None:
    """Load the catalog's RSVPs, seats taken and cancellations into the local capacity counter."""
    availability.add_rsvps(
        zip(catalog.rsvps["user_id"].astype(str), catalog.rsvps["event_id"].astype(str), strict=True)
    )
    cap = catalog.capacity
    # Authoritative seats taken, after the RSVPs' +1s.
    availability.set_capacity(
        (str(e), None if pd.isna(c) else int(c), int(t))
        for e, c, t in zip(cap["event_id"], cap["capacity"], cap["seats_taken"], strict=True)
    )
    availability.cancel(catalog.cancellations["event_id"].astype(str))


def load_serving_state(
    settings: Settings,
    now: datetime,
    config: ServingConfig | None = None,
    impressions: ImpressionSink | None = None,
    require_model: bool = True,
    clock: Callable[[], datetime] | None = None,
) -> ServingState:
    """The serving state from the published index and catalog, the champions and the online store.

    ``now`` is the instant loaded; ``clock`` the request clock (default: pinned to ``now``, as the
    demo serves its history's last instant; a live service passes the wall clock). Impressions go
    to the landing zone unless ``impressions`` is given. Raises ``NotPublished`` when there is no
    published index or catalog, or (``require_model``) no p_rsvp champion that fits the online
    schema.
    """
    now = now.astimezone(UTC)
    cfg = config or ServingConfig()
    started = time.time()
    try:
        live = load_live_index(geo_store(settings), current_tower_version(settings))
        catalog = load_live_catalog(settings)
    except Exception as e:
        raise NotPublished(f"no usable published index: {e}") from e

    store = open_online_store(settings)
    models = ModelHolder(schema_hashes(store, list(SERVICE_OF_HEAD.values())), live.tower_version)
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

    user_names = frozenset(f.name for f in store.get_feature_view(USER_VIEW).features)
    embedding_dim = (
        models.current.scorer.rsvp.embedding_dim
        if models.current is not None and models.current.scorer.rsvp is not None
        else EMBEDDING_DIM
    )
    request_clock = clock or (lambda: now)
    users = OnlineUserSource(store, catalog.friends())
    availability = open_availability(settings.serving.availability)
    if settings.serving.availability.seed_from_silver:
        seed_availability(availability, catalog)
    current: dict[str, Catalog] = {"catalog": catalog}

    def snapshot() -> EventSnapshot:
        """The events live at the clock's instant from the newest catalog, with fresh features."""
        pointer = catalog_store(settings).read_pointer()
        if pointer is not None and pointer.version != current["catalog"].version:
            fresh = read_catalog(catalog_store(settings).path(pointer.version))
            users.friends = fresh.friends()
            if settings.serving.availability.seed_from_silver:
                seed_availability(availability, fresh)
            current["catalog"] = fresh
        at = request_clock().astimezone(UTC)
        events = live_events_at(current["catalog"], at)
        return build_event_snapshot(store, events, at, embedding_dim, live.tower_version, user_names)

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
            store, live_events_at(catalog, now), now, embedding_dim, live.tower_version, user_names
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
        "serving state as of %s in %.1f s: index %s, catalog %s, model %s, %d events",
        now.isoformat(), time.time() - started, live.version, catalog.version, state.model_version(),
        len(state.snapshot),
    )  # fmt: skip
    return state
