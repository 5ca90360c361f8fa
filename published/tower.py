"""The published content tower as its readers see it: which version is live, which was in effect
at an instant, and its artifact (``models.content_tower``). Training it is ``pipelines.index``'s job.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING, Final

from conf import Settings
from published.versioned import PublicationError, VersionedStore, local_root

if TYPE_CHECKING:
    from models.content_tower import TowerArtifact

META_FILE: Final = "meta.json"


def tower_store(settings: Settings) -> VersionedStore:
    return VersionedStore(local_root(settings.index.root) / "tower")


def current_tower_version(settings: Settings) -> str | None:
    pointer = tower_store(settings).read_pointer()
    return pointer.version if pointer else None


def tower_trained_at(settings: Settings, version: str) -> datetime:
    """The instant whose RSVPs the tower was trained on (its data time)."""
    raw = json.loads((tower_store(settings).path(version) / META_FILE).read_text())
    return datetime.fromisoformat(raw["trained_at"])


def tower_at(settings: Settings, at: datetime) -> str | None:
    """The tower in effect at ``at``: the newest published version trained by then (None: none).

    A training set built as of ``at`` records this one, not whatever is live when it is built,
    so rebuilding the same instant later records the same tower.
    """
    store = tower_store(settings)
    pointer = store.read_pointer()
    if pointer is None:
        return None
    in_effect = [
        (tower_trained_at(settings, v), v)
        for v in pointer.history
        if store.path(v).is_dir() and tower_trained_at(settings, v) <= at
    ]
    return max(in_effect)[1] if in_effect else None


def load_current_tower(settings: Settings) -> TowerArtifact | None:
    """The published tower, or None if none has been trained yet."""
    from models.content_tower import load_tower

    store = tower_store(settings)
    pointer = store.read_pointer()
    if pointer is None:
        return None
    artifact = load_tower(store.path(pointer.version))
    if artifact.version != pointer.version:
        raise PublicationError(f"tower folder {pointer.version} holds version {artifact.version}")
    return artifact
