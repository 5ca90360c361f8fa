"""Everything a feed request reads, in one object the app factory takes (tests hand in fakes).

Each dependency can fail on its own, and each failure has a defined fallback that keeps the feed
non-empty and says so (``served_by``): the model holder keeps the last good model and refuses
one trained on another feature schema; the snapshot keeps serving when a refresh fails; the
user-row source falls back to the last good row it saw, then to the user's home with cold-start
features. ``health`` holds one ``Component`` per dependency (what /healthz and /metrics show);
``check_dependencies`` runs the real checks of the live service (``serving.live``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import numpy as np

from contracts.instants import iso_z
from models.heads import SERVICE_OF_HEAD, Head, Scorer
from published.geo_index import GeoIndex
from serving.availability import AvailabilityStore, Blocked
from serving.config import ServingConfig
from serving.features import UserRow
from serving.impressions import ImpressionSink
from serving.snapshot import I64, EventSnapshot

log = logging.getLogger(__name__)


class UserSource(Protocol):
    """The online store's user row (None: no such user) and the user's friends."""

    def get(self, user_id: str, now: datetime) -> UserRow | None: ...


@dataclass(frozen=True)
class LoadedModel:
    scorer: Scorer
    version: str  # e.g. "rsvp:v3+attend:v2": what the impression log records


class ModelHolder:
    """The serving model, swapped only for one whose feature schema matches what serving fetches.

    ``expected_hashes`` maps a feature service to the schema hash of what the online store can
    serve for it; a head trained on another schema would read columns that mean something else
    (or nothing), so it is refused and the last good model keeps serving.
    """

    def __init__(
        self, expected_hashes: dict[str, str] | None = None, expected_tower: str | None = None
    ) -> None:
        self.expected_hashes = dict(expected_hashes or {})
        self.expected_tower = expected_tower
        self.current: LoadedModel | None = None
        self.last_refusal: str | None = None
        self._lock = threading.Lock()

    def mismatch(self, head: Head) -> str | None:
        """Why ``head`` cannot read what serving fetches (None: it can)."""
        service = SERVICE_OF_HEAD[head.name]
        expected = self.expected_hashes.get(service)
        if expected is not None and head.schema_hash != expected:
            return (
                f"head {head.name} was trained on schema {head.schema_hash[:12]}, "
                f"the online store serves {service} as {expected[:12]}"
            )
        if (
            head.uses_embeddings()
            and self.expected_tower is not None
            and head.tower_version != self.expected_tower
        ):
            return (
                f"head {head.name} was trained on embeddings of tower {head.tower_version}, "
                f"the online store serves tower {self.expected_tower}'s"
            )
        return None

    def offer(self, rsvp: Head, attend: Head | None, version: str) -> bool:
        """Install ``rsvp`` (+ ``attend``) unless a head's feature schema or embedding tower differs
        from what serving fetches; a refused model leaves the last good one serving."""
        for head in (rsvp, attend):
            problem = self.mismatch(head) if head is not None else None
            if problem is not None:
                self.last_refusal = (
                    f"{version}: {problem}; keeping {self.current.version if self.current else 'no model'}"
                )
                log.error("refused model %s", self.last_refusal)
                return False
        with self._lock:
            self.current = LoadedModel(Scorer(rsvp, attend), version)
        log.info("serving model %s", version)
        return True


class CachedUserSource:
    """Wraps a user source: remembers the last good row per user for when the store is down.

    Returns ``(row, status)`` with status ``ok``, ``cached`` (store down, last good row) or
    ``unavailable`` (store down, never seen: the user's home with cold-start features, from
    ``home_of``, or nothing for a user nobody published).
    """

    def __init__(
        self, inner: UserSource, capacity: int, home_of: Callable[[str], UserRow | None] | None = None
    ) -> None:
        self.inner = inner
        self.capacity = capacity
        self.home_of = home_of or (lambda user_id: None)
        self._rows: OrderedDict[str, UserRow | None] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, user_id: str, now: datetime) -> tuple[UserRow | None, str]:
        try:
            row = self.inner.get(user_id, now)
        except Exception as e:  # any store failure: the feed must still be served
            log.warning("online store read for user %s failed: %s", user_id, e)
            with self._lock:
                if user_id in self._rows:
                    return self._rows[user_id], "cached"
            return self.home_of(user_id), "unavailable"
        with self._lock:
            self._rows[user_id] = row
            self._rows.move_to_end(user_id)
            while len(self._rows) > self.capacity:
                self._rows.popitem(last=False)
        return row, "ok"


@dataclass
class Component:
    """One dependency's health as /healthz reports it."""

    name: str = ""
    status: str = "ok"  # ok | degraded | down
    detail: str = ""
    since: float = field(default_factory=time.time)

    def set(self, status: str, detail: str = "") -> None:
        if status != self.status:
            self.since = time.time()
            say = log.info if status == "ok" else log.warning
            say("dependency %s: %s -> %s %s", self.name, self.status, status, detail)
        self.status, self.detail = status, detail

    @property
    def ok(self) -> bool:
        return self.status == "ok"


COMPONENTS = (
    "index",
    "catalog",
    "snapshot",
    "model",
    "registry",
    "online_store",
    "availability",
    "impression_log",
)


@dataclass
class ServingState:
    """The parts of one serving process; swapped atomically by refreshes, read by requests."""

    config: ServingConfig
    snapshot: EventSnapshot
    models: ModelHolder
    users: CachedUserSource
    availability: AvailabilityStore
    impressions: ImpressionSink
    index: GeoIndex | None = None
    index_version: str | None = None
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    seed: int = 0
    refresh_snapshot_fn: Callable[[], EventSnapshot] | None = None
    refresh_models_fn: Callable[[ModelHolder], None] | None = None
    # Given the version served, a newer published index and its version (None: unchanged).
    refresh_index_fn: Callable[[str | None], tuple[GeoIndex, str] | None] | None = None
    health: dict[str, Component] = field(default_factory=dict)
    # Last sold-out/cancelled set read successfully: used (and reported) when the counter is down.
    last_unavailable: frozenset[str] = frozenset()
    # The instant the published state describes (None: unknown) and how far past it a request may
    # ask for an instant before the answer would be made of stale counters and expired features.
    as_of: datetime | None = None
    # The published state's instant after a refresh (the catalog it followed); None: fixed.
    as_of_fn: Callable[[], datetime | None] | None = None
    max_state_age_s: float = 24 * 3600.0
    # The live service's real dependency checks (serving.live); None: nothing to check (tests).
    check_dependencies_fn: Callable[[ServingState], None] | None = None
    _rows_cache: tuple[int, int, I64] | None = None

    def __post_init__(self) -> None:
        for name in COMPONENTS:
            self.health.setdefault(name, Component(name))
        if self.index is None:
            self.health["index"].set("down", "no published index loaded: retrieval scans the snapshot")
        if self.models.current is None:
            self.health["model"].set("down", "no model loaded: serving metro popularity")

    def index_rows(self, index: GeoIndex) -> I64:
        """Snapshot row of each index posting (-1: not in the snapshot), cached per pair."""
        key = (id(index), id(self.snapshot))
        cached = self._rows_cache
        if cached is None or cached[:2] != key:
            cached = (*key, self.snapshot.rows_for(np.asarray(index.event_ids)))
            self._rows_cache = cached
        return cached[2]

    def refresh_snapshot(self) -> bool:
        """Swap in a fresh snapshot; on failure keep serving the last one and report it."""
        if self.refresh_snapshot_fn is None:
            return False
        try:
            fresh = self.refresh_snapshot_fn()
        except Exception as e:
            log.warning(
                "snapshot refresh failed, keeping the snapshot from %s: %s", self.snapshot.built_at_s, e
            )
            self.health["online_store"].set("down", f"snapshot refresh failed: {e}")
            self.health["snapshot"].set("degraded", "serving the last good snapshot")
            return False
        self.snapshot = fresh
        if self.as_of_fn is not None:
            self.as_of = self.as_of_fn() or self.as_of
        self.health["online_store"].set("ok")
        self.health["snapshot"].set("ok")
        return True

    def refresh_index(self) -> bool:
        """Follow the published index pointer; on failure (or a refusal) keep the one served."""
        if self.refresh_index_fn is None:
            return False
        try:
            fresh = self.refresh_index_fn(self.index_version)
        except Exception as e:
            log.warning("index refresh failed, keeping index %s: %s", self.index_version, e)
            self.health["index"].set("degraded", f"keeping {self.index_version}: {e}")
            return False
        if fresh is None:
            return False
        self.index, self.index_version = fresh
        self.health["index"].set("ok", f"moved to {self.index_version}")
        log.info("serving index %s", self.index_version)
        return True

    def check_dependencies(self) -> None:
        """Check every dependency for real (files, connections, disk); fall back and recover."""
        if self.check_dependencies_fn is not None:
            self.check_dependencies_fn(self)

    def request_window(self) -> tuple[datetime, datetime] | None:
        """The instants a request may ask about: from the published state's instant to
        ``max_state_age_s`` after it (None: any)."""
        if self.as_of is None:
            return None
        return self.as_of, self.as_of + timedelta(seconds=self.max_state_age_s)

    def stale(self, at: datetime) -> bool:
        """Whether ``at`` lies beyond what the published state can answer for."""
        window = self.request_window()
        return window is not None and at > window[1]

    def refresh_models(self) -> None:
        """Ask the registry for the champions (the caller's function offers them to the holder)."""
        if self.refresh_models_fn is None:
            return
        try:
            self.refresh_models_fn(self.models)
        except LookupError as e:  # the registry answered: there is no champion (yet)
            self.health["registry"].set("ok")
            if self.models.current is None:
                self.health["model"].set("down", f"{e}: serving metro popularity")
            return
        except Exception as e:
            log.warning("model refresh failed, keeping %s: %s", self.model_version(), e)
            self.health["registry"].set("down", str(e))
            self.health["model"].set(
                "degraded" if self.models.current else "down",
                f"registry unreachable: keeping {self.model_version()}",
            )
            return
        self.health["registry"].set("ok")
        if self.models.last_refusal:
            self.health["model"].set("degraded", f"refused: {self.models.last_refusal}")
        elif self.models.current is not None:
            self.health["model"].set("ok", self.models.current.version)

    def model_version(self) -> str:
        return self.models.current.version if self.models.current else "popularity"

    def blocked(self, user_id: str | None) -> tuple[Blocked, bool]:
        """The hard-filter sets and whether they came from the live counter."""
        try:
            b = self.availability.blocked(user_id)
        except Exception as e:
            log.warning("availability store read failed: %s", e)
            self.health["availability"].set("down", str(e))
            return Blocked(self.last_unavailable, frozenset()), False
        self.last_unavailable = b.unavailable
        self.health["availability"].set("ok")
        return b, True

    def friends_going(self, friends: tuple[str, ...]) -> dict[str, int]:
        try:
            return self.availability.friends_going(list(friends))
        except Exception as e:
            log.warning("friends-going read failed: %s", e)
            return {}

    def health_report(self) -> dict[str, Any]:
        """Per component: status, why, since when (UTC and seconds); the state's data age measured
        on the service's own clock, and ``stale`` once it is older than a request may ask for."""
        wall = time.time()
        components: dict[str, dict[str, Any]] = {
            name: {
                "status": c.status,
                "detail": c.detail,
                "since": iso_z(c.since),
                "since_s": round(wall - c.since, 1),
            }
            for name, c in self.health.items()
        }
        at = self.clock()
        snap = components["snapshot"]
        snap["events"] = len(self.snapshot)
        snap["source"] = self.snapshot.source
        snap["data_as_of"] = iso_z(self.snapshot.built_at_s)
        snap["data_age_s"] = round(at.timestamp() - self.snapshot.built_at_s, 1)
        components["catalog"]["as_of"] = None if self.as_of is None else iso_z(self.as_of)
        components["index"]["version"] = self.index_version
        path_for = getattr(self.impressions, "path_for", None)
        components["impression_log"]["path"] = str(path_for(iso_z(at))) if path_for else None
        components["model"]["version"] = self.model_version()
        # compiled (native trees shipped with the model) or lightgbm (its own predictor)
        components["model"]["scoring"] = self.models.current.scorer.backend() if self.models.current else None
        degraded = [name for name, c in self.health.items() if not c.ok]
        if self.stale(at):
            degraded.append("state")
        return {
            "status": "ok" if not degraded else "degraded",
            "degraded": degraded,
            "served_at": iso_z(at),
            "stale": self.stale(at),
            "components": components,
        }
