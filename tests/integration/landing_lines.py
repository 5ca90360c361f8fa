"""Write hand-made landing files, for tests that need exact, named rows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from contracts.landing import delivered_partition


def event(event_id: str, **overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "event_id": event_id,
        "organizer_id": "o1",
        "venue_id": "v1",
        "series_id": None,
        "category": "music",
        "title": f"Event {event_id}",
        "description": "a test event",
        "start_local": "2026-11-03T19:00:00",
        "timezone": "America/New_York",
        "duration_minutes": 90,
        "is_free": False,
        "price_cents": 1500,
        "capacity": 100,
        "created_at": "2026-10-20T12:00:00Z",
        "updated_at": "2026-10-20T12:00:00Z",
    }
    return {**base, **overrides}


def write_lines(
    landing_root: str, entity: str, hour: str, lines: list[dict[str, Any] | str], part: int = 0
) -> Path:
    """Write records (dicts become JSON; strings are written verbatim) into one delivered hour."""
    folder = Path(landing_root) / entity / delivered_partition(hour)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"part-{part:04d}.jsonl"
    with path.open("a") as f:
        for line in lines:
            f.write((line if isinstance(line, str) else json.dumps(line)) + "\n")
    return path
