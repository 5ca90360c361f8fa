"""Authoritative request-time state: capacity counters, cancellations, and who RSVPed to what.

Sold out, cancelled and already-RSVPed are hard gates read at request time from the store the
booking path writes to, never from a feature (design: "Capacity is a gate, not a feature"): a
feature refreshed every 15 minutes would keep recommending the events that sell out fastest.

Two stores answer the same contract (``AvailabilityStore`` for requests, ``WritableAvailability``
for the booking path), chosen by ``settings.serving.availability`` through ``open_availability``:

* ``SQLiteAvailability`` (``local``): a file or ``:memory:`` database this process owns.
* ``RedisAvailability`` (``cluster``): the counters the booking path writes. Every write runs as
  one Lua script per batch, so the ``blocked`` set (sold out or cancelled) changes in the same
  atomic step as the counters it is derived from, and a request reads it with one SMEMBERS
  instead of scanning counters: ``blocked`` is one round trip (that set plus the user's RSVP
  set), ``friends_going`` one pipelined SMEMBERS of the friends' RSVP sets.

The same store answers "friends going": the live RSVP lists crossed with the user's friends,
which exists from an event's first RSVP on. RSVPs are idempotent per (user, event): a repeated
pair takes no second seat. The counters count; refusing an RSVP past capacity is the booking
path's decision, not this module's.
"""

from __future__ import annotations

import sqlite3
import threading
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit, urlunsplit

if TYPE_CHECKING:
    import redis

    from conf.settings import AvailabilitySettings

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


@dataclass(frozen=True)
class EventCounters:
    """One event's counters as the store holds them (for audits and tests, not for requests)."""

    capacity: int | None  # None: unlimited
    taken: int
    cancelled: bool

    @property
    def blocked(self) -> bool:
        """Sold out or cancelled: the rule both stores apply on every write."""
        return self.cancelled or (self.capacity is not None and self.taken >= self.capacity)


class AvailabilityStore(Protocol):
    """What a request reads."""

    def blocked(self, user_id: str | None) -> Blocked: ...

    def friends_going(self, friend_ids: list[str]) -> dict[str, int]: ...

    def ping(self) -> None: ...


class WritableAvailability(AvailabilityStore, Protocol):
    """What the booking path (or the local seeding from the published catalog) writes, and reads back."""

    def set_capacity(self, rows: Iterable[tuple[str, int | None, int]]) -> None: ...

    def cancel(self, event_ids: Iterable[str]) -> None: ...

    def add_rsvps(self, pairs: Iterable[tuple[str, str]]) -> None: ...

    def event_counters(self, event_ids: Iterable[str]) -> dict[str, EventCounters]: ...

    def close(self) -> None: ...


def open_availability(cfg: AvailabilitySettings) -> WritableAvailability:
    """The store ``settings.serving.availability`` names; a Redis one is pinged before it is returned.

    Raises ``ValueError`` for a redis store without a URL (or with a malformed one) and
    ``ConnectionError`` for a server that does not answer; both messages name the URL.
    """
    if cfg.type == "sqlite":
        return SQLiteAvailability(cfg.path)
    if not cfg.url:
        raise ValueError(
            "serving.availability.type is 'redis' but serving.availability.url is empty: "
            "set it to redis://<host>:<port>/<db>"
        )
    return RedisAvailability(cfg.url, cfg.key_prefix)


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
        """(event_id, capacity, taken) upserts; ``capacity`` None is unlimited."""
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
        """(user_id, event_id) RSVPs; each new pair takes one seat, a repeated pair none."""
        pairs = list(pairs)
        with self._lock:
            self._db.execute("BEGIN")
            try:
                seats: Counter[str] = Counter()
                for user_id, event_id in pairs:
                    inserted = self._db.execute(
                        "INSERT OR IGNORE INTO rsvps (user_id, event_id) VALUES (?, ?)", (user_id, event_id)
                    ).rowcount
                    if inserted:
                        seats[event_id] += 1
                self._db.executemany(
                    "INSERT INTO event_state (event_id, taken) VALUES (?, ?) "
                    "ON CONFLICT(event_id) DO UPDATE SET taken = taken + excluded.taken",
                    seats.items(),
                )
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def event_counters(self, event_ids: Iterable[str]) -> dict[str, EventCounters]:
        """The counters of those of ``event_ids`` the store has seen."""
        ids = list(dict.fromkeys(event_ids))
        if not ids:
            return {}
        marks = ",".join("?" * len(ids))
        with self._lock:
            rows = self._db.execute(
                f"SELECT event_id, capacity, taken, cancelled FROM event_state WHERE event_id IN ({marks})",
                ids,
            ).fetchall()
        return {str(e): EventCounters(c, int(t), bool(x)) for e, c, t, x in rows}

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


# Redis keys (all under the store's key prefix):
#   event:<event_id>  HASH capacity (absent: unlimited), taken, cancelled ("1" or absent)
#   rsvps:<user_id>   SET of the event ids the user RSVPed to
#   blocked           SET of the event ids sold out or cancelled, rewritten with every counter
# Each script takes the blocked set as KEYS[1] and every key it touches in KEYS, so a batch is
# one atomic step and the blocked set never disagrees with the counters, even for a moment.
_REFRESH_BLOCKED = """
local function refresh_blocked(blocked, event_key, event_id)
  local v = redis.call('HMGET', event_key, 'capacity', 'taken', 'cancelled')
  local capacity = tonumber(v[1])
  local taken = tonumber(v[2]) or 0
  if v[3] == '1' or (capacity ~= nil and taken >= capacity) then
    redis.call('SADD', blocked, event_id)
  else
    redis.call('SREM', blocked, event_id)
  end
end
"""

# KEYS: blocked, then (rsvps:<user>, event:<event>) per pair; ARGV: the pairs' event ids.
_ADD_RSVPS = (
    _REFRESH_BLOCKED
    + """
local seats = 0
for i = 1, #ARGV do
  local event_id, event_key = ARGV[i], KEYS[2 * i + 1]
  if redis.call('SADD', KEYS[2 * i], event_id) == 1 then
    redis.call('HINCRBY', event_key, 'taken', 1)
    refresh_blocked(KEYS[1], event_key, event_id)
    seats = seats + 1
  end
end
return seats
"""
)

# KEYS: blocked, then event:<event> per row; ARGV: (event_id, capacity or '', taken) per row.
_SET_CAPACITY = (
    _REFRESH_BLOCKED
    + """
for i = 2, #KEYS do
  local event_id, capacity, taken = ARGV[3 * i - 5], ARGV[3 * i - 4], ARGV[3 * i - 3]
  if capacity == '' then
    redis.call('HDEL', KEYS[i], 'capacity')
    redis.call('HSET', KEYS[i], 'taken', taken)
  else
    redis.call('HSET', KEYS[i], 'capacity', capacity, 'taken', taken)
  end
  refresh_blocked(KEYS[1], KEYS[i], event_id)
end
return #KEYS - 1
"""
)

# KEYS: blocked, then event:<event> per event; ARGV: the event ids.
_CANCEL = """
for i = 2, #KEYS do
  redis.call('HSET', KEYS[i], 'cancelled', '1')
  redis.call('SADD', KEYS[1], ARGV[i - 1])
end
return #KEYS - 1
"""

# Rows per script call: big enough that seeding is few round trips, small enough that one call
# never holds the server (single-threaded) for more than a few milliseconds.
_BATCH = 500


def _redacted(url: str) -> str:
    """``url`` with any password replaced, fit for error messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc}"))


def _batches(items: list[Any], size: int = _BATCH) -> Iterable[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


class RedisAvailability:
    """The booking system's counters in Redis (``cluster``); safe to share across threads.

    Opening pings the server, so a wrong URL fails at start-up rather than on the first request.
    ``timeout_s`` bounds every call: a slow Redis turns into an error the serving state answers
    with its last known blocked set, not into a stuck request.
    """

    def __init__(self, url: str, key_prefix: str = "turnout:avail:", *, timeout_s: float = 1.0) -> None:
        import redis

        self.url = _redacted(url)
        self.key_prefix = key_prefix
        try:
            self._client: redis.Redis = redis.Redis.from_url(
                url,
                decode_responses=True,
                socket_timeout=timeout_s,
                socket_connect_timeout=timeout_s,
                health_check_interval=30,
            )
        except ValueError as e:
            raise ValueError(f"capacity counter URL {self.url} is not a redis URL: {e}") from e
        try:
            self._client.ping()
        except redis.RedisError as e:
            self._client.close()
            raise ConnectionError(f"capacity counter at {self.url} is unreachable: {e}") from e
        self._blocked_key = f"{key_prefix}blocked"
        self._add_rsvps = self._client.register_script(_ADD_RSVPS)
        self._set_capacity = self._client.register_script(_SET_CAPACITY)
        self._cancel = self._client.register_script(_CANCEL)

    def _event_key(self, event_id: str) -> str:
        return f"{self.key_prefix}event:{event_id}"

    def _rsvps_key(self, user_id: str) -> str:
        return f"{self.key_prefix}rsvps:{user_id}"

    # ---- what the booking path writes ------------------------------------------------------

    def set_capacity(self, rows: Iterable[tuple[str, int | None, int]]) -> None:
        """(event_id, capacity, taken) upserts; ``capacity`` None is unlimited."""
        for batch in _batches(list(rows)):
            keys = [self._blocked_key, *(self._event_key(e) for e, _, _ in batch)]
            args: list[str | int] = []
            for event_id, capacity, taken in batch:
                args += [event_id, "" if capacity is None else int(capacity), int(taken)]
            self._set_capacity(keys=keys, args=args)

    def cancel(self, event_ids: Iterable[str]) -> None:
        for batch in _batches(list(event_ids)):
            self._cancel(keys=[self._blocked_key, *map(self._event_key, batch)], args=batch)

    def add_rsvps(self, pairs: Iterable[tuple[str, str]]) -> None:
        """(user_id, event_id) RSVPs; each new pair takes one seat, a repeated pair none."""
        for batch in _batches(list(pairs)):
            keys = [self._blocked_key]
            for user_id, event_id in batch:
                keys += [self._rsvps_key(user_id), self._event_key(event_id)]
            self._add_rsvps(keys=keys, args=[e for _, e in batch])

    def event_counters(self, event_ids: Iterable[str]) -> dict[str, EventCounters]:
        """The counters of those of ``event_ids`` the store has seen."""
        ids = list(dict.fromkeys(event_ids))
        pipe = self._client.pipeline(transaction=False)
        for event_id in ids:
            pipe.hgetall(self._event_key(event_id))
        found: dict[str, EventCounters] = {}
        for event_id, fields in zip(ids, pipe.execute(), strict=True):
            if fields:
                capacity = fields.get("capacity")
                found[event_id] = EventCounters(
                    None if capacity is None else int(capacity),
                    int(fields.get("taken", 0)),
                    fields.get("cancelled") == "1",
                )
        return found

    # ---- what a request reads --------------------------------------------------------------

    def blocked(self, user_id: str | None) -> Blocked:
        """One round trip: the blocked set and, for a known user, their RSVP set."""
        pipe = self._client.pipeline(transaction=False)
        pipe.smembers(self._blocked_key)
        if user_id:
            pipe.smembers(self._rsvps_key(user_id))
        replies = pipe.execute()
        return Blocked(frozenset(replies[0]), frozenset(replies[1]) if user_id else frozenset())

    def friends_going(self, friend_ids: list[str]) -> dict[str, int]:
        """Event -> how many of ``friend_ids`` RSVPed to it; one pipelined round trip."""
        friends = list(dict.fromkeys(friend_ids))  # a friend listed twice still counts once
        if not friends:
            return {}
        pipe = self._client.pipeline(transaction=False)
        for friend in friends:
            pipe.smembers(self._rsvps_key(friend))
        going: Counter[str] = Counter()
        for events in pipe.execute():
            going.update(events)
        return dict(going)

    def ping(self) -> None:
        self._client.ping()

    def close(self) -> None:
        self._client.close()
