"""The live catalog: what serving needs from silver, published as plain Parquet files.

The index job (``pipelines.index``) writes one version per build, beside the geo index and with
the same version number, as of the build's instant ``as_of``:

* ``events``       every event live at ``as_of`` (created, not cancelled, not started) with what
                   routes a request: organizer, venue, series, category, zone, metro, position,
                   start, creation, capacity and its RSVPs so far;
* ``rsvps``        (user_id, event_id) for every RSVP to a live event made by ``as_of``: the
                   already-RSVPed filter and the social join's live RSVP lists;
* ``friendships``  (user_id, friend_id) known by ``as_of``, both directions;
* ``capacity``     (event_id, capacity, seats_taken): the newest booking-counter reading;
* ``cancellations``(event_id) cancelled by ``as_of`` among events that would otherwise be live;
* ``users``        (user_id, metro, home_lat, home_lng) for every user known by ``as_of``: where a
                   user without GPS is served from, whatever their feature row's age.

Serving reads it with pyarrow: no Spark, no JVM. A reader checks every file against the
manifest's checksums before it trusts the version, as it does for the index.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from conf import Settings
from published.versioned import PublicationError, VersionedStore, check_manifest, local_root, sha256_file

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger(__name__)

FORMAT: Final = 1
MANIFEST: Final = "manifest.json"
TABLES: Final[dict[str, tuple[str, ...]]] = {
    "events": (
        "event_id",
        "organizer_id",
        "venue_id",
        "series_id",
        "category",
        "timezone",
        "metro",
        "venue_lat",
        "venue_lng",
        "start_ts",
        "created_ts",
        "capacity",
        "rsvps_so_far",
    ),
    "rsvps": ("user_id", "event_id"),
    "friendships": ("user_id", "friend_id"),
    "capacity": ("event_id", "capacity", "seats_taken"),
    "cancellations": ("event_id",),
    "users": ("user_id", "metro", "home_lat", "home_lng"),
}


def catalog_store(settings: Settings) -> VersionedStore:
    """Where the catalog's versions and pointer live (``<index root>/catalog``)."""
    return VersionedStore(local_root(settings.index.root) / "catalog")


@dataclass(frozen=True)
class Catalog:
    """One published catalog version (see the module docstring for each frame's columns)."""

    as_of: datetime
    events: pd.DataFrame
    rsvps: pd.DataFrame
    friendships: pd.DataFrame
    capacity: pd.DataFrame
    cancellations: pd.DataFrame
    users: pd.DataFrame
    version: str | None = None

    def frames(self) -> dict[str, pd.DataFrame]:
        return {name: getattr(self, name) for name in TABLES}

    def friends(self) -> dict[str, tuple[str, ...]]:
        """Each user's friends, sorted (``friendships`` already holds both directions)."""
        f = self.friendships
        return {str(u): tuple(sorted(map(str, g))) for u, g in f.groupby("user_id")["friend_id"]}

    def counts(self) -> dict[str, int]:
        return {name: len(frame) for name, frame in self.frames().items()}


def write_catalog(folder: Path, catalog: Catalog) -> dict[str, Any]:
    """Write every frame as Parquet plus a manifest with checksums into ``folder`` (empty)."""
    files: dict[str, str] = {}
    for name, frame in catalog.frames().items():
        missing = [c for c in TABLES[name] if c not in frame.columns]
        if missing:
            raise ValueError(f"catalog frame {name} lacks {missing}")
        path = folder / f"{name}.parquet"
        frame[list(TABLES[name])].to_parquet(path, index=False)
        files[name] = sha256_file(path)
    manifest = {
        "format": FORMAT,
        "as_of": catalog.as_of.isoformat(),
        "counts": catalog.counts(),
        "files": files,
    }
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True))
    return manifest


def read_catalog(folder: Path, verify: bool = True) -> Catalog:
    """Open one catalog version; ``verify`` re-hashes every file against the manifest first."""
    import pandas as pd

    manifest = json.loads((folder / MANIFEST).read_text())
    check_manifest(folder, manifest, "catalog", FORMAT, {n: f"{n}.parquet" for n in TABLES} if verify else {})
    frames = {name: pd.read_parquet(folder / f"{name}.parquet") for name in TABLES}
    return Catalog(as_of=datetime.fromisoformat(manifest["as_of"]), version=folder.name, **frames)


def load_live_catalog(settings: Settings) -> Catalog:
    """The published catalog; ``PublicationError`` when none is (the index job publishes it)."""
    store = catalog_store(settings)
    pointer = store.read_pointer()
    if pointer is None:
        raise PublicationError(f"no catalog has been published under {store.root} (run `turnout index`)")
    catalog = read_catalog(store.path(pointer.version))
    log.info("loaded catalog %s as of %s: %s", pointer.version, catalog.as_of.isoformat(), catalog.counts())
    return catalog
