"""Property: whatever the counters say, no sold-out, cancelled, started or already-RSVPed event is
ever served, on the model path and on the popularity fallback, in the feed and the weekend module."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from serving.availability import SQLiteAvailability
from serving.feed import FeedRequest, serve_feed
from serving.synthetic import make_state, make_world

WORLD = make_world(n_events=300, n_users=10, seed=3)
IDS = WORLD.snapshot.event_id.tolist()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    sold_out=st.sets(st.sampled_from(IDS), max_size=120),
    cancelled=st.sets(st.sampled_from(IDS), max_size=60),
    rsvped=st.sets(st.sampled_from(IDS), max_size=60),
    minutes_later=st.integers(0, 60 * 24 * 4),
    use_model=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_no_blocked_or_started_event_is_ever_served(
    heads, sold_out, cancelled, rsvped, minutes_later, use_model, seed
) -> None:
    counters = SQLiteAvailability(":memory:")
    counters.set_capacity((e, 10, 10) for e in sold_out)
    counters.cancel(cancelled)
    counters.add_rsvps(("u00001", e) for e in rsvped)
    world = type(WORLD)(WORLD.now, WORLD.catalog, WORLD.index, WORLD.snapshot, WORLD.users, counters)
    state = make_state(world, heads if use_model else None)
    state.seed = seed
    now = WORLD.now + timedelta(minutes=minutes_later)
    result = serve_feed(state, FeedRequest("u00001", now, 40.72, -74.0, f"r{seed}"))
    starts = dict(zip(IDS, WORLD.snapshot.start_ts, strict=True))
    served = [e.event_id for e in (*result.events, *result.near_you_this_weekend)]
    forbidden = sold_out | cancelled | rsvped
    assert not forbidden.intersection(served)
    assert all(starts[e] > now.timestamp() for e in served)
    # the filter removes only what it must: a feed is full whenever 25 eligible events exist
    assert len(result.events) == min(25, result.eligible)
    counters.close()
