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
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from conf import Settings
from features.views import EMBEDDING_DIM
from models.heads import EMBEDDING_COLUMN, HEADS, SERVICE_OF_HEAD, Head
from published.catalog import Catalog, catalog_store, read_catalog
from published.feature_store import check_online_store, open_online_store, read_online_view, schema_hashes
from published.index_store import geo_store, load_live_index
from published.registry import SQLITE_PREFIX, alias_versions, load_head
from published.tower import current_tower_version
from published.versioned import PublicationError
from serving.availability import Blocked, WritableAvailability, open_availability
from serving.config import ServingConfig
from serving.features import UserRow
from serving.impressions import ImpressionSink, LandingImpressionLog
from serving.snapshot import CATALOG_ONLY, META_COLUMNS, REQUEST_SIDE, EventSnapshot
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


class NotPublished(LookupError):
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


class ModelRefresher:
    """Reload the champions when either alias moved and offer them to the holder.

    Each call asks the registry which versions hold ``champion`` (no download); the heads' files
    are fetched only when that answer changed since the last model installed or refused, or
    after ``judge_again()`` (the schema the online store serves changed).
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.seen: dict[str, str] = {}

    def judge_again(self) -> None:
        self.seen.clear()

    def __call__(self, holder: ModelHolder) -> None:
        versions = alias_versions(self.settings, HEADS)
        if "rsvp" not in versions:
            raise NotPublished("the registry has no p_rsvp champion")
        if versions == self.seen:
            return
        loaded: dict[str, tuple[Head, Any]] = {}
        for head in versions:
            got = load_head(self.settings, head)
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
        self.seen = versions


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


class ReconnectingAvailability:
    """The capacity counter, opened again by the dependency check when it was unreachable.

    While it is down every read raises, and the serving state answers with the last blocked set
    it read (``+availability_stale``); the check re-opens it (and re-seeds the local stand-in).
    """

    def __init__(self, settings: Settings, seed: Callable[[WritableAvailability], None]) -> None:
        self.settings = settings
        self.seed = seed
        self.inner: WritableAvailability | None = None
        self.error = ""
        self.reopen()

    def reopen(self) -> bool:
        try:
            inner = open_availability(self.settings.serving.availability)
            if self.settings.serving.availability.seed_from_silver:
                self.seed(inner)
        except Exception as e:
            self.error = f"{type(e).__name__}: {e}"
            log.warning("capacity counter unavailable: %s", self.error)
            return False
        self.inner, self.error = inner, ""
        return True

    def reseed(self) -> bool:
        """After the counter came back (a restarted local stand-in holds nothing): seed it again."""
        if self.inner is None or not self.settings.serving.availability.seed_from_silver:
            return True
        try:
            self.seed(self.inner)
        except Exception as e:
            self.error = f"{type(e).__name__}: {e}"
            return False
        return True

    def _live(self) -> WritableAvailability:
        if self.inner is None:
            raise ConnectionError(f"capacity counter unavailable: {self.error}")
        return self.inner

    def blocked(self, user_id: str | None) -> Blocked:
        return self._live().blocked(user_id)

    def friends_going(self, friend_ids: list[str]) -> dict[str, int]:
        return self._live().friends_going(friend_ids)

    def ping(self) -> None:
        self._live().ping()


class LiveSources:
    """Every published dependency of the live service, each opened, checked for real and opened
    again on its own, so one missing at start-up or lost at run time degrades only its part.

    * the **catalog** (events, RSVP lists, friends, homes) and the **index** follow their pointers;
    * the **online store** is checked on disk (or by connection) before it is used: a file moved
      away while Feast holds it open is noticed, and no empty store is ever created in its place;
    * the **registry** is checked before each read for the same reason;
    * users are served from their published home whether or not their feature row exists.
    """

    def __init__(self, settings: Settings, clock: Callable[[], datetime]) -> None:
        self.settings = settings
        self.clock = clock
        self.catalog: Catalog | None = None
        self.store: FeatureStore | None = None
        self.store_error = ""
        self.users_view: Any = None
        self.user_names: frozenset[str] = frozenset()
        self.friends: dict[str, tuple[str, ...]] = {}
        self.homes: dict[str, tuple[float, float, str]] = {}
        self.tower_version: str | None = current_tower_version(settings)
        self.embedding_dim = EMBEDDING_DIM
        self.refresh_models = ModelRefresher(settings)

    # ---- catalog ---------------------------------------------------------------------------------

    def follow_catalog(self) -> bool:
        """Load the catalog the pointer names if it is not the one held; True when it changed."""
        store = catalog_store(self.settings)
        pointer = store.read_pointer()
        if pointer is None:
            raise PublicationError(f"no catalog has been published under {store.root} (run `turnout index`)")
        if self.catalog is not None and pointer.version == self.catalog.version:
            return False
        catalog = read_catalog(store.path(pointer.version))
        self.catalog = catalog
        self.friends = catalog.friends()
        users = catalog.users
        self.homes = {
            str(u): (float(a), float(b), str(m))
            for u, a, b, m in zip(
                users["user_id"], users["home_lat"], users["home_lng"], users["metro"], strict=True
            )
            if pd.notna(a) and pd.notna(b)
        }
        log.info("catalog %s as of %s: %s", catalog.version, catalog.as_of.isoformat(), catalog.counts())
        return True

    def catalog_ok(self) -> str | None:
        """Why the held catalog is no longer published on disk (None: it is)."""
        if self.catalog is None:
            return "no catalog loaded"
        folder = catalog_store(self.settings).path(str(self.catalog.version))
        return (
            None
            if (folder / "manifest.json").is_file()
            else f"catalog {self.catalog.version} was removed from {folder}"
        )

    # ---- online store ----------------------------------------------------------------------------

    def open_store(self) -> bool:
        """(Re)open the online store after checking it exists for real."""
        from published.feature_store import OnlineView

        try:
            store = open_online_store(self.settings)
            self.users_view = OnlineView.of(store, USER_VIEW)
            self.user_names = frozenset(f.name for f in store.get_feature_view(USER_VIEW).features)
        except Exception as e:
            self.store, self.store_error = None, f"{type(e).__name__}: {e}"
            return False
        self.store, self.store_error = store, ""
        return True

    def store_ok(self) -> str | None:
        """Why the online store cannot be read right now (None: it can)."""
        try:
            check_online_store(self.settings)
        except Exception as e:
            return f"{type(e).__name__}: {e}"
        return None if self.store is not None else self.store_error or "not opened"

    # ---- users -----------------------------------------------------------------------------------

    def home_of(self, user_id: str) -> UserRow | None:
        """The user's published home (cold-start features), or None for a user nobody published."""
        home = self.homes.get(user_id)
        if home is None:
            return None
        lat, lng, metro = home
        return UserRow(
            user_id, {"home_lat": lat, "home_lng": lng, "metro": metro}, self.friends.get(user_id, ())
        )

    def get(self, user_id: str, now: datetime) -> UserRow | None:
        """The user's online feature row (raises while the store is down), else their home."""
        if self.store is None:
            raise ConnectionError(f"online store unavailable: {self.store_error}")
        columns = self.users_view.read(self.store, "user_id", [user_id], now)
        values = {name: column[0] for name, column in columns.items()}
        if all(v is None or (isinstance(v, float) and np.isnan(v)) for v in values.values()):
            return self.home_of(user_id)  # no (or an expired) feature row: home, cold-start features
        return UserRow(user_id, values, self.friends.get(user_id, ()))

    # ---- snapshot --------------------------------------------------------------------------------

    def snapshot(self, at: datetime) -> EventSnapshot:
        """The catalog's events live at ``at`` with their online features; without the online store
        (never reachable yet) the events alone, so metro popularity can serve."""
        if self.catalog is None:
            raise PublicationError("no catalog to build a snapshot from")
        events = live_events_at(self.catalog, at)
        if self.store is None:
            frame = events.assign(popularity=events["rsvps_so_far"].astype(float))
            return EventSnapshot.from_frame(frame, [], at.timestamp(), CATALOG_ONLY, self.tower_version)
        return build_event_snapshot(
            self.store, events, at, self.embedding_dim, self.tower_version, self.user_names
        )

    def refresh_snapshot(self) -> EventSnapshot:
        """What the refresher swaps in: the newest catalog, re-read features. Raises while the online
        store is down (the last snapshot keeps serving, ``+last_snapshot``)."""
        problem = self.store_ok()
        if problem is not None:
            raise ConnectionError(f"online store unavailable: {problem}")
        self.follow_catalog()
        return self.snapshot(self.clock().astimezone(UTC))

    # ---- registry --------------------------------------------------------------------------------

    def registry_ok(self) -> str | None:
        """Why the registry cannot be read (None: it can); a SQLite store is looked at on disk."""
        uri = self.settings.mlflow.tracking_uri
        if uri.startswith(SQLITE_PREFIX):
            path = Path(uri.removeprefix(SQLITE_PREFIX))
            if not path.is_file() or path.stat().st_size == 0:
                return f"no MLflow tracking store at {path}"
            return None
        try:
            import httpx

            httpx.get(f"{uri.rstrip('/')}/health", timeout=2).raise_for_status()
        except Exception as e:
            return f"MLflow tracking server at {uri} unreachable: {e}"
        return None

    # ---- the whole check -------------------------------------------------------------------------

    def check(self, state: ServingState) -> None:
        """One round of real checks: fall back on what is gone, recover what came back."""
        h = state.health
        # Index: its files, not the memory map a deleted version still leaves readable.
        if (
            state.index_version is not None
            and not (geo_store(self.settings).path(state.index_version) / "manifest.json").is_file()
        ):
            h["index"].set("down", f"index version {state.index_version} was removed: scanning the snapshot")
            state.index, state.index_version = None, None
        if state.index is None and state.refresh_index():
            h["index"].set("ok", f"loaded {state.index_version}")
        # Catalog.
        gone = self.catalog_ok()
        if gone is not None:
            h["catalog"].set("down", gone)
            try:
                if self.follow_catalog():
                    h["catalog"].set("ok", f"loaded {self.catalog.version if self.catalog else None}")
                    state.as_of = self.catalog.as_of if self.catalog else state.as_of
                    state.refresh_snapshot()
            except Exception as e:
                h["catalog"].set("down", f"{gone}; {e}")
        else:
            h["catalog"].set("ok", f"version {self.catalog.version if self.catalog else None}")
        # Online store.
        problem = self.store_ok()
        if problem is not None and self.store is not None:
            self.store, self.store_error = None, problem  # never read through a handle to a moved file
        if problem is not None:
            h["online_store"].set("down", problem)
            if not self.open_store():
                h["snapshot"].set("degraded", "online store unavailable: serving the last snapshot")
        if self.store is not None and not h["online_store"].ok:
            h["online_store"].set("ok", "reopened")
            # What it serves may be another schema than before: judge the champions against it.
            state.models.expected_hashes = schema_hashes(self.store, list(SERVICE_OF_HEAD.values()))
            if state.models.current is not None and any(
                state.models.mismatch(head) for head in state.models.current.scorer.heads()
            ):
                state.models.current = None
            self.refresh_models.judge_again()
            state.refresh_models()
            state.refresh_snapshot()
        # Registry.
        problem = self.registry_ok()
        if problem is not None:
            h["registry"].set("down", problem)
        elif not h["registry"].ok or state.models.current is None:
            state.refresh_models()
        # Capacity counter.
        availability = state.availability
        if isinstance(availability, ReconnectingAvailability):
            try:
                availability.ping()
            except Exception as e:
                h["availability"].set("down", str(e))
                if availability.reopen():
                    h["availability"].set("ok", "reconnected")
            else:
                if not h["availability"].ok and availability.reseed():
                    h["availability"].set("ok", "reconnected")


def load_serving_state(
    settings: Settings,
    now: datetime,
    config: ServingConfig | None = None,
    impressions: ImpressionSink | None = None,
    require_model: bool = True,
    clock: Callable[[], datetime] | None = None,
    follow_published: bool = False,
) -> ServingState:
    """The serving state from what the batch side published, whatever of it is there.

    ``now`` is the instant loaded; ``clock`` the request clock (default: pinned to ``now``, as the
    demo serves its history's last instant; a live service passes the wall clock).
    ``follow_published`` makes the clock the instant of the newest published catalog instead: for
    a simulated platform that runs on its own clock (``simulator.platform``) and sends it with every
    request, the service's own instant moves as the batch side publishes. Impressions go
    to the landing zone unless ``impressions`` is given. Each dependency that is missing starts
    in its fallback and is picked up by the dependency checks once it appears: no index (scan the
    snapshot), no online store (the catalog's events by popularity, users from their homes), no
    registry (popularity). Only a missing catalog stops the start (``NotPublished``): there would
    be no events to serve. ``require_model`` also refuses to start without a usable champion.
    """
    now = now.astimezone(UTC)
    cfg = config or ServingConfig()
    started = time.time()
    sources = LiveSources(settings, clock or (lambda: now))
    try:
        sources.follow_catalog()
    except Exception as e:
        raise NotPublished(f"no usable published catalog: {e}") from e
    catalog = sources.catalog
    assert catalog is not None
    if follow_published:
        now = catalog.as_of
        sources.clock = lambda: sources.catalog.as_of if sources.catalog is not None else now
    request_clock = sources.clock
    notes: dict[str, str] = {}
    try:
        live: Any = load_live_index(geo_store(settings), sources.tower_version)
    except Exception as e:
        live, notes["index"] = None, f"{type(e).__name__}: {e}"
    if not sources.open_store():
        notes["online_store"] = sources.store_error
    expected = (
        schema_hashes(sources.store, list(SERVICE_OF_HEAD.values())) if sources.store is not None else {}
    )
    models = ModelHolder(expected, live.tower_version if live is not None else sources.tower_version)
    try:
        sources.refresh_models(models)
    except Exception as e:
        notes["registry"] = f"{type(e).__name__}: {e}"
        if require_model:
            raise NotPublished(f"no usable champion: {e}") from e
    if require_model and models.current is None:
        raise NotPublished(f"no champion fits the online store's schema: {models.last_refusal}")
    if models.current is not None and models.current.scorer.rsvp is not None:
        sources.embedding_dim = models.current.scorer.rsvp.embedding_dim

    def seed(availability: WritableAvailability) -> None:
        if sources.catalog is not None:
            seed_availability(availability, sources.catalog)

    availability = ReconnectingAvailability(settings, seed)
    if availability.inner is None:
        notes["availability"] = availability.error

    def follow_index(served: str | None) -> tuple[GeoIndex, str] | None:
        """A newly published index, if the pointer moved; refused when built with another tower
        (this process's snapshot and champions read that tower's embeddings: restart to move)."""
        pointer = geo_store(settings).read_pointer()
        if pointer is None or pointer.version == served:
            return None
        fresh = load_live_index(geo_store(settings), sources.tower_version)
        return fresh.index, fresh.version

    state = ServingState(
        config=cfg,
        snapshot=sources.snapshot(now),
        models=models,
        users=CachedUserSource(sources, cfg.user_cache_size, home_of=sources.home_of),
        availability=availability,
        impressions=impressions if impressions is not None else LandingImpressionLog(settings.landing.root),
        index=live.index if live is not None else None,
        index_version=live.version if live is not None else None,
        clock=request_clock,
        refresh_snapshot_fn=sources.refresh_snapshot,
        refresh_models_fn=sources.refresh_models,
        refresh_index_fn=follow_index,
        as_of=catalog.as_of,
        as_of_fn=lambda: sources.catalog.as_of if sources.catalog is not None else None,
        max_state_age_s=settings.serving.max_state_age_hours * 3600.0,
        check_dependencies_fn=sources.check,
    )
    for component, why in notes.items():
        state.health[component].set("down", why)
    if "online_store" in notes:
        state.health["snapshot"].set("degraded", "no online store: events without features, by popularity")
    if models.current is not None:
        state.health["model"].set("ok", models.current.version)
    elif models.last_refusal:
        state.health["model"].set("down", f"refused: {models.last_refusal}; serving metro popularity")
    log.info(
        "serving state as of %s in %.1f s: index %s, catalog %s, model %s, %d events, down: %s",
        now.isoformat(), time.time() - started, state.index_version, catalog.version, state.model_version(),
        len(state.snapshot), sorted(notes) or "nothing",
    )  # fmt: skip
    return state
