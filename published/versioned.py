"""Versioned artifacts with one atomic pointer: build beside, validate, switch, keep N for rollback.

Layout under one store root (``<index root>/geo`` for the geo index, ``<index root>/tower`` for
the content tower)::

    versions/<version>/     immutable once renamed into place; never edited
    versions/.staging-*     a version being written (renamed into place when complete)
    CURRENT.json            {"version", "history", "published_at"}: the only mutable file

A reader follows ``CURRENT.json``; a writer stages a complete version folder first and only then
replaces the pointer with ``os.replace`` (atomic on POSIX), so a crash at any point leaves either
the old pointer or the new one, both naming complete folders. ``history`` lists published
versions oldest first; ``rollback`` moves the pointer one step back along it.

The store needs a POSIX file system (local disk or a mounted volume): ``os.replace`` and
``flock`` have no equivalent on object storage, where the pointer would need a conditional PUT.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

log = logging.getLogger(__name__)

POINTER: Final = "CURRENT.json"
STAGING_PREFIX: Final = ".staging-"
# Staging folders older than this belong to a writer that died; younger ones may be in use.
STALE_STAGING_SECONDS: Final = 24 * 3600


class PublicationError(RuntimeError):
    """The store cannot do what was asked (no such version, nothing to roll back to, ...)."""


class IndexValidationError(PublicationError):
    """A staged index broke an invariant; it was not published and the live one is untouched."""


class TowerVersionMismatch(PublicationError):
    """An artifact expects embeddings from a tower version other than the one offered."""


def local_root(root: str) -> Path:
    """The index root as a local path; object-store URIs are refused with the reason."""
    if root.startswith("file://"):
        return Path(root[len("file://") :])
    if "://" in root:
        raise PublicationError(
            f"index root {root!r} is not a local path: publication needs an atomic rename "
            "(os.replace), which object storage does not offer; mount it or use a local root"
        )
    return Path(root)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def check_manifest(
    folder: Path, manifest: dict[str, Any], kind: str, fmt: int, files: dict[str, str]
) -> None:
    """Refuse a version written in another format, or whose files differ from the manifest's
    checksums (``files`` maps each name in the manifest to its file name in ``folder``)."""
    if manifest.get("format") != fmt:
        raise PublicationError(f"{folder}: {kind} format {manifest.get('format')}, this code reads {fmt}")
    bad = [name for name, file in files.items() if sha256_file(folder / file) != manifest["files"][name]]
    if bad:
        raise PublicationError(f"{folder}: checksum mismatch in {bad}")


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json_atomic(path: Path, payload: dict[str, Any]) -> None:
    """Write ``payload`` to a temp file beside ``path``, fsync it, then ``os.replace`` it in."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        with tmp.open("w") as f:
            json.dump(payload, f, indent=2, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    _fsync_dir(path.parent)


@dataclass(frozen=True)
class Pointer:
    """Which version is live, and the published versions before it (oldest first)."""

    version: str
    history: tuple[str, ...]
    published_at: str

    @property
    def previous(self) -> str | None:
        return self.history[-2] if len(self.history) >= 2 else None

    def to_dict(self) -> dict[str, Any]:
        return {"version": self.version, "history": list(self.history), "published_at": self.published_at}


class VersionedStore:
    """Immutable version folders plus one pointer file, under ``root``."""

    def __init__(self, root: Path, keep: int = 3) -> None:
        if keep < 2:
            raise ValueError("keep at least 2 versions: the live one and its rollback target")
        self.root = root
        self.keep = keep

    @property
    def versions_dir(self) -> Path:
        return self.root / "versions"

    def path(self, version: str) -> Path:
        return self.versions_dir / version

    def versions(self) -> list[str]:
        """Complete (renamed-into-place) versions, sorted by name."""
        if not self.versions_dir.exists():
            return []
        return sorted(
            p.name for p in self.versions_dir.iterdir() if p.is_dir() and not p.name.startswith(".")
        )

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Serialize pointer updates between processes on this host (flock on ``.lock``)."""
        self.root.mkdir(parents=True, exist_ok=True)
        with (self.root / ".lock").open("a") as f:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)

    def read_pointer(self) -> Pointer | None:
        path = self.root / POINTER
        if not path.exists():
            return None
        raw = json.loads(path.read_text())
        return Pointer(raw["version"], tuple(raw["history"]), raw["published_at"])

    def next_numbered_version(self) -> str:
        """The next free zero-padded build number (staging folders count as taken)."""
        taken = [0]
        if self.versions_dir.exists():
            for p in self.versions_dir.iterdir():
                name = p.name.removeprefix(STAGING_PREFIX).split("-")[0]
                if name.isdigit():
                    taken.append(int(name))
        return f"{max(taken) + 1:08d}"

    def stage(self, version: str, write: Callable[[Path], None], exist_ok: bool = False) -> Path:
        """Write a complete version beside the live one; the pointer is not touched.

        ``write`` fills an empty folder. Only a finished folder is renamed to
        ``versions/<version>``, so a crash mid-write leaves a ``.staging-*`` folder nobody reads.
        With ``exist_ok`` staging an existing version is a no-op, which is right only for
        content-addressed versions (the tower's: same inputs, same bytes, same name); a numbered
        version that already exists belongs to another build and is refused.
        """
        target = self.path(version)
        if target.exists():
            if not exist_ok:
                raise PublicationError(f"version {version} already exists at {target}")
            log.info("version %s already staged at %s", version, target)
            return target
        self.versions_dir.mkdir(parents=True, exist_ok=True)
        staging = self.versions_dir / f"{STAGING_PREFIX}{version}-{uuid.uuid4().hex[:8]}"
        staging.mkdir()
        try:
            write(staging)
            for child in staging.iterdir():
                with child.open("rb") as f:
                    os.fsync(f.fileno())
            try:
                os.rename(staging, target)
            except OSError as err:
                if not (exist_ok and target.exists()):
                    raise PublicationError(f"could not move {staging} into place as {target}") from err
                # Another writer staged the same content-addressed version first.
                shutil.rmtree(staging, ignore_errors=True)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        _fsync_dir(self.versions_dir)
        log.info("staged version %s at %s", version, target)
        return target

    def switch(self, version: str, expected_current: str | None) -> Pointer:
        """Make ``version`` live with one atomic pointer replace.

        ``expected_current`` is what the caller validated against; if another publisher moved
        the pointer in between, the switch is refused rather than publishing a version that was
        never compared with what is now live.
        """
        with self.locked():
            if not self.path(version).is_dir():
                raise PublicationError(f"version {version} is not staged under {self.versions_dir}")
            current = self.read_pointer()
            live = current.version if current else None
            if live != expected_current:
                raise PublicationError(
                    f"pointer moved from {expected_current} to {live} while {version} was validated"
                )
            if current and current.version == version:
                return current
            history = (*(current.history if current else ()), version)[-self.keep :]
            pointer = Pointer(version, history, datetime.now(UTC).isoformat())
            write_json_atomic(self.root / POINTER, pointer.to_dict())
            self._prune(pointer)
        log.info("published %s (previous %s)", version, live)
        return pointer

    def rollback(self) -> Pointer:
        """Point back at the previously published version; the rolled-back one stays on disk."""
        with self.locked():
            current = self.read_pointer()
            if current is None or current.previous is None:
                raise PublicationError(f"nothing to roll back to under {self.root}")
            target = current.previous
            if not self.path(target).is_dir():
                raise PublicationError(f"rollback target {target} is no longer on disk")
            pointer = Pointer(target, current.history[:-1], datetime.now(UTC).isoformat())
            write_json_atomic(self.root / POINTER, pointer.to_dict())
        log.warning("rolled back %s -> %s", current.version, target)
        return pointer

    def _prune(self, pointer: Pointer) -> None:
        """Drop versions outside the kept history, but never one staged after the live one.

        A version staged after the live one may be waiting for its own publish step (the DAG
        builds in one task and publishes in the next), so it is kept until it is superseded.
        """
        kept = set(pointer.history)
        live_staged_at = self.path(pointer.version).stat().st_mtime
        for name in self.versions():
            if name in kept or self.path(name).stat().st_mtime > live_staged_at:
                continue
            shutil.rmtree(self.path(name), ignore_errors=True)
            log.info("pruned version %s", name)
        now = time.time()
        for p in self.versions_dir.glob(f"{STAGING_PREFIX}*"):
            if now - p.stat().st_mtime > STALE_STAGING_SECONDS:
                shutil.rmtree(p, ignore_errors=True)
