"""Feast as a pipeline stage: the store built from settings, apply-when-changed, incremental
materialization that never moves an online value backwards, and the schema hash models carry.

* ``get_store(settings)``: a ``FeatureStore`` configured in code from ``conf`` (SQLite online store
  in ``local``, Redis in ``cluster``; Spark offline store over the gold Delta tables).
  ``write_feature_store_yaml(settings)`` writes the same configuration out for the ``feast`` CLI.
* ``apply_definitions(settings)``: registers ``features/`` only when its hash differs from the
  hash of what the registry holds.
* ``materialize(settings, end)``: per feature view, the window from the view's last materialized
  end to ``end``; never a window that ends before it (see the function for why that is the guard).
* ``historical_features(settings, entity_df, service)``: the point-in-time frame for training,
  hiding values written after each label instant.
* ``schema_hash(service)``: what a model records and serving compares.

Feast's Spark offline store takes the thread's active Spark session, or else builds one from
``spark_conf``; every entry point here calls ``get_spark(settings)`` first so it reuses the one
Delta-configured session (``pipelines.spark``).
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import io
import json
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from conf import Settings

if TYPE_CHECKING:
    import pandas as pd
    from feast import Entity, FeatureService, FeatureStore, FeatureView, OnDemandFeatureView, RepoConfig
    from feast.data_source import DataSource
    from feast.infra.offline_stores.contrib.spark_offline_store.spark_source import SparkSource
    from google.protobuf.message import Message
    from pyspark.sql import DataFrame as SparkDataFrame
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

FEATURE_STORE_YAML = "feature_store.yaml"
# Registry fields that change on every apply or materialization (timestamps, intervals, the
# owning project) or that are not stable across processes (a UDF's pickled bytes: its source
# text stays in the hash): none of them is part of what a definition *is*.
_VOLATILE_FIELDS = frozenset(
    {"meta", "project", "created_timestamp", "last_updated_timestamp", "materialization_intervals", "body"}
)


_PLACEHOLDER_PREFIX = "__dummy"
_ROW = "_turnout_row"


# --------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------


def feast_dir(settings: Settings) -> Path:
    """Local folder for Feast's generated files (the YAML; the registry and SQLite in ``local``)."""
    return settings.home / "feast"


def repo_config_dict(settings: Settings, offline: bool = True) -> dict[str, Any]:
    """``feature_store.yaml`` as a dict, derived from settings: one source for YAML and code.

    ``offline=False`` leaves the Spark settings out (an online-only reader needs no Delta jars).
    """
    from pipelines.spark import spark_conf

    offline_store: dict[str, Any] = {"type": "spark", "staging_location": settings.feast.staging_location}
    if offline:
        offline_store["spark_conf"] = spark_conf(settings)
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
        "offline_store": offline_store,
        "batch_engine": {"type": "local"},
        # The newest row per key is picked in Spark, not after pulling every version to the driver.
        "materialization": {"pull_latest_features": True},
        "entity_key_serialization_version": 3,
    }


def repo_config(settings: Settings, offline: bool = True) -> RepoConfig:
    from feast import RepoConfig

    return RepoConfig(repo_path=feast_dir(settings), **repo_config_dict(settings, offline))


def write_feature_store_yaml(settings: Settings, path: Path | None = None) -> Path:
    """Write the profile's ``feature_store.yaml`` (default ``$TURNOUT_HOME/feast/``) and return its path.

    Code never reads it (``get_store`` builds the same config in memory); it is for people and
    for read-only ``feast`` CLI commands (``feast -f <path> feature-views list``).
    """
    import yaml

    target = path or feast_dir(settings) / FEATURE_STORE_YAML
    target.parent.mkdir(parents=True, exist_ok=True)
    header = f"# Generated from conf/{settings.profile}.yaml by pipelines.features.store; do not edit.\n"
    target.write_text(header + yaml.safe_dump(repo_config_dict(settings), sort_keys=False))
    return target


def _ensure_local_dirs(settings: Settings) -> None:
    for location in (settings.feast.registry, settings.feast.online_store.get("path", "")):
        if location and "://" not in location:
            Path(location).parent.mkdir(parents=True, exist_ok=True)


def get_store(settings: Settings, offline: bool = True) -> FeatureStore:
    """The feature store for ``settings``.

    ``offline=True`` (jobs: apply, materialize, training frames) starts the Spark session first so
    Feast's offline store reuses it. Online-only readers (serving) pass ``offline=False`` and never
    start Spark: online reads and on-demand views run in-process.
    """
    from feast import FeatureStore

    if offline:
        from pipelines.spark import get_spark

        get_spark(settings)
    _ensure_local_dirs(settings)
    return FeatureStore(config=repo_config(settings, offline))


# --------------------------------------------------------------------------------------------
# Definitions: features/ bound to the profile's lake
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Definitions:
    """Every object of ``features/``, with gold paths bound to one lake root. Copies: applying
    them (Feast mutates what it applies) never touches the module-level declarations."""

    entities: list[Entity]
    data_sources: list[DataSource]
    feature_views: list[FeatureView]
    on_demand_views: list[OnDemandFeatureView]
    services: list[FeatureService]

    def objects(self) -> list[Any]:
        return [
            *self.entities,
            *self.data_sources,
            *self.feature_views,
            *self.on_demand_views,
            *self.services,
        ]


def bind_source(source: SparkSource, settings: Settings) -> SparkSource:
    """A copy of a gold source whose path template is resolved with ``settings.lake.table_path``."""
    from feast.infra.offline_stores.contrib.spark_offline_store.spark_source import SparkSource

    from features.sources import LAKE_ROOT_PLACEHOLDER

    path = settings.lake.table_path(source.tags["layer"], source.tags["table"])
    if source.path != f"{LAKE_ROOT_PLACEHOLDER}/{source.tags['layer']}/{source.tags['table']}":
        raise ValueError(f"source {source.name}: path {source.path!r} is not a lake template")
    return SparkSource(
        name=source.name,
        path=path,
        table_format=source.table_format,
        timestamp_field=source.timestamp_field,
        created_timestamp_column=source.created_timestamp_column,
        description=source.description,
        tags=dict(source.tags),
        owner=source.owner,
    )


def bound_definitions(settings: Settings) -> Definitions:
    """``features/`` with every gold source pointing at ``settings.lake``."""
    from features import repo

    sources = {s.name: bind_source(s, settings) for s in repo.GOLD_SOURCES}
    views = []
    for view in repo.FEATURE_VIEWS:
        bound = copy.copy(view)
        bound.batch_source = bound.data_source = sources[gold_source_of(view).name]
        views.append(bound)
    return Definitions(
        entities=[copy.deepcopy(e) for e in repo.ENTITIES],
        data_sources=[*sources.values(), *(copy.deepcopy(s) for s in repo.REQUEST_SOURCES)],
        feature_views=views,
        on_demand_views=[copy.deepcopy(v) for v in repo.ON_DEMAND_VIEWS],
        services=[copy.deepcopy(s) for s in repo.FEATURE_SERVICES],
    )


def _strip_volatile(message: Message) -> None:
    for field, value in message.ListFields():
        if field.name in _VOLATILE_FIELDS:
            message.ClearField(field.name)
            continue
        if field.name == "entity_columns":
            # Feast gives entity-less views (our on-demand ones) a placeholder key when it applies them.
            for item in [c for c in value if c.name.startswith(_PLACEHOLDER_PREFIX)]:
                value.remove(item)
        elif field.type == field.TYPE_MESSAGE:
            if field.message_type.GetOptions().map_entry:
                items = list(value.values())
            elif field.is_repeated:
                items = list(value)
            else:
                items = [value]
            for item in items:
                if hasattr(item, "ListFields"):
                    _strip_volatile(item)


def _object_key(obj: Any) -> str:
    return f"{type(obj).__name__}:{obj.name}"


def object_digest(obj: Any) -> str:
    """sha256 of one object's definition (its proto, minus registry bookkeeping)."""
    proto = obj.to_proto()
    _strip_volatile(proto)
    return hashlib.sha256(proto.SerializeToString(deterministic=True)).hexdigest()


def _digests(objects: Sequence[Any]) -> dict[str, str]:
    # Feast registers a placeholder entity for entity-less views on every apply.
    return {_object_key(o): object_digest(o) for o in objects if not o.name.startswith(_PLACEHOLDER_PREFIX)}


def _combined(digests: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(digests, sort_keys=True).encode()).hexdigest()


def _registry_objects(store: FeatureStore) -> list[Any]:
    return [
        *store.list_entities(allow_cache=False),
        *store.list_data_sources(allow_cache=False),
        *store.list_feature_views(allow_cache=False),
        *store.list_on_demand_feature_views(allow_cache=False),
        *store.list_feature_services(),
    ]


def _registry_exists(settings: Settings) -> bool:
    registry = settings.feast.registry
    return "://" in registry or Path(registry).exists()


def definitions_hash(settings: Settings) -> str:
    """Hash of ``features/`` as it would be registered for ``settings``."""
    return _combined(_digests(bound_definitions(settings).objects()))


def apply_definitions(settings: Settings) -> dict[str, Any]:
    """Register ``features/`` when its hash differs from the registry's, deleting what it dropped.

    Returns ``{"applied", "definitions_hash", "registry_hash", "added", "changed", "removed",
    "seconds"}``; ``registry_hash`` is the hash before this call (None for an empty registry).
    """
    started = time.perf_counter()
    definitions = bound_definitions(settings)
    wanted = _digests(definitions.objects())
    store = get_store(settings)
    registered_objects = _registry_objects(store) if _registry_exists(settings) else []
    registered = _digests(registered_objects)
    report: dict[str, Any] = {
        "definitions_hash": _combined(wanted),
        "registry_hash": _combined(registered) if registered else None,
        "added": sorted(set(wanted) - set(registered)),
        "changed": sorted(k for k in set(wanted) & set(registered) if wanted[k] != registered[k]),
        "removed": sorted(set(registered) - set(wanted)),
    }
    report["applied"] = report["definitions_hash"] != report["registry_hash"]
    if report["applied"]:
        stale = [o for o in registered_objects if _object_key(o) in set(report["removed"])]
        with _feast_output_to_log():
            store.apply(definitions.objects(), objects_to_delete=stale, partial=False)
        after = _digests(_registry_objects(get_store(settings)))
        if _combined(after) != report["definitions_hash"]:
            drift = sorted(k for k in set(after) | set(wanted) if after.get(k) != wanted.get(k))
            raise RuntimeError(f"registry does not round-trip the definitions just applied: {drift}")
    report["seconds"] = round(time.perf_counter() - started, 3)
    log.info(
        "feast apply %s (hash %s; added %s, changed %s, removed %s)",
        "ran" if report["applied"] else "skipped: registry up to date",
        report["definitions_hash"][:12],
        report["added"],
        report["changed"],
        report["removed"],
    )
    return report


# --------------------------------------------------------------------------------------------
# Materialization
# --------------------------------------------------------------------------------------------


def _utc(t: datetime) -> datetime:
    if t.tzinfo is None:
        raise ValueError(f"naive datetime {t!r}: pass an aware UTC instant")
    return t.astimezone(UTC)


class _LogWriter(io.TextIOBase):
    """Feast prints progress to stdout; route it to the log so a CLI's last line stays its summary."""

    def write(self, text: str) -> int:
        if text.strip():
            log.debug("feast: %s", text.strip())
        return len(text)


@contextlib.contextmanager
def _feast_output_to_log() -> Iterator[None]:
    with contextlib.redirect_stdout(_LogWriter()):
        yield


def last_materialized_end(view: FeatureView) -> datetime | None:
    """Where the online store's copy of ``view`` ends (None: never materialized)."""
    end = view.most_recent_end_time
    return None if end is None else _utc(end)


def gold_source_of(view: FeatureView) -> SparkSource:
    """The Spark source a gold feature view reads (every view in ``features/`` has one)."""
    from feast.infra.offline_stores.contrib.spark_offline_store.spark_source import SparkSource

    source = view.batch_source
    if not isinstance(source, SparkSource) or not source.path:
        raise TypeError(f"feature view {view.name} does not read a gold Spark source: {source!r}")
    return source


def _source_exists(spark: SparkSession, view: FeatureView) -> bool:
    from delta.tables import DeltaTable

    return bool(DeltaTable.isDeltaTable(spark, gold_source_of(view).path))


def _rows_in_window(spark: SparkSession, view: FeatureView, start: datetime, end: datetime) -> int:
    """How many keys the window writes: one row per entity key with a row in [start, end]."""
    from pyspark.sql import functions as F

    source = gold_source_of(view)
    keys = [c.name for c in view.entity_columns]
    frame = spark.read.format("delta").load(source.path)
    ts = F.col(source.timestamp_field)
    return int(frame.where(ts.between(start, end)).select(*keys).distinct().count())


def _skipped(status: str, last_end: datetime | None) -> dict[str, Any]:
    return {
        "status": status,
        "start": None,
        "end": None if last_end is None else last_end.isoformat(),
        "rows": 0,
        "seconds": 0.0,
        "rows_per_s": None,
    }


def materialize(
    settings: Settings,
    end: datetime,
    feature_views: Sequence[str] | None = None,
    lookback: timedelta | None = None,
) -> dict[str, Any]:
    """Bring the online store up to ``end``: per view, the window after its last materialized end.

    * **Incremental and contiguous**: a view's window starts where its last one ended (the
      registry records every window), reaching back ``lookback`` more (default: the gold jobs'
      ``LATE_ARRIVAL_WINDOW``) because the jobs may still write rows stamped up to that far in
      the past; no window starts before ``end - ttl`` (older rows are past their TTL offline
      too, so serving them would be skew). A view never materialized starts at ``end - ttl``.
    * **Idempotent**: ``end`` at or before the last end writes nothing (``up_to_date`` /
      ``behind``), so re-running an interval is a no-op; a run killed after writing but before
      recording its window rewrites the same rows.
    * **Never backwards**: Feast writes, per key, the newest row *inside the window*. A window
      ending before the last end could overwrite a newer value with an older one, and the SQLite
      online store does not compare event times (Redis does). Every window here ends at or after
      the last end, so the row it writes for a key is at least as new as the one online, whatever
      its start; windows that would end earlier are refused (skipped, reported ``behind``).

    A view whose gold table does not exist yet is skipped (``no_source_table``).
    Returns ``{"end", "views": {name: {"status", "start", "end", "rows", "seconds", "rows_per_s"}},
    "rows", "seconds"}``.
    """
    if lookback is None:
        from pipelines.features.jobs import LATE_ARRIVAL_WINDOW

        lookback = LATE_ARRIVAL_WINDOW
    from pipelines.spark import get_spark

    end = _utc(end)
    started = time.perf_counter()
    spark = get_spark(settings)
    store = get_store(settings)
    wanted = set(feature_views) if feature_views is not None else None
    report: dict[str, Any] = {"end": end.isoformat(), "views": {}}
    views = [v for v in store.list_feature_views(allow_cache=False) if wanted is None or v.name in wanted]
    missing = (wanted or set()) - {v.name for v in views}
    if missing:
        raise ValueError(f"no such feature views in the registry: {sorted(missing)}")
    for view in sorted(views, key=lambda v: v.name):
        last_end = last_materialized_end(view)
        if last_end is not None and end <= last_end:
            if end < last_end:
                log.warning(
                    "materialize %s: refusing a window ending %s, before the online store's %s",
                    view.name,
                    end.isoformat(),
                    last_end.isoformat(),
                )
            report["views"][view.name] = _skipped("up_to_date" if end == last_end else "behind", last_end)
            continue
        if not _source_exists(spark, view):
            log.warning("materialize %s: no gold table at %s yet", view.name, gold_source_of(view).path)
            report["views"][view.name] = _skipped("no_source_table", last_end)
            continue
        if view.ttl is None or view.ttl.total_seconds() <= 0:
            raise ValueError(f"feature view {view.name} needs a positive TTL to be materialized")
        oldest = end - view.ttl
        start = oldest if last_end is None else max(last_end - lookback, oldest)
        view_started = time.perf_counter()
        rows = _rows_in_window(spark, view, start, end)
        with _feast_output_to_log():
            store.materialize(start_date=start, end_date=end, feature_views=[view.name])
        seconds = time.perf_counter() - view_started
        report["views"][view.name] = {
            "status": "materialized",
            "start": start.isoformat(),
            "end": end.isoformat(),
            "rows": rows,
            "seconds": round(seconds, 3),
            "rows_per_s": round(rows / seconds, 1) if seconds > 0 else None,
        }
        log.info("materialized %s [%s, %s]: %d rows in %.1f s", view.name, start, end, rows, seconds)
    report["rows"] = sum(v["rows"] for v in report["views"].values())
    report["seconds"] = round(time.perf_counter() - started, 3)
    return report


def materialized_intervals(settings: Settings) -> dict[str, list[tuple[str, str]]]:
    """Every view's recorded materialization windows, oldest first (for reports and tests)."""
    store = get_store(settings)
    return {
        v.name: [(_utc(s).isoformat(), _utc(e).isoformat()) for s, e in sorted(v.materialization_intervals)]
        for v in store.list_feature_views(allow_cache=False)
    }


# --------------------------------------------------------------------------------------------
# Reading: the training frame, and the schema models carry
# --------------------------------------------------------------------------------------------


def service_feature_names(service: FeatureService) -> list[str]:
    """The column names a service's features get in a frame (short names, service order)."""
    return [field.name for projection in service.feature_view_projections for field in projection.features]


def historical_features(
    settings: Settings,
    entity_df: pd.DataFrame | SparkDataFrame,
    features: str | Sequence[str],
    filter_by_created: bool = True,
) -> pd.DataFrame:
    """Point-in-time features for each row of ``entity_df``: the training frame.

    ``features`` is a feature service name (training reads the same service serving does) or,
    for tests and analysis, a list of ``view:feature`` references. ``entity_df`` holds the join
    keys, ``event_timestamp`` (the label instant, aware UTC) and the request inputs of any
    on-demand view requested (``request_lat``, ``request_lng``, ``request_ts``,
    ``request_utc_offset_min``); other columns are carried through.

    A row sees, per view, the newest value with ``event_timestamp <= T`` *and* ``created <= T``
    (and within the view's TTL): ``created_timestamp_column`` alone only breaks ties, so a value
    written after T (a late or recomputed row) would otherwise leak into the past. With rows
    stamped ``created`` at write time, this is what serving could have read at T, up to the
    materialization lag. ``filter_by_created=False`` drops the second condition: only for history
    rebuilt in one batch, whose ``created`` is the rebuild's time and says nothing about when a
    value was known (every row would be hidden); ``event_timestamp`` alone then decides.

    A pandas ``entity_df`` comes back in order (same index), its columns followed by the
    features. A Spark DataFrame (for large sets: a pandas frame becomes an in-memory relation that
    the join's plan copies once per feature view, and ~400k rows exhaust the driver's heap) comes
    back in no particular order. The result is read through Feast's staging location (Spark writes
    Parquet, pyarrow reads it): ``to_df`` would collect it on the driver's JVM heap, and
    ``to_spark_df`` would skip the on-demand views, which Feast applies in ``to_df``/``to_arrow``.
    """
    import pandas as pd

    store = get_store(settings)
    refs: FeatureService | list[str]
    if isinstance(features, str):
        refs = store.get_feature_service(features)
        names = service_feature_names(refs)
    else:
        refs, names = list(features), [ref.split(":", 1)[1] for ref in features]
    if _ROW in entity_df.columns:
        raise ValueError(f"entity_df may not have a column named {_ROW}")
    _clear_old_staging(settings)
    if not isinstance(entity_df, pd.DataFrame):
        # The Spark offline store takes a Spark DataFrame; FeatureStore's annotation omits it.
        job = store.get_historical_features(
            entity_df=entity_df,  # type: ignore[arg-type]
            features=refs,
            filter_by_created_timestamp=filter_by_created,
        )
        result = job.to_arrow().to_pandas()
        result["event_timestamp"] = pd.to_datetime(result["event_timestamp"], utc=True)
        return result[[*entity_df.columns, *names]]
    # The Spark join does not keep the entity frame's order; a row number puts it back.
    numbered = entity_df.assign(**{_ROW: range(len(entity_df))})
    job = store.get_historical_features(
        entity_df=numbered, features=refs, filter_by_created_timestamp=filter_by_created
    )
    frame = job.to_arrow().to_pandas().sort_values(_ROW).set_index(_ROW)
    frame.index = entity_df.index
    return frame[[*entity_df.columns, *names]]


def _clear_old_staging(settings: Settings, older_than_s: float = 6 * 3600) -> None:
    """Remove join results a local staging folder kept from earlier reads (Feast never does)."""
    import shutil
    import time

    root = Path(settings.feast.staging_location)
    if not settings.feast.staging_location.startswith("/") or not root.is_dir():
        return
    for child in root.iterdir():
        if child.is_dir() and time.time() - child.stat().st_mtime > older_than_s:
            shutil.rmtree(child, ignore_errors=True)


def online_features(
    store: FeatureStore, service_name: str, entity_rows: list[dict[str, Any]], now: datetime
) -> dict[str, list[Any]]:
    """The service's features for ``entity_rows`` from the online store, as serving must read them.

    Feast does not apply TTL online: a value older than its view's TTL at ``now`` is returned as
    missing here, exactly as the offline join returns it, so training and serving agree.
    Returns the service's features by short name (on-demand features included).
    """
    service = store.get_feature_service(service_name)
    response = store.get_online_features(features=service, entity_rows=entity_rows).to_dict(
        include_event_timestamps=True
    )
    ttls = {v.name: v.ttl for v in store.list_feature_views()}
    now_s = _utc(now).timestamp()
    out: dict[str, list[Any]] = {}
    for projection in service.feature_view_projections:
        ttl = ttls.get(projection.name)
        for field in projection.features:
            values = response[field.name]
            stamps = response.get(f"{field.name}__ts")
            if ttl is not None and ttl.total_seconds() > 0 and stamps is not None:
                oldest = now_s - ttl.total_seconds()
                values = [v if ts and ts >= oldest else None for v, ts in zip(values, stamps, strict=True)]
            out[field.name] = values
    return out


def service_schema(service: FeatureService) -> list[tuple[str, str]]:
    """``(view:feature, dtype)`` for every feature of ``service``, sorted."""
    return sorted(
        (f"{projection.name_to_use()}:{field.name}", str(field.dtype))
        for projection in service.feature_view_projections
        for field in projection.features
    )


def schema_hash(service_name: str, store: FeatureStore | None = None) -> str:
    """sha256 of a feature service's feature names and types.

    From the declarations in ``features/`` by default (what a model is trained on), or from a
    store's registry (what serving can fetch). Equal hashes mean the same inputs, by name and type.
    """
    if store is not None:
        service = store.get_feature_service(service_name, allow_cache=False)
    else:
        from features import repo

        services = {s.name: s for s in repo.FEATURE_SERVICES}
        if service_name not in services:
            raise KeyError(f"no feature service {service_name!r}; known: {sorted(services)}")
        service = services[service_name]
    return service_schema_hash(service)


def service_schema_hash(service: FeatureService) -> str:
    """sha256 of ``service_schema(service)``; the service's own name is not part of it."""
    payload = json.dumps(service_schema(service), separators=(",", ":"))
    return hashlib.sha256(payload.encode()).hexdigest()
