"""The geo index on disk: plain ``.npy`` arrays plus a manifest, validated before it is published.

Arrays are saved one file each with ``allow_pickle=False`` and memory-mapped on load, so a
serving process opens a 1M-event index without copying it and nothing on disk can execute code.
The manifest records what the index was built from (the digest of the live event ids read from
silver), which tower version its events' embeddings come from, and a checksum per file.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from conf import Settings
from contracts.instants import from_micros
from published.geo_index import GeoIndex, GeoParams, check_structure
from published.versioned import (
    PublicationError,
    TowerVersionMismatch,
    VersionedStore,
    check_manifest,
    local_root,
    sha256_file,
)

log = logging.getLogger(__name__)

FORMAT: Final = 1
MANIFEST: Final = "manifest.json"
ARRAYS: Final = (
    "cells",
    "offsets",
    "event_ids",
    "start_us",
    "lat",
    "lng",
    "xyz",
    "travel_cell",
    "rank",
    "by_rank",
)
# Below this many events in the live index the size check is skipped: a near-empty baseline
# (first builds, a fresh demo) says nothing about what size the next one should be.
MIN_SIZE_BASELINE: Final = 100


def geo_store(settings: Settings) -> VersionedStore:
    """Where the geo index's versions and pointer live (``<index root>/geo``)."""
    return VersionedStore(local_root(settings.index.root) / "geo")


def ids_digest(ids: npt.ArrayLike) -> str:
    """Order-free digest of a set of event ids: sha256 of the sorted ids, newline-joined."""
    arr = np.sort(np.asarray(ids, dtype=np.str_))
    return hashlib.sha256("\n".join(arr.tolist()).encode()).hexdigest()


def write_geo_index(folder: Path, index: GeoIndex, meta: dict[str, Any]) -> dict[str, Any]:
    """Write the arrays and a manifest into ``folder`` (an empty staging folder)."""
    files: dict[str, str] = {}
    for name in ARRAYS:
        path = folder / f"{name}.npy"
        np.save(path, getattr(index, name), allow_pickle=False)
        files[name] = sha256_file(path)
    manifest = {
        "format": FORMAT,
        "built_at": from_micros(index.built_at_us).isoformat(),
        "built_at_us": index.built_at_us,
        "params": asdict(index.params),
        "events": len(index),
        "cells": len(index.cells),
        "files": files,
        **meta,
    }
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True))
    return manifest


def read_manifest(folder: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((folder / MANIFEST).read_text())
    return data


def read_geo_index(folder: Path, verify: bool = True) -> tuple[GeoIndex, dict[str, Any]]:
    """Open a stored index; ``verify`` re-hashes every file against the manifest first."""
    manifest = read_manifest(folder)
    check_manifest(folder, manifest, "index", FORMAT, {n: f"{n}.npy" for n in ARRAYS} if verify else {})
    arrays = {n: np.load(folder / f"{n}.npy", mmap_mode="r", allow_pickle=False) for n in ARRAYS}
    index = GeoIndex(
        params=GeoParams(**manifest["params"]), built_at_us=int(manifest["built_at_us"]), **arrays
    )
    return index, manifest


def validate_index(
    index: GeoIndex,
    manifest: dict[str, Any],
    now_us: int,
    live_manifest: dict[str, Any] | None,
    size_tolerance: float,
) -> list[str]:
    """Every reason the staged ``index`` must not replace the live one; empty means publishable.

    * structure: CSR offsets, per-cell start order, each posting in its location's cell;
    * every live event indexed exactly once: no duplicate ids, and the ids are exactly the set
      read from silver at build time (same count, same digest);
    * no past events: nothing starts at or before ``now_us``;
    * size against the live version: within ``size_tolerance`` (relative), so a half-empty read
      of silver cannot silently shrink everyone's feed;
    * embeddings: every indexed event has one under the index's tower version.
    """
    problems = list(check_structure(index, now_us).problems)
    if len(index) != manifest["source_events"]:
        problems.append(f"indexed {len(index)} events, silver had {manifest['source_events']} live events")
    elif ids_digest(index.event_ids) != manifest["source_ids_sha256"]:
        problems.append("the indexed event ids differ from the live event ids read from silver")
    if manifest.get("unplaceable_events", 0):
        problems.append(f"{manifest['unplaceable_events']} live events have no venue location")
    if manifest.get("tower_version") is not None and manifest.get("missing_embeddings", 0):
        problems.append(
            f"{manifest['missing_embeddings']} indexed events have no embedding under tower "
            f"{manifest['tower_version']} (run the embedding step first)"
        )
    if live_manifest is not None and live_manifest["events"] >= MIN_SIZE_BASELINE:
        before, after = live_manifest["events"], len(index)
        change = abs(after - before) / before
        if change > size_tolerance:
            problems.append(
                f"size changed {change:.0%} ({before} -> {after} events), more than the "
                f"{size_tolerance:.0%} tolerance"
            )
    return problems


@dataclass(frozen=True)
class LiveIndex:
    """The published index a server queries, with the version and manifest it was loaded from."""

    version: str
    manifest: dict[str, Any]
    index: GeoIndex

    @property
    def tower_version(self) -> str | None:
        value = self.manifest.get("tower_version")
        return None if value is None else str(value)


def load_live_index(
    store: VersionedStore, expected_tower_version: str | None, verify: bool = True
) -> LiveIndex:
    """Open the published index; refuse it if its embeddings come from another tower.

    ``expected_tower_version`` is the tower version the caller's ranker was trained with. A
    ranker scoring candidates with vectors from a different tower reads numbers from another
    coordinate system: the scores look normal and mean nothing, so it is refused, not served.
    Pass None only for callers that never touch embeddings.
    """
    pointer = store.read_pointer()
    if pointer is None:
        raise PublicationError(f"no index has been published under {store.root}")
    index, manifest = read_geo_index(store.path(pointer.version), verify=verify)
    live = LiveIndex(pointer.version, manifest, index)
    if expected_tower_version is not None and live.tower_version != expected_tower_version:
        raise TowerVersionMismatch(
            f"index {pointer.version} was built for tower {live.tower_version}, "
            f"the caller expects tower {expected_tower_version}: refusing to serve it"
        )
    log.info("loaded index %s: %d events, tower %s", pointer.version, len(index), live.tower_version)
    return live
