"""Authoritative request-time state: capacity counters, cancellations, and who RSVPed to what.

Sold out, cancelled and already-RSVPed are hard gates read at request time from the store the
booking path writes to, never from a feature (design: "Capacity is a gate, not a feature"): a
feature refreshed every 15 minutes would keep recommending the events that sell out fastest.

``local`` keeps the counters in SQLite (this module); ``cluster`` would keep them in Redis with
the same three reads (one MGET of the candidates' counters, one SMEMBERS of the user's RSVPs, one
pipelined read of the friends' RSVP sets). The same store answers "friends going": the live
RSVP lists crossed with the user's friends, which exists from an event's first RSVP on.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

_SCHEMA = """
CREATE TABLE IF NOT EXISTS event_state (
    event_id TEXT PRIMARY KEY,
    capacity INTEGER,              -- NULL: unlimited
    taken INTEGER NOT NULL DEFAULT 0,
    cancelled INTEGER NOT NULL DEFAULT 0,
    blocked INTEGER GENERATED ALWAYS AS
        (cancelled = 1 OR (capacity IS NOT NULL AND taken >= capacity)) STORED
);
CREATE INDEX IF NOT EXISTS event_state_blocked ON event_state (blocked) WHERE blocked = 1;
CREATE TABLE IF NOT EXISTS rsvps (
    user_id TEXT NOT NULL,
    event_id TEXT NOT NULL,
    PRIMARY KEY (user_id, event_id)
) WITHOUT ROWID;
"""


@dataclass(frozen=True)
class Blocked:
    """Events a request must not show: sold out or cancelled (for everyone) and the user's RSVPs."""

    unavailable: frozenset[str]  # sold out or cancelled
    rsvped: frozenset[str]  # already RSVPed by this user


class AvailabilityStore(Protocol):
    def blocked(self, user_id: str | None) -> Blocked: ...

    def friends_going(self, friend_ids: list[str]) -> dict[str, int]: ...

    def ping(self) -> None: ...


class SQLiteAvailability:
    """The local stand-in for the booking system's counters; safe to share across threads."""

    def __init__(self, path: Path | str) -> None:
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(_SCHEMA)

    # ---- what the booking path writes ------------------------------------------------------

    def set_capacity(self, rows: Iterable[tuple[str, int | None, int]]) -> None:
        """(event_id, capacity, taken) upserts."""
        with self._lock:
            self._db.executemany(
                "INSERT INTO event_state (event_id, capacity, taken) VALUES (?, ?, ?) "
                "ON CONFLICT(event_id) DO UPDATE SET capacity = excluded.capacity, taken = excluded.taken",
                list(rows),
            )

    def cancel(self, event_ids: Iterable[str]) -> None:
        with self._lock:
            self._db.executemany(
                "INSERT INTO event_state (event_id, cancelled) VALUES (?, 1) "
                "ON CONFLICT(event_id) DO UPDATE SET cancelled = 1",
                [(e,) for e in event_ids],
            )

    def add_rsvps(self, pairs: Iterable[tuple[str, str]]) -> None:
        """(user_id, event_id) RSVPs; each also takes one seat on the event's counter."""
        pairs = list(pairs)
        with self._lock:
            self._db.execute("BEGIN")
            try:
                self._db.executemany("INSERT OR IGNORE INTO rsvps (user_id, event_id) VALUES (?, ?)", pairs)
                self._db.executemany(
                    "INSERT INTO event_state (event_id, taken) VALUES (?, 1) "
                    "ON CONFLICT(event_id) DO UPDATE SET taken = taken + 1",
                    [(e,) for _, e in pairs],
                )
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    # ---- what a request reads --------------------------------------------------------------

    def blocked(self, user_id: str | None) -> Blocked:
        with self._lock:
            unavailable = frozenset(
                r[0] for r in self._db.execute("SELECT event_id FROM event_state WHERE blocked = 1")
            )
            rsvped = (
                frozenset(
                    r[0] for r in self._db.execute("SELECT event_id FROM rsvps WHERE user_id = ?", (user_id,))
                )
                if user_id
                else frozenset()
            )
        return Blocked(unavailable, rsvped)

    def friends_going(self, friend_ids: list[str]) -> dict[str, int]:
        """Event -> how many of ``friend_ids`` RSVPed to it."""
        if not friend_ids:
            return {}
        marks = ",".join("?" * len(friend_ids))
        with self._lock:
            rows = self._db.execute(
                f"SELECT event_id, COUNT(*) FROM rsvps WHERE user_id IN ({marks}) GROUP BY event_id",
                friend_ids,
            ).fetchall()
        return {str(e): int(n) for e, n in rows}

    def ping(self) -> None:
        with self._lock:
            self._db.execute("SELECT 1").fetchone()

    def close(self) -> None:
        with self._lock:
            self._db.close()
