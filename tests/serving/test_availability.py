"""One contract for both capacity counters: SQLite (``local``) and Redis (``cluster``).

Every test runs against an in-memory SQLite store and against a real Redis
(``TURNOUT_TEST_REDIS_URL``, e.g. ``redis://127.0.0.1:6390/0``; skipped with the reason when
unset). Each Redis store lives under its own random key prefix, deleted after the test.
"""

from __future__ import annotations

import os
import socket
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conf.settings import AvailabilitySettings
from serving.availability import (
    Blocked,
    EventCounters,
    RedisAvailability,
    SQLiteAvailability,
    WritableAvailability,
    open_availability,
)

REDIS_URL = os.environ.get("TURNOUT_TEST_REDIS_URL")

OpenStore = Callable[[], WritableAvailability]


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param(
            "redis",
            marks=[
                pytest.mark.integration,
                pytest.mark.skipif(
                    not REDIS_URL,
                    reason="TURNOUT_TEST_REDIS_URL is not set: start redis-server on loopback and export "
                    "TURNOUT_TEST_REDIS_URL=redis://127.0.0.1:<port>/0 (see .ci/run)",
                ),
            ],
        ),
    ]
)
def open_store(request: pytest.FixtureRequest) -> Iterator[OpenStore]:
    """Opens fresh, empty stores of one backend through the settings factory."""
    opened: list[WritableAvailability] = []
    prefixes: list[str] = []

    def open_() -> WritableAvailability:
        if request.param == "sqlite":
            cfg = AvailabilitySettings(type="sqlite", path=":memory:")
        else:
            assert REDIS_URL is not None
            prefixes.append(f"turnout-test:{uuid.uuid4().hex}:")
            cfg = AvailabilitySettings(type="redis", url=REDIS_URL, key_prefix=prefixes[-1])
        opened.append(open_availability(cfg))
        return opened[-1]

    yield open_
    for store in opened:
        store.close()
    if prefixes:
        import redis

        assert REDIS_URL is not None
        client = redis.Redis.from_url(REDIS_URL)
        for prefix in prefixes:
            keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
            if keys:
                client.delete(*keys)
        client.close()


@pytest.fixture
def store(open_store: OpenStore) -> WritableAvailability:
    return open_store()


def _implied_by_counters(store: WritableAvailability, event_ids: list[str]) -> frozenset[str]:
    return frozenset(e for e, c in store.event_counters(event_ids).items() if c.blocked)


def test_the_factory_opens_the_backend_the_settings_name(store: WritableAvailability) -> None:
    assert isinstance(store, SQLiteAvailability | RedisAvailability)
    store.ping()
    assert store.blocked(None) == Blocked(frozenset(), frozenset())
    assert store.friends_going([]) == {}


def test_sold_out_exactly_at_capacity(store: WritableAvailability) -> None:
    store.set_capacity([("e1", 3, 0), ("full", 2, 2), ("over", 2, 5)])
    store.add_rsvps([("u1", "e1"), ("u2", "e1")])
    assert store.blocked(None).unavailable == {"full", "over"}
    store.add_rsvps([("u3", "e1")])
    assert store.blocked(None).unavailable == {"e1", "full", "over"}
    assert store.event_counters(["e1"]) == {"e1": EventCounters(3, 3, False)}


def test_unlimited_capacity_never_blocks(store: WritableAvailability) -> None:
    store.set_capacity([("unlimited", None, 0)])
    store.add_rsvps((f"u{i}", e) for i in range(50) for e in ("unlimited", "no_counter_row"))
    assert store.blocked(None).unavailable == frozenset()
    assert store.event_counters(["unlimited", "no_counter_row", "never_seen"]) == {
        "unlimited": EventCounters(None, 50, False),
        "no_counter_row": EventCounters(None, 50, False),
    }


def test_cancelled_events_are_blocked_whatever_their_seats(store: WritableAvailability) -> None:
    store.set_capacity([("roomy", 100, 3)])
    store.cancel(["roomy", "unknown_until_now"])
    assert store.blocked("u1").unavailable == {"roomy", "unknown_until_now"}
    store.set_capacity([("roomy", 1000, 0)])  # new counters do not undo a cancellation
    assert store.blocked(None).unavailable == {"roomy", "unknown_until_now"}
    assert store.event_counters(["roomy"]) == {"roomy": EventCounters(1000, 0, True)}


def test_rsvps_hide_from_that_user_only(store: WritableAvailability) -> None:
    store.add_rsvps([("u1", "e1"), ("u1", "e2"), ("u2", "e3")])
    assert store.blocked("u1") == Blocked(frozenset(), frozenset({"e1", "e2"}))
    assert store.blocked("u2").rsvped == {"e3"}
    assert store.blocked("u3").rsvped == frozenset()
    assert store.blocked(None).rsvped == frozenset()


def test_a_repeated_rsvp_takes_no_second_seat(store: WritableAvailability) -> None:
    store.set_capacity([("e1", 2, 0)])
    store.add_rsvps([("u1", "e1"), ("u1", "e1")])  # twice in one batch
    store.add_rsvps([("u1", "e1")])  # and again later
    assert store.event_counters(["e1"])["e1"].taken == 1
    assert "e1" not in store.blocked(None).unavailable
    store.add_rsvps([("u2", "e1")])
    assert store.event_counters(["e1"])["e1"].taken == 2
    assert "e1" in store.blocked(None).unavailable


def test_friends_going_counts_each_friend_once_per_event(store: WritableAvailability) -> None:
    store.add_rsvps([("u1", "e1"), ("u2", "e1"), ("u2", "e2"), ("u3", "e3"), ("u2", "e1")])
    store.cancel(["e2"])  # still counted: hiding it is the blocked set's job
    assert store.friends_going(["u1", "u2", "nobody"]) == {"e1": 2, "e2": 1}
    assert store.friends_going(["u1", "u1"]) == {"e1": 1}
    assert store.friends_going(["nobody"]) == {}
    assert store.friends_going([]) == {}


def test_raising_capacity_unblocks_and_lowering_it_blocks(store: WritableAvailability) -> None:
    store.set_capacity([("e1", 2, 2)])
    assert store.blocked(None).unavailable == {"e1"}
    store.set_capacity([("e1", 5, 2)])
    assert store.blocked(None).unavailable == frozenset()
    store.set_capacity([("e1", None, 9)])
    assert store.blocked(None).unavailable == frozenset()
    store.set_capacity([("e1", 9, 9)])
    assert store.blocked(None).unavailable == {"e1"}
    store.set_capacity([("e1", 9, 8)])  # a cancelled booking gives the seat back
    assert store.blocked(None).unavailable == frozenset()


def test_batches_larger_than_one_write_call(store: WritableAvailability) -> None:
    events = [f"e{i}" for i in range(1200)]
    store.set_capacity((e, 1, 0) for e in events)
    store.add_rsvps(("u1", e) for e in events[::2])
    store.cancel(events[1:20:2])
    assert store.blocked(None).unavailable == {*events[::2], *events[1:20:2]}
    assert len(store.blocked("u1").rsvped) == 600


def test_concurrent_rsvps_on_the_last_seats_leave_consistent_counters(store: WritableAvailability) -> None:
    """N bookings race for K < N seats: every one is counted and the event ends blocked."""
    n, capacity = 32, 10
    store.set_capacity([("hot", capacity, capacity - 1), ("calm", None, 0)])
    start = threading.Barrier(n)
    errors: list[BaseException] = []

    def book(i: int) -> None:
        try:
            start.wait()
            store.add_rsvps([(f"u{i}", "hot"), (f"u{i}", "calm"), (f"u{i}", "hot")])
        except BaseException as e:  # surfaced below: a thread's exception would be lost
            errors.append(e)

    threads = [threading.Thread(target=book, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    counters = store.event_counters(["hot", "calm"])
    assert counters == {
        "hot": EventCounters(capacity, capacity - 1 + n, False),
        "calm": EventCounters(None, n, False),
    }
    assert store.blocked(None).unavailable == {"hot"} == _implied_by_counters(store, ["hot", "calm"])
    assert store.friends_going([f"u{i}" for i in range(n)]) == {"hot": n, "calm": n}


# ---- the property: both stores behave like one small model ------------------------------------

USERS = [f"u{i}" for i in range(5)]
EVENTS = [f"e{i}" for i in range(6)]

OPERATIONS = st.lists(
    st.one_of(
        st.tuples(
            st.just("set_capacity"),
            st.lists(
                st.tuples(st.sampled_from(EVENTS), st.none() | st.integers(0, 4), st.integers(0, 5)),
                max_size=3,
            ),
        ),
        st.tuples(st.just("cancel"), st.lists(st.sampled_from(EVENTS), max_size=2)),
        st.tuples(
            st.just("add_rsvps"),
            st.lists(st.tuples(st.sampled_from(USERS), st.sampled_from(EVENTS)), max_size=5),
        ),
    ),
    max_size=15,
)


@dataclass
class Model:
    """The contract in a few lines of Python: what every store must answer."""

    counters: dict[str, EventCounters] = field(default_factory=dict)
    rsvps: set[tuple[str, str]] = field(default_factory=set)

    def apply(self, op: str, rows: list[Any]) -> None:
        for row in rows:
            if op == "set_capacity":
                event, capacity, taken = row
                cancelled = event in self.counters and self.counters[event].cancelled
                self.counters[event] = EventCounters(capacity, taken, cancelled)
            elif op == "cancel":
                old = self.counters.get(row, EventCounters(None, 0, False))
                self.counters[row] = EventCounters(old.capacity, old.taken, True)
            elif row not in self.rsvps:
                self.rsvps.add(row)
                old = self.counters.get(row[1], EventCounters(None, 0, False))
                self.counters[row[1]] = EventCounters(old.capacity, old.taken + 1, old.cancelled)

    def blocked(self, user: str | None) -> Blocked:
        unavailable = frozenset(e for e, c in self.counters.items() if c.blocked)
        return Blocked(unavailable, frozenset(e for u, e in self.rsvps if user and u == user))

    def friends_going(self, friends: list[str]) -> dict[str, int]:
        return dict(Counter(e for u, e in self.rsvps if u in set(friends)))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(operations=OPERATIONS, friends=st.lists(st.sampled_from([*USERS, "stranger"]), max_size=7))
def test_any_sequence_of_writes_reads_back_as_the_model(open_store: OpenStore, operations, friends) -> None:
    store, model = open_store(), Model()
    for op, rows in operations:
        getattr(store, op)(rows)
        model.apply(op, rows)
    for user in [None, *USERS]:
        assert store.blocked(user) == model.blocked(user)
    assert store.friends_going(friends) == model.friends_going(friends)
    assert store.event_counters(EVENTS) == model.counters
    assert store.blocked(None).unavailable == _implied_by_counters(store, EVENTS)
    store.close()


# ---- opening from settings --------------------------------------------------------------------


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_redis_without_a_url_is_refused() -> None:
    with pytest.raises(ValueError, match="serving.availability.url is empty"):
        open_availability(AvailabilitySettings(type="redis", url=""))


def test_an_unreachable_redis_fails_on_open_naming_the_url_without_its_password() -> None:
    url = f"redis://:hunter2@127.0.0.1:{_closed_port()}/1"
    with pytest.raises(ConnectionError, match=r"redis://:\*\*\*@127\.0\.0\.1:\d+/1 is unreachable") as caught:
        open_availability(AvailabilitySettings(type="redis", url=url))
    assert "hunter2" not in str(caught.value)


def test_a_malformed_redis_url_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="http://localhost:6379 is not a redis URL"):
        open_availability(AvailabilitySettings(type="redis", url="http://localhost:6379"))


def test_a_sqlite_file_store_keeps_its_counters_across_reopening(tmp_path) -> None:
    cfg = AvailabilitySettings(type="sqlite", path=str(tmp_path / "counters" / "availability.db"))
    first = open_availability(cfg)
    first.set_capacity([("e1", 1, 1)])
    first.close()
    second = open_availability(cfg)
    assert second.blocked(None).unavailable == {"e1"}
    second.close()
