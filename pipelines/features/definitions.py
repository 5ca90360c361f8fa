"""``features/`` bound to the profile's lake, and ``feast apply`` only when the definitions changed.

* ``bound_definitions(settings)``: every object of ``features/`` with each gold source's path
  template resolved against ``settings.lake`` (copies: Feast mutates what it applies).
* ``definitions_hash(settings)``: the hash of what would be registered (registry bookkeeping out).
* ``apply_definitions(settings)``: registers ``features/`` when its hash differs from the
  registry's, deleting what the definitions dropped, and checks the registry round-trips it.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from conf import Settings
from pipelines.feast_store import feast_output_to_log, get_store

if TYPE_CHECKING:
    from feast import Entity, FeatureService, FeatureStore, FeatureView, OnDemandFeatureView
    from feast.data_source import DataSource
    from feast.infra.offline_stores.contrib.spark_offline_store.spark_source import SparkSource
    from google.protobuf.message import Message

log = logging.getLogger(__name__)

# Registry fields that change on every apply or materialization (timestamps, intervals, the
# owning project) or that are not stable across processes (a UDF's pickled bytes: its source
# text stays in the hash): none of them is part of what a definition *is*.
_VOLATILE_FIELDS = frozenset(
    {"meta", "project", "created_timestamp", "last_updated_timestamp", "materialization_intervals", "body"}
)
_PLACEHOLDER_PREFIX = "__dummy"


def gold_source_of(view: FeatureView) -> SparkSource:
    """The Spark source a gold feature view reads (every view in ``features/`` has one)."""
    from feast.infra.offline_stores.contrib.spark_offline_store.spark_source import SparkSource

    source = view.batch_source
    if not isinstance(source, SparkSource) or not source.path:
        raise TypeError(f"feature view {view.name} does not read a gold Spark source: {source!r}")
    return source


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
        with feast_output_to_log():
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
