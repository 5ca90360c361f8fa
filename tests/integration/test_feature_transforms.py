"""Gold feature transforms on tiny in-memory silver frames whose answers are known by hand."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from pipelines.features import transforms as T
from pipelines.silver import delivered_key

pytestmark = pytest.mark.integration


def ts(day: int, hour: int = 0, minute: int = 0) -> datetime:
    return datetime(2026, 11, day, hour, minute)


def hour_key(t: datetime) -> str:
    """The ``delivered=`` hour a silver row carries (these tests' instants are naive UTC)."""
    return delivered_key(t.replace(tzinfo=UTC))


def on_time(df, instant: str):  # type: ignore[no-untyped-def]
    """Silver rows delivered in the hour of their own instant (``_delivered``, as silver keeps it)."""
    return df.withColumn("_delivered", T.F.date_format(instant, "yyyy-MM-dd'T'HH"))


def _as_of(rows: list, key: dict, at: datetime):  # type: ignore[no-untyped-def]
    """What a point-in-time join returns: the newest row with event_timestamp <= at."""
    seen = [r for r in rows if all(r[k] == v for k, v in key.items()) and r["event_timestamp"] <= at]
    return max(seen, key=lambda r: r["event_timestamp"]) if seen else None


def test_social_counts_friends_going_point_in_time(spark) -> None:  # type: ignore[no-untyped-def]
    friendships = on_time(
        spark.createDataFrame(
            [("u", "f1", ts(1)), ("u", "f2", ts(1)), ("u", "f3", ts(5)), ("u", "f4", ts(1))],
            "user_id string, friend_id string, created_at timestamp",
        ),
        "created_at",
    )
    rsvps = on_time(
        spark.createDataFrame(
            [
                ("f1", "e", ts(2)),
                ("f2", "e", ts(3)),
                ("f2", "e", ts(3, 1)),  # a second RSVP by the same friend counts once
                ("f3", "e", ts(2)),  # friends only from day 5: counts from then, not before
                ("f4", "other", ts(2)),
                ("u", "e", ts(4)),  # the user's own RSVP is not a friend going
            ],
            "user_id string, event_id string, rsvp_at timestamp",
        ),
        "rsvp_at",
    )
    rows = T.social_counts(friendships, rsvps).collect()
    going = {at: _as_of(rows, {"user_id": "u", "event_id": "e"}, at) for at in (ts(1), ts(2), ts(4), ts(6))}
    assert going[ts(1)] is None
    assert going[ts(2)]["friends_going"] == 1
    assert going[ts(4)]["friends_going"] == 2
    assert going[ts(6)]["friends_going"] == 3 and going[ts(6)]["friends_going_bucket"] == 3
    assert _as_of(rows, {"user_id": "u", "event_id": "other"}, ts(6))["friends_going"] == 1


def test_event_dynamics_velocity_decays_and_fill_is_damped(spark) -> None:  # type: ignore[no-untyped-def]
    events = on_time(
        spark.createDataFrame([("e", ts(1), 10)], "event_id string, created_at timestamp, capacity long"),
        "created_at",
    )
    rsvps = on_time(
        spark.createDataFrame(
            [("e", ts(2, 10)), ("e", ts(2, 11)), ("e", ts(2, 11)), ("e", ts(3, 9))],
            "event_id string, rsvp_at timestamp",
        ),
        "rsvp_at",
    )
    snapshots = on_time(
        spark.createDataFrame(
            [("e", 10, 10, ts(3, 12))],
            "event_id string, seats_taken long, capacity long, snapshot_at timestamp",
        ),
        "snapshot_at",
    )
    rows = T.event_dynamics(events, rsvps, snapshots).collect()
    key = {"event_id": "e"}
    assert _as_of(rows, key, ts(1, 1))["rsvp_count"] == 0
    at_11 = _as_of(rows, key, ts(2, 11, 30))
    assert at_11["rsvp_count"] == 3 and at_11["rsvp_velocity_6h"] == pytest.approx(3 / 6)
    # 6 hours after the burst the velocity is back to zero although no new RSVP came.
    assert _as_of(rows, key, ts(2, 18))["rsvp_velocity_6h"] == 0.0
    assert _as_of(rows, key, ts(3, 10))["fill_rate"] == pytest.approx(0.4)
    # Sold out (10/10): damped above 0.9 -> 0.9 + 0.1 * 0.25.
    assert _as_of(rows, key, ts(3, 13))["fill_rate"] == pytest.approx(0.925)


def test_late_deliveries_count_from_their_delivery(spark) -> None:  # type: ignore[no-untyped-def]
    """An RSVP, a capacity snapshot or a friendship delivered a day late was not in the online
    store or the published catalog before its delivery: event_dynamics and social count it from
    then, never earlier."""
    events = on_time(
        spark.createDataFrame([("e", ts(1), 10)], "event_id string, created_at timestamp, capacity long"),
        "created_at",
    )
    rsvps = spark.createDataFrame(
        [("f1", "e", ts(2, 10), hour_key(ts(2, 10))), ("f2", "e", ts(2, 11), hour_key(ts(3, 11)))],
        "user_id string, event_id string, rsvp_at timestamp, _delivered string",
    )
    snapshots = spark.createDataFrame(
        [("e", 9, 10, ts(2, 12), hour_key(ts(3, 12)))],
        "event_id string, seats_taken long, capacity long, snapshot_at timestamp, _delivered string",
    )
    friendships = spark.createDataFrame(
        [("u", "f1", ts(1), hour_key(ts(2, 20))), ("u", "f2", ts(1), hour_key(ts(1)))],
        "user_id string, friend_id string, created_at timestamp, _delivered string",
    )
    dynamics = T.event_dynamics(events, rsvps, snapshots).collect()
    key = {"event_id": "e"}
    before = _as_of(dynamics, key, ts(3, 10, 59))
    assert before["rsvp_count"] == 1 and before["fill_rate"] == pytest.approx(0.1)
    assert _as_of(dynamics, key, ts(3, 11))["rsvp_count"] == 2
    assert _as_of(dynamics, key, ts(3, 11))["rsvp_velocity_6h"] == pytest.approx(1 / 6)
    assert _as_of(dynamics, key, ts(3, 17))["rsvp_velocity_6h"] == 0.0
    assert _as_of(dynamics, key, ts(3, 12))["fill_rate"] == pytest.approx(0.9)
    social = T.social_counts(friendships, rsvps).collect()
    pair = {"user_id": "u", "event_id": "e"}
    assert _as_of(social, pair, ts(2, 19, 59)) is None  # f1's friendship arrives at 20:00
    assert _as_of(social, pair, ts(2, 20))["friends_going"] == 1
    assert _as_of(social, pair, ts(3, 10, 59))["friends_going"] == 1  # f2's RSVP arrives on day 3, 11:00
    assert _as_of(social, pair, ts(3, 11))["friends_going"] == 2


def test_user_features_see_only_their_past(spark) -> None:  # type: ignore[no-untyped-def]
    users = spark.createDataFrame(
        [("u", "nyc", 40.70, -74.00, ts(1), ["music"])],
        "user_id string, metro string, home_lat double, home_lng double, updated_at timestamp, "
        "onboarding_categories array<string>",
    ).withColumn("signup_at", T.F.col("updated_at"))
    users = on_time(users, "updated_at")
    others = spark.createDataFrame(
        [(f"x{i}", "nyc", 40.7, -74.0, ts(1), []) for i in range(5)],
        "user_id string, metro string, home_lat double, home_lng double, updated_at timestamp, "
        "onboarding_categories array<string>",
    ).withColumn("signup_at", T.F.col("updated_at"))
    others = on_time(others, "updated_at")
    venues = spark.createDataFrame(
        [("v_near", "nyc", 40.71, -74.00), ("v_far", "nyc", 40.95, -74.00)],
        "venue_id string, metro string, lat double, lng double",
    )
    events = spark.createDataFrame(
        [("e1", "v_near", "arts"), ("e2", "v_far", "arts"), ("e3", "v_near", "tech")],
        "event_id string, venue_id string, category string",
    )
    rsvps = on_time(
        spark.createDataFrame(
            [("u", "e1", ts(2)), ("u", "e2", ts(3)), ("u", "e3", ts(4)), ("x1", "e3", ts(2))],
            "user_id string, event_id string, rsvp_at timestamp",
        ),
        "rsvp_at",
    )
    attendance = on_time(
        spark.createDataFrame(
            [("u", "e1", True, ts(10)), ("u", "e2", False, ts(11))],
            "user_id string, event_id string, attended boolean, observed_at timestamp",
        ),
        "observed_at",
    )
    days = T.calendar("2026-11-01", "2026-11-30", users)
    rows, fitted = T.user_features(users.unionByName(others), rsvps, attendance, events, venues, days)
    rows = rows.collect()
    key = {"user_id": "u"}
    assert _as_of(rows, key, ts(2, 12))["history_depth"] == 1
    day3 = _as_of(rows, key, ts(3, 12))
    assert day3["history_depth"] == 2 and day3["attended_count"] == 0
    day10 = _as_of(rows, key, ts(10, 12))
    assert day10["attended_count"] == 1 and day10["onboarded"] == 1
    # Shrunk: one observed attendance out of one does not make a 100% follow-through.
    assert 0.0 < day10["attend_rate_shrunk"] < 1.0
    # The no-show observed on day 11 is invisible on day 10 and visible after.
    assert _as_of(rows, key, ts(10, 23))["attend_rate_shrunk"] == day10["attend_rate_shrunk"]
    assert _as_of(rows, key, ts(11, 12))["attend_rate_shrunk"] != day10["attend_rate_shrunk"]
    # Arts was RSVPed twice, tech once, music only picked at onboarding: the order follows.
    assert day3["aff_arts"] > day3["aff_tech"] > day3["aff_comedy"]
    assert day3["aff_music"] > day3["aff_comedy"]
    assert set(fitted) == {"user_attend_rate_m", "user_affinity_m"}
    # Travel tolerance: one attended event ~1.1 km away, shrunk toward the metro's typical distance.
    assert 0.5 < day10["travel_tolerance_km"] < 10


def test_series_signal_decays_with_instances(spark) -> None:  # type: ignore[no-untyped-def]
    # 16 old instances that everyone attended, then 8 recent ones nobody attended.
    events = spark.createDataFrame(
        [(f"e{k:02d}", "o", "v", "s", datetime(2026, 1, 1 + k)) for k in range(24)],
        "event_id string, organizer_id string, venue_id string, series_id string, start_at timestamp",
    )
    attendance = on_time(
        spark.createDataFrame(
            [("u", f"e{k:02d}", k < 16, datetime(2026, 2, 1 + k)) for k in range(24)],
            "user_id string, event_id string, attended boolean, observed_at timestamp",
        ),
        "observed_at",
    )
    ratings = spark.createDataFrame(
        [], "user_id string, event_id string, rating long, rated_at timestamp, _delivered string"
    )
    rows = T.series_stats(attendance, ratings, events).collect()
    latest = max(rows, key=lambda r: r["event_timestamp"])
    undecayed = 16 / 24
    # Half-life 8: the 8 recent misses outweigh 16 old hits once weighted.
    assert latest["series_attend_rate"] < undecayed - 0.1
    assert latest["series_instances"] == 24


def test_earlier_rows_do_not_move_when_later_days_arrive(spark) -> None:  # type: ignore[no-untyped-def]
    """Pseudocounts are fitted per UTC day on what was known before it, like the priors: facts from
    later days (new users, more outcomes for the same organizers, more impressions in the same
    markets, late RSVPs to events shown early, impressions and check-ins delivered days after
    they happened, users who edit their profile or move) leave every earlier row of the fitted
    tables exactly as it was. A fit over everything known at a run's end moved them all, each hour, and each move
    restamped them; counting a late RSVP on the day its impression was served did too, and so did
    counting a late delivery on the day it was served, and so did a profile edit (the priors joined
    each user's outcomes to every version of the profile, or only to the newest), and so did
    counting a late check-in at its own instant rather than when it was delivered."""
    import random

    rng = random.Random(5)
    categories = ["arts", "tech", "music", "food_drink"]
    events = [(f"e{j}", f"v{j % 2}", categories[j % 4], f"o{j % 3}", ts(12)) for j in range(30)]
    users, rsvps, attendance, impressions = [], [], [], []
    for i in range(60):
        joined = 1 if i < 40 else 8  # the last 20 sign up on day 8
        users.append((f"u{i}", "nyc", 40.70 + i * 0.001, -74.0, ts(joined), []))
        if i < 10:  # a second version on day 9: onboarding picked, the first five move to Chicago
            metro, lat, lng = ("chi", 41.88, -87.63) if i < 5 else ("nyc", 40.80, -73.95)
            users.append((f"u{i}", metro, lat, lng, ts(9, 5), ["music"]))
        for n in range(4):
            day = joined + rng.randrange(0, 3)
            event = rng.choice(events)[0]
            served = ts(day, rng.randrange(24))
            late = i < 10 and n == 1  # logged on the day, delivered on day 9
            impressions.append((f"u{i}", event, served, hour_key(ts(9, 3) if late else served)))
            if rng.random() < 0.5:
                rsvps.append((f"u{i}", event, ts(day, 12, n), hour_key(ts(day, 12, n))))
                # Half the users always come, half never: real between-user variance to fit.
                observed = ts(day + 1 + (n % 2), 9, n)
                checked_in_late = i < 10 and n == 2  # observed early, delivered on day 9
                attendance.append(
                    (
                        f"u{i}",
                        event,
                        i % 2 == 0,
                        observed,
                        hour_key(ts(9, 4) if checked_in_late else observed),
                    )
                )
            elif i < 10 and n == 0:
                rsvps.append((f"u{i}", event, ts(9, 8), hour_key(ts(9, 8))))  # seen early, answered on day 9
    user_schema = (
        "user_id string, metro string, home_lat double, home_lng double, updated_at timestamp, "
        "onboarding_categories array<string>"
    )
    frames = {
        "users": spark.createDataFrame(users, user_schema).withColumn("signup_at", T.F.col("updated_at")),
        "rsvps": spark.createDataFrame(
            rsvps, "user_id string, event_id string, rsvp_at timestamp, _delivered string"
        ),
        "attendance": spark.createDataFrame(
            attendance,
            "user_id string, event_id string, attended boolean, observed_at timestamp, _delivered string",
        ),
        "impressions": spark.createDataFrame(
            impressions, "user_id string, event_id string, served_at timestamp, _delivered string"
        ),
    }
    known_at = {
        "users": "updated_at",
        "rsvps": "rsvp_at",
        "attendance": "observed_at",
        "impressions": "served_at",
    }
    # Silver rows carry the hour they were delivered in; users here arrive on time.
    # "users" holds every version (what gold reads from bronze for user_features).
    frames = {
        n: df
        if "_delivered" in df.columns
        else df.withColumn("_delivered", T.F.date_format(known_at[n], "yyyy-MM-dd'T'HH"))
        for n, df in frames.items()
    }
    venues = spark.createDataFrame(
        [("v0", "nyc", 40.71, -74.0), ("v1", "nyc", 40.75, -73.99)],
        "venue_id string, metro string, lat double, lng double",
    )
    event_frame = spark.createDataFrame(
        [(*e, None) for e in events],
        "event_id string, venue_id string, category string, organizer_id string, start_at timestamp, "
        "series_id string",
    )
    event_feats = event_frame.select(
        "event_id", T.F.lit("nyc").alias("metro"), "category", T.F.lit(42).alias("hour_of_week")
    )
    ratings = spark.createDataFrame(
        [], "user_id string, event_id string, rating long, rated_at timestamp, _delivered string"
    )
    days = T.calendar("2026-11-01", "2026-11-30", frames["users"])

    def tables(until: datetime | None) -> dict[str, list[dict]]:  # type: ignore[type-arg]
        f = {
            n: df if until is None else df.where(T.known_at(known_at[n]) < until) for n, df in frames.items()
        }
        user, _ = T.user_features(f["users"], f["rsvps"], f["attendance"], event_frame, venues, days)
        org, _ = T.entity_outcome_stats(f["attendance"], ratings, event_frame, "organizer_id", "org", days)
        market, _ = T.market_rates(f["impressions"], f["rsvps"], event_feats, days)
        return {
            name: sorted(
                (r.asDict() for r in df.where(T.F.col("event_timestamp") < ts(8)).collect()),
                key=lambda r: sorted((k, str(v)) for k, v in r.items()),
            )
            for name, df in (("user_features", user), ("organizer_stats", org), ("market_rates", market))
        }

    early, everything = tables(ts(8)), tables(None)
    assert all(early[t] for t in early), {t: len(r) for t, r in early.items()}
    assert early == everything
    # ...and the fits are real: follow-through is shrunk by a fitted m, not the no-data maximum.
    _, fitted = T.user_features(
        frames["users"], frames["rsvps"], frames["attendance"], event_frame, venues, days
    )
    assert fitted["user_attend_rate_m"] < T.MAX_PSEUDOCOUNT


def test_created_stamps_are_what_hourly_runs_would_have_written(spark) -> None:  # type: ignore[no-untyped-def]
    """An hourly run stamps every row at its end (its late-arrival rows too); a run over a longer
    window stamps each row at the end of its hour, within [the end of the window's first hour, the
    window's end]; a run with no start (a backfill from the beginning) only caps at its end."""
    from pipelines.features.jobs import created_stamp

    rows = spark.createDataFrame(
        [(ts(5, 3, 10),), (ts(8, 13, 5),), (ts(8, 15, 59),)], "event_timestamp timestamp"
    )

    def stamps(start: datetime | None, end: datetime | None) -> list[datetime]:
        def aware(t: datetime | None) -> datetime | None:
            return None if t is None else t.replace(tzinfo=UTC)

        return [r[0] for r in rows.select(created_stamp(aware(start), aware(end))).orderBy(1).collect()]

    assert stamps(ts(8, 15), ts(8, 16)) == [ts(8, 16)] * 3
    assert stamps(ts(8, 12), ts(8, 16)) == [ts(8, 13), ts(8, 14), ts(8, 16)]
    assert stamps(None, ts(8, 15)) == [ts(5, 4), ts(8, 14), ts(8, 15)]
    assert stamps(None, None) == [ts(5, 4), ts(8, 14), ts(8, 16)]


def test_a_row_is_stamped_no_earlier_than_the_hour_that_delivered_its_value(spark) -> None:  # type: ignore[no-untyped-def]
    """A profile edited at 13:05 and delivered with the 14:00 export is first read by the hourly
    run over [14:00, 15:00): a backfill stamps its row 15:00 too, not 14:00."""
    from pipelines.features.jobs import created_stamp

    rows = spark.createDataFrame(
        [(ts(8, 13, 5), ts(8, 14)), (ts(8, 13, 10), ts(8, 13)), (ts(8, 13, 20), None)],
        "event_timestamp timestamp, known_by timestamp",
    )

    def stamps(end: datetime) -> list[datetime]:
        stamp = created_stamp(None, end.replace(tzinfo=UTC), T.F.col("known_by"))
        return [r[0] for r in rows.orderBy("event_timestamp").select(stamp).collect()]

    assert stamps(ts(8, 16)) == [ts(8, 15), ts(8, 14), ts(8, 14)]
    assert stamps(ts(8, 15)) == [ts(8, 15), ts(8, 14), ts(8, 14)]
    assert stamps(ts(8, 14)) == [ts(8, 14)] * 3  # never after the run's end
