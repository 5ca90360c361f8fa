"""The Feast online store as serving reads it: the store built from settings (online only, no
Spark), view reads with the offline join's TTL rule, and the schema hash a model carries.

* ``repo_config_dict(settings, offline_store)``: ``feature_store.yaml`` as a dict, one source for
  every reader and writer (the batch side adds its Spark offline store, ``pipelines.feast_store``).
* ``open_online_store(settings)``: a ``FeatureStore`` over the published registry and online
  store; it refuses to start when either is missing instead of creating an empty one.
* ``OnlineView`` / ``read_online_view`` / ``online_features``: rows as the point-in-time join
  would see them at ``now`` (Feast does not apply TTL online).
* ``service_feature_names`` / ``service_schema_hash`` / ``schema_hash``: a service's inputs.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from conf import Settings

if TYPE_CHECKING:
    import pandas as pd
    from feast import FeatureService, FeatureStore

FEATURE_STORE_YAML = "feature_store.yaml"


class OnlineStoreMissing(FileNotFoundError):
    """The registry or the online store the settings name is not there (never created empty)."""


def feast_dir(settings: Settings) -> Path:
    """Local folder for Feast's generated files (the YAML; the registry and SQLite in ``local``)."""
    return settings.home / "feast"


def repo_config_dict(settings: Settings, offline_store: dict[str, Any] | None = None) -> dict[str, Any]:
    """``feature_store.yaml`` as a dict, derived from settings.

    ``offline_store`` is the batch side's (Spark, over the gold Delta tables); readers of the
    online store leave it out and get the same store type without any Spark settings.
    """
    return {
        "project": settings.feast.project,
        "provider": "local",
        "registry": {
            "registry_type": "file",
            "path": settings.feast.registry,
            # A long-lived reader (serving) picks up a new apply within a minute.
            "cache_ttl_seconds": 60,
        },
        "online_store": dict(settings.feast.online_store),
        "offline_store": offline_store
        or {"type": "spark", "staging_location": settings.feast.staging_location},
        "batch_engine": {"type": "local"},
        # The newest row per key is picked in Spark, not after pulling every version to the driver.
        "materialization": {"pull_latest_features": True},
        "entity_key_serialization_version": 3,
    }


def check_online_store(settings: Settings) -> None:
    """Raise ``OnlineStoreMissing`` unless the registry and the online store exist and hold tables.

    A check of the real resource: Feast would otherwise create an empty SQLite file (and an empty
    registry) where the published one was expected, and then answer every read with nothing.
    """
    registry = settings.feast.registry
    if "://" not in registry and not Path(registry).is_file():
        raise OnlineStoreMissing(f"no Feast registry at {registry} (run `turnout features` first)")
    online = settings.feast.online_store
    if online.get("type") == "sqlite":
        path = Path(online["path"])
        if not path.is_file() or path.stat().st_size == 0:
            raise OnlineStoreMissing(f"no online store at {path} (run `turnout materialize` first)")
        try:
            with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
                tables = db.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table'").fetchone()
        except sqlite3.Error as e:
            raise OnlineStoreMissing(f"online store {path} cannot be read: {e}") from e
        if not tables or tables[0] == 0:
            raise OnlineStoreMissing(f"online store {path} holds no tables (never materialized)")


def open_online_store(settings: Settings) -> FeatureStore:
    """The published online store for reading (serving): checked first, never created."""
    from feast import FeatureStore, RepoConfig

    check_online_store(settings)
    return FeatureStore(config=RepoConfig(repo_path=feast_dir(settings), **repo_config_dict(settings)))


def _within_ttl(values: list[Any], stamps: list[Any] | None, now_s: float, ttl_s: float) -> list[Any]:
    """Values stamped before ``now - ttl`` (Feast does not apply TTL online) or after ``now`` (the
    store is ahead of the instant read) become missing, as the point-in-time join reads them."""
    if stamps is None:
        return values
    oldest = now_s - ttl_s if ttl_s > 0 else -np.inf
    return [
        v if ts is not None and oldest <= ts <= now_s else None for v, ts in zip(values, stamps, strict=True)
    ]


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
        """Each feature's values for ``keys`` of ``key``, with the TTL rule of ``_within_ttl``."""
        response = store.get_online_features(
            features=[f"{self.name}:{n}" for n in self.features], entity_rows=[{key: k} for k in keys]
        ).to_dict(include_event_timestamps=True)
        now_s = now.timestamp()
        return {
            name: _within_ttl(response[name], response.get(f"{name}__ts"), now_s, self.ttl_s)
            for name in self.features
        }


def read_online_view(
    store: FeatureStore, view_name: str, key: str, values: Iterable[Any], now: datetime
) -> pd.DataFrame:
    """Every feature of one online view for ``values`` of its key, one row per distinct value."""
    import pandas as pd

    keys = sorted({str(v) for v in values if v is not None and not (isinstance(v, float) and np.isnan(v))})
    view = OnlineView.of(store, view_name)
    if not keys:
        return pd.DataFrame({key: [], **{n: [] for n in view.features}})
    return pd.DataFrame({key: keys, **view.read(store, key, keys, now)})


def online_features(
    store: FeatureStore, service_name: str, entity_rows: list[dict[str, Any]], now: datetime
) -> dict[str, list[Any]]:
    """A whole feature service (on-demand views included) for ``entity_rows``, TTL applied."""
    service = store.get_feature_service(service_name)
    response = store.get_online_features(features=service, entity_rows=entity_rows).to_dict(
        include_event_timestamps=True
    )
    ttls = {v.name: v.ttl for v in store.list_feature_views()}
    now_s = now.timestamp()
    out: dict[str, list[Any]] = {}
    for projection in service.feature_view_projections:
        ttl = ttls.get(projection.name)
        ttl_s = ttl.total_seconds() if ttl is not None else 0.0
        for field in projection.features:
            stamps = response.get(f"{field.name}__ts") if ttl_s > 0 else None
            out[field.name] = _within_ttl(response[field.name], stamps, now_s, ttl_s)
    return out


def service_feature_names(service: FeatureService) -> list[str]:
    """The column names a service's features get in a frame (short names, service order)."""
    return [field.name for projection in service.feature_view_projections for field in projection.features]


def declared_service(name: str) -> FeatureService:
    """A feature service as ``features/`` declares it (what a model is trained on)."""
    from features.repo import FEATURE_SERVICES

    services = {s.name: s for s in FEATURE_SERVICES}
    if name not in services:
        raise KeyError(f"no feature service {name!r}; known: {sorted(services)}")
    return services[name]


def service_schema(service: FeatureService) -> list[tuple[str, str]]:
    """``(view:feature, dtype)`` for every feature of ``service``, sorted."""
    return sorted(
        (f"{projection.name_to_use()}:{field.name}", str(field.dtype))
        for projection in service.feature_view_projections
        for field in projection.features
    )


def service_schema_hash(service: FeatureService) -> str:
    """sha256 of ``service_schema(service)``; the service's own name is not part of it."""
    payload = json.dumps(service_schema(service), separators=(",", ":"))
    return hashlib.sha256(payload.encode()).hexdigest()


def schema_hash(service_name: str, store: FeatureStore | None = None) -> str:
    """The schema hash of a feature service: from ``features/`` by default (what a model is
    trained on), or from a store's registry (what serving can fetch). Equal hashes mean the same
    inputs, by name and type."""
    if store is not None:
        return service_schema_hash(store.get_feature_service(service_name, allow_cache=False))
    return service_schema_hash(declared_service(service_name))


def schema_hashes(store: FeatureStore, services: Sequence[str]) -> dict[str, str]:
    """What the store's registry serves for each of ``services``, as schema hashes."""
    return {service: schema_hash(service, store=store) for service in services}
