"""The impression log: what was served, appended to the landing zone so ingestion reads it back.

Lines follow the ``impressions`` entity of ``contracts/landing.py`` exactly, under
``<landing root>/impressions/delivered=<UTC hour>/``, so the hourly ingest run picks them up like
any platform export and the loop closes: the exploration flag travels with each impression to
its RSVP and attendance labels. Each process appends to its own file (no cross-process locking),
and each response is written with one ``write`` of whole lines under a lock, so a reader never
sees half a response from this process.
"""

from __future__ import annotations

import json
import os
import threading
import uuid
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol


class ImpressionSink(Protocol):
    def write(self, records: list[dict[str, Any]]) -> None: ...


def instant(ts: float) -> str:
    """An epoch-seconds instant as the landing schema's ISO-8601 UTC text (``...Z``)."""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def impression_records(
    request_id: str,
    user_id: str,
    served_at_s: float,
    model_version: str,
    items: Iterable[tuple[str, str, int, bool, str | None]],
) -> list[dict[str, Any]]:
    """One landing record per (surface, event_id, position, is_exploration, exploration_kind)."""
    served_at = instant(served_at_s)
    return [
        {
            "impression_id": f"{request_id}-{surface[0]}{position:02d}",
            "request_id": request_id,
            "user_id": user_id,
            "event_id": event_id,
            "position": position,
            "surface": surface,
            "model_version": model_version,
            "is_exploration": is_exploration,
            "exploration_kind": kind,
            "served_at": served_at,
        }
        for surface, event_id, position, is_exploration, kind in items
    ]


class LandingImpressionLog:
    """Append-only JSON lines under ``<landing root>/impressions/delivered=<hour>/``."""

    def __init__(self, landing_root: Path | str, writer_id: str | None = None) -> None:
        self.root = Path(landing_root) / "impressions"
        self.writer_id = writer_id or f"serving-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._lock = threading.Lock()

    def path_for(self, served_at: str) -> Path:
        hour = served_at[:13]  # YYYY-MM-DDTHH of the UTC instant
        return self.root / f"delivered={hour}" / f"part-{self.writer_id}.jsonl"

    def write(self, records: list[dict[str, Any]]) -> None:
        if not records:
            return
        by_path: dict[Path, list[str]] = {}
        for r in records:
            by_path.setdefault(self.path_for(r["served_at"]), []).append(
                json.dumps(r, separators=(",", ":")) + "\n"
            )
        with self._lock:
            for path, lines in by_path.items():
                path.parent.mkdir(parents=True, exist_ok=True)
                with path.open("a", encoding="utf-8", newline="\n") as fh:
                    fh.write("".join(lines))


class MemoryImpressionLog:
    """Keeps records in a list (tests, benchmarks)."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def write(self, records: list[dict[str, Any]]) -> None:
        with self._lock:
            self.records.extend(records)
