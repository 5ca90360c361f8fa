"""The index jobs as plain functions: what the DAGs, the CLI and the tests call.

* ``train_content_tower(settings, now)``: weekly; retrain the tower on RSVPs known at ``now``
  and publish it if it passes its held-out check.
* ``embed_new_events(settings, now)``: hourly; vectors for every event that lacks an up-to-date
  one under the published tower, MERGEd into ``gold.event_embeddings``.
* ``build_index_version(settings, now)``: read the live events from silver, build the geo-time
  index, stage it as version N+1 beside the live N. Publishes nothing.
* ``publish_index_version(settings, version, now)``: validate the staged version and switch the
  pointer to it in one atomic replace; N stays on disk for ``rollback_index``.
* ``build_and_publish_index(settings, now)``: the last two in one call (``turnout index``).

Each returns a JSON-able summary. ``now`` is the end of the run's data interval (UTC, aware),
never the wall clock, so a rerun of an interval rebuilds what that interval saw.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime
from pathlib import Path
from typing import Any, Final

from conf import Settings
from published.index_store import geo_store
from published.versioned import IndexValidationError, PublicationError, TowerVersionMismatch

log = logging.getLogger(__name__)

# The staged index may differ from the live one by at most this share of its events. An hourly
# rebuild moves a few percent (an hour of new events in, an hour of started events out); a
# larger jump is more likely a broken read of silver than a real change in the catalog.
DEFAULT_SIZE_TOLERANCE: Final = 0.5

__all__ = [
    "DEFAULT_SIZE_TOLERANCE",
    "IndexValidationError",
    "PublicationError",
    "TowerVersionMismatch",
    "build_and_publish_index",
    "build_index_version",
    "embed_new_events",
    "geo_store",
    "publish_index_version",
    "rollback_index",
    "train_content_tower",
]


def _utc(now: datetime) -> datetime:
    from contracts.instants import as_utc

    return as_utc(now)


def train_content_tower(settings: Settings, now: datetime) -> dict[str, Any]:
    """Weekly retrain of the content tower on what was known at ``now``; publishes if it passes.

    Returns ``{"status": "published" | "unchanged" | "skipped", "version", "previous_version", "pairs",
    "holdout", "similarity", "train", ...}``. Raises ``TowerQualityError`` (the previous tower
    stays live) when the new tower does not place held-out co-RSVP pairs closer than random.
    """
    from pipelines.index.tower import retrain_tower

    return retrain_tower(settings, _utc(now))


def embed_new_events(settings: Settings, now: datetime) -> dict[str, Any]:
    """Embed every event that lacks an up-to-date vector under the published tower.

    Returns ``{"status": "embedded" | "skipped", "tower_version", "candidates", "merged"}``;
    skipped when no tower has been published yet (the index then records no tower version).
    """
    from models.content_tower import embed_events
    from pipelines.index.embeddings import events_to_embed, merge_embeddings
    from pipelines.spark import get_spark
    from published.tower import load_current_tower, tower_trained_at

    now = _utc(now)
    started = time.perf_counter()
    artifact = load_current_tower(settings)
    if artifact is None:
        log.warning("no content tower published yet: nothing to embed with")
        return {
            "status": "skipped",
            "reason": "no content tower published",
            "tower_version": None,
            "candidates": 0,
            "merged": 0,
        }
    trained_at = tower_trained_at(settings, artifact.version)
    if trained_at > now:
        # Embedding an earlier interval with a tower trained on later RSVPs would put the future
        # into that interval's features (and stamp rows before the tower existed).
        log.warning("tower %s was trained at %s, after %s: not embedding", artifact.version, trained_at, now)
        return {
            "status": "skipped",
            "reason": f"published tower was trained at {trained_at.isoformat()}, after this interval",
            "tower_version": artifact.version,
            "candidates": 0,
            "merged": 0,
        }
    spark = get_spark(settings)
    todo = events_to_embed(spark, settings, artifact.version, now)
    vectors = embed_events(artifact, todo)
    merged = merge_embeddings(spark, settings, todo, vectors, artifact.version, trained_at, now)
    return {
        "status": "embedded",
        "now": now.isoformat(),
        "tower_version": artifact.version,
        "candidates": len(todo),
        "merged": merged,
        "seconds": round(time.perf_counter() - started, 2),
    }


def build_index_version(settings: Settings, now: datetime) -> dict[str, Any]:
    """Build the geo-time index of every event live at ``now`` and stage it; publish nothing.

    Returns ``{"version", "events", "cells", "tower_version", "missing_embeddings",
    "unplaceable_events", "path", "seconds"}``.
    """
    from pyspark.sql import functions as F

    from contracts.instants import to_micros
    from pipelines.index.catalog import build_catalog
    from pipelines.index.embeddings import read_embeddings
    from pipelines.index.sources import live_events, read_silver
    from pipelines.spark import get_spark
    from published.catalog import catalog_store, write_catalog
    from published.geo_index import GeoParams, build_geo_index
    from published.index_store import ids_digest, write_geo_index
    from published.tower import current_tower_version

    now = _utc(now)
    started = time.perf_counter()
    spark = get_spark(settings)
    events = read_silver(spark, settings, "events")
    venues = read_silver(spark, settings, "venues")
    if events is None or venues is None:
        raise IndexValidationError("silver.events or silver.venues does not exist yet: nothing to index")
    live = live_events(events, venues, read_silver(spark, settings, "event_cancellations"), to_micros(now))
    # The index records the tower whose vectors its events carry; every indexed event must have
    # one, or the ranker would score some candidates without their content features. The check
    # rides on the same Spark job as the read (a left join and a flag), not a second pass.
    tower_version = current_tower_version(settings)
    have = read_embeddings(spark, settings, tower_version) if tower_version is not None else None
    if have is not None:
        live = live.join(
            have.select("event_id").distinct().withColumn("_embedded", F.lit(True)), "event_id", "left"
        )
    frame = live.toPandas()
    placeable = frame["lat"].notna() & frame["lng"].notna()
    unplaceable = int((~placeable).sum())
    if unplaceable:
        log.warning("%d live events have no venue location and cannot be indexed", unplaceable)
    index = build_geo_index(frame[placeable], now, GeoParams.from_settings(settings.index))
    if tower_version is None:
        missing = 0
    elif have is None:
        missing = int(placeable.sum())
    else:
        missing = int((placeable & frame["_embedded"].isna()).sum())

    meta = {
        "source_events": int(placeable.sum()),
        "source_ids_sha256": ids_digest(frame.loc[placeable, "event_id"].to_numpy()),
        "unplaceable_events": unplaceable,
        "tower_version": tower_version,
        "missing_embeddings": int(missing),
    }

    catalog = build_catalog(spark, settings, now)

    def write_index(folder: Path) -> None:
        write_geo_index(folder, index, meta)

    def write_serving_catalog(folder: Path) -> None:
        write_catalog(folder, catalog)

    store = geo_store(settings)
    with store.locked():
        version = store.next_numbered_version()
        path = store.stage(version, write_index)
    # What serving reads from silver, under the same version number (see published.catalog).
    catalog_store(settings).stage(version, write_serving_catalog)
    summary = {
        "version": version,
        "now": now.isoformat(),
        "events": len(index),
        "cells": len(index.cells),
        "tower_version": tower_version,
        "missing_embeddings": int(missing),
        "unplaceable_events": unplaceable,
        "catalog": catalog.counts(),
        "path": str(path),
        "seconds": round(time.perf_counter() - started, 2),
    }
    log.info("staged geo index %s", summary)
    return summary


def publish_index_version(
    settings: Settings,
    version: str,
    now: datetime,
    size_tolerance: float = DEFAULT_SIZE_TOLERANCE,
) -> dict[str, Any]:
    """Validate staged ``version`` against silver's live set, the live index and the tower; switch.

    The catalog staged with it (``published.catalog``) is checked to hold every indexed event
    and switched first, so a server following both pointers never has an index whose events its
    catalog lacks. Raises ``IndexValidationError`` (listing every failed check) or
    ``TowerVersionMismatch``; in both cases the live index is untouched. Publishing the live
    version again is a no-op.
    """
    from contracts.instants import to_micros
    from published.catalog import catalog_store, read_catalog
    from published.index_store import read_geo_index, read_manifest, validate_index
    from published.tower import current_tower_version

    now = _utc(now)
    store = geo_store(settings)
    pointer = store.read_pointer()
    if pointer is not None and pointer.version == version:
        return {
            "version": version,
            "previous": pointer.previous,
            "published": False,
            "reason": "already live",
        }
    if not store.path(version).is_dir():
        raise PublicationError(f"index version {version} is not staged under {store.versions_dir}")
    index, manifest = read_geo_index(store.path(version), verify=True)
    live_manifest = read_manifest(store.path(pointer.version)) if pointer else None
    problems = validate_index(index, manifest, to_micros(now), live_manifest, size_tolerance)
    catalogs = catalog_store(settings)
    if not catalogs.path(version).is_dir():
        problems.append(f"no catalog staged as version {version}")
    else:
        listed = set(read_catalog(catalogs.path(version)).events["event_id"].astype(str))
        unlisted = len(set(map(str, index.event_ids)) - listed)
        if unlisted:
            problems.append(f"{unlisted} indexed events are missing from catalog {version}")
    if problems:
        raise IndexValidationError(f"index {version} not published: " + "; ".join(problems))
    tower = current_tower_version(settings)
    if manifest.get("tower_version") != tower:
        raise TowerVersionMismatch(
            f"index {version} was built with embeddings from tower {manifest.get('tower_version')}, "
            f"but the published tower is {tower}: rebuild after embedding with the current tower"
        )
    live_catalog = catalogs.read_pointer()
    catalogs.switch(version, expected_current=live_catalog.version if live_catalog else None)
    new_pointer = store.switch(version, expected_current=pointer.version if pointer else None)
    summary = {
        "version": version,
        "previous": pointer.version if pointer else None,
        "published": True,
        "events": len(index),
        "cells": len(index.cells),
        "tower_version": tower,
        "history": list(new_pointer.history),
    }
    log.info("published geo index %s", summary)
    return summary


def build_and_publish_index(
    settings: Settings, now: datetime, size_tolerance: float = DEFAULT_SIZE_TOLERANCE
) -> dict[str, Any]:
    """Build version N+1 beside N, validate it, switch the pointer; ``turnout index --json``.

    Returns ``{"build": build_index_version(...), "publish": publish_index_version(...)}``.
    """
    built = build_index_version(settings, now)
    published = publish_index_version(settings, built["version"], now, size_tolerance)
    return {"build": built, "publish": published}


def rollback_index(settings: Settings) -> dict[str, Any]:
    """Point the live index (and its catalog) back at the previously published version."""
    from published.catalog import catalog_store

    store = geo_store(settings)
    before = store.read_pointer()
    after = store.rollback()
    catalogs = catalog_store(settings)
    pointer = catalogs.read_pointer()
    if pointer is not None and pointer.version != after.version:
        catalogs.rollback()
    return {"from": before.version if before else None, "to": after.version, "history": list(after.history)}
