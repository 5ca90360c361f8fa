"""The live platform delivers each hour exactly once, responds by the ground truth, and keeps the books.

The feed here is a stand-in for the service (the system test drives the real one): it shows a
user the live events of their metro that the booking counter says are still open to them, ranked
either by the ground truth (an oracle of its own, blind to friends) or at random, so the record the
platform keeps can be checked against what it must mean.
"""

from __future__ import annotations

import json
from collections import Counter as Tally
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from contracts.landing import ENTITIES
from simulator import GroundTruth, SimulationConfig, simulate
from simulator.platform import (
    PART_NAME,
    FeedAnswer,
    HttpFeed,
    ServedItem,
    loop_days,
    platform_root,
    platform_start,
    play_hours,
)

CONFIG = SimulationConfig(users=400, days=6, seed=5, platform_days=2)
HOURS = 30


class Counter:
    """The booking counter a real service would read (sold out, RSVPed) and the platform writes,
    seeded with the history's RSVPs as the service seeds its counter from the published catalog."""

    def __init__(self, truth_root: Path) -> None:
        history = pd.read_parquet(truth_root / "rsvps.parquet")
        self.rsvps: set[tuple[str, str]] = set(zip(history["user_id"], history["event_id"], strict=True))
        self.taken: dict[str, int] = history.groupby("event_id").size().to_dict()
        self.capacity: dict[str, int | None] = {}
        self.cancelled: set[str] = set()

    def set_capacity(self, rows: object) -> None:
        for event, capacity, taken in rows:  # type: ignore[attr-defined]
            self.capacity[event], self.taken[event] = capacity, taken

    def cancel(self, event_ids: object) -> None:
        self.cancelled.update(event_ids)  # type: ignore[arg-type]

    def add_rsvps(self, pairs: object) -> None:
        for pair in pairs:  # type: ignore[attr-defined]
            if pair not in self.rsvps:
                self.rsvps.add(pair)
                self.taken[pair[1]] = self.taken.get(pair[1], 0) + 1


class StandInFeed:
    """Live events in the user's metro within 21 days that the counter leaves open to the user."""

    def __init__(self, truth: GroundTruth, counter: Counter, by_truth: bool, seed: int = 0) -> None:
        self.truth, self.counter, self.by_truth = truth, counter, by_truth
        self.rng = np.random.default_rng(seed)
        self.metro = truth.users.set_index("user_id")["metro"]
        self.calls = self.empty = 0

    def __call__(self, user_id: str, at: datetime, request_id: str, lat: float, lng: float) -> FeedAnswer:
        self.calls += 1
        ev = self.truth.events
        live = ev[
            (ev["metro"] == self.metro[user_id])
            & (ev["created_at"] <= at)
            & (ev["start_at"] > at)
            & (ev["start_at"] <= at + timedelta(days=21))
            & ~(ev["cancelled_at"] <= at)
        ]
        open_ = [
            e
            for e, cap in zip(live["event_id"], live["capacity"], strict=True)
            if (user_id, e) not in self.counter.rsvps and self.counter.taken.get(e, 0) < cap
        ]
        if self.by_truth:
            ids = np.array(open_, dtype=object)
            users = np.full(len(ids), user_id, dtype=object)
            value = self.truth.p_rsvp(users, ids, np.datetime64(int(at.timestamp()), "s"), 0) * (
                self.truth.p_attend_given_rsvp(users, ids)
            )
            picked = list(ids[np.argsort(-value, kind="stable")][:25])
        else:
            picked = list(self.rng.permutation(open_)[:25])
        items = [ServedItem(str(e), i + 1, "home", False, None) for i, e in enumerate(picked)]
        self.empty += not items
        return FeedAnswer("stand-in:v1", "model", items)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("platform")
    simulate(CONFIG, root / "landing", root / "truth")
    return root


def _lines(landing: Path) -> dict[str, list[str]]:
    """Every landing line, by ``<entity>/delivered=<hour>/<file>``."""
    return {str(p.relative_to(landing)): p.read_text().splitlines() for p in sorted(landing.rglob("*.jsonl"))}


def _fresh_copy(world: Path, tmp_path: Path) -> Path:
    import shutil

    shutil.copytree(world, tmp_path / "w")
    return tmp_path / "w"


def test_the_history_keeps_back_what_falls_due_after_it(world: Path) -> None:
    manifest = json.loads((world / "truth" / "manifest.json").read_text())
    start = platform_start(world / "truth")
    assert start == CONFIG.start + timedelta(days=CONFIG.days)
    assert manifest["window_end"] == start.strftime("%Y-%m-%dT%H:%M:%SZ")
    last_written = max(p.name.removeprefix("delivered=") for p in world.glob("landing/*/delivered=*"))
    assert last_written < start.strftime("%Y-%m-%dT%H")
    pending = pd.read_parquet(platform_root(world / "truth") / "pending.parquet")
    for name, e in manifest["entities"].items():
        # Every line is written now or held for the hour it is due in: none lost, none twice.
        assert (
            e["lines_written"] + e["held_for_platform"]
            == e["generated"] + e["duplicates"] + e["malformed_total"]
        )
        assert e["held_for_platform"] == int((pending["entity"] == name).sum()), name
    # Attendance is observed 7-17 days after the recommendation: most of it falls after a 6-day history.
    assert (
        manifest["entities"]["attendance"]["held_for_platform"]
        > manifest["entities"]["attendance"]["lines_written"]
    )
    assert (pending["hour"] >= int(start.timestamp()) // 3600).all()


def test_hours_deliver_once_respond_by_the_truth_and_keep_the_books(world: Path, tmp_path: Path) -> None:
    home = _fresh_copy(world, tmp_path)
    truth_root, landing = home / "truth", home / "landing"
    truth = GroundTruth.load(truth_root)
    start = platform_start(truth_root)
    assert start is not None
    counter = Counter(truth_root)
    feed = StandInFeed(truth, counter, by_truth=True)
    before = _lines(landing)
    pending = pd.read_parquet(platform_root(truth_root) / "pending.parquet")
    hours = play_hours(truth_root, landing, start, start + timedelta(hours=HOURS), feed, counter)
    assert len(hours) == HOURS and sum(h["requests"] for h in hours) == feed.calls > 20
    assert sum(h["rsvps"] for h in hours) > 0 and all(h["feeds_failed"] == 0 for h in hours)

    # Each hour's export sits in its own delivered folder, every line a record of the schema.
    after = _lines(landing)
    new = {path: lines for path, lines in after.items() if path not in before}
    assert all(path.endswith(PART_NAME) for path in new)
    keys = {h["hour"] for h in hours}
    held = set(pending["line"])  # the history's own lines, its deliberate dirt among them
    produced = 0
    for path, lines in new.items():
        entity, folder, _ = path.split("/")
        assert folder.removeprefix("delivered=") in keys
        for line in lines:
            if line not in held:
                produced += 1
                assert list(json.loads(line)) == list(ENTITIES[entity].field_names)
    assert produced > 0
    # What the history held back for these hours came out exactly once, in its hour.
    first_hour = int(start.timestamp()) // 3600
    due = pending[(pending["hour"] >= first_hour) & (pending["hour"] < first_hour + HOURS)]
    delivered = Tally(line for lines in new.values() for line in lines)
    assert all(delivered[line] >= 1 for line in due["line"])
    assert sum(sum(h["lines"].values()) for h in hours) == sum(len(v) for v in new.values())

    # The books: one RSVP per user and event, never past capacity, every RSVP told to the counter,
    # and every RSVP's attendance due 7 to 17+ days after the feed that caused it.
    state = pd.read_parquet(platform_root(truth_root) / "rsvps.parquet")
    live = state[state["origin"] >= 0]
    assert len(live) == sum(h["rsvps"] for h in hours)
    assert not state.duplicated(["user_id", "event_id"]).any()
    capacity = truth.events.set_index("event_id")["capacity"]
    taken = state.groupby("event_id").size()
    assert (taken <= capacity.reindex(taken.index)).all()
    assert set(zip(live["user_id"], live["event_id"], strict=True)) <= counter.rsvps
    requests = pd.concat(
        [
            f
            for f in map(pd.read_parquet, sorted((platform_root(truth_root) / "requests").glob("*")))
            if len(f)
        ]
    )
    served_at = requests.set_index("request_id")["served_at"]
    pending_now = pd.read_parquet(platform_root(truth_root) / "pending.parquet")
    attendance = pending_now[(pending_now["entity"] == "attendance") & (pending_now["origin"] >= 0)]
    assert len(attendance) == len(live)
    for rid, line in zip(live["request_id"], attendance["line"], strict=True):
        observed = pd.Timestamp(json.loads(line)["observed_at"])
        assert observed - served_at[rid] >= pd.Timedelta(days=7)

    # Ranked by the truth, the feed earns what the record says, never more than the oracle.
    days = loop_days(truth_root)
    assert len(days) == 2 and (days["feeds"].sum() == feed.calls)
    assert days["empty_feeds"].sum() == feed.empty
    assert (requests["expected_attendance"] <= requests["oracle_expected_attendance"] + 1e-9).all()
    assert 0.9 < days["share_of_oracle"].min() <= 1.0 + 1e-9

    # A played hour is played once: asking again delivers nothing and changes no file.
    again = play_hours(truth_root, landing, start, start + timedelta(hours=3), feed, counter)
    assert all(h["already_played"] for h in again) and _lines(landing) == after


def test_the_same_world_and_feeds_play_the_same_bytes_even_after_a_crash(world: Path, tmp_path: Path) -> None:
    def run(root: Path, crash_at: int | None) -> dict[str, list[str]]:
        truth = GroundTruth.load(root / "truth")
        counter = Counter(root / "truth")
        start = platform_start(root / "truth")
        assert start is not None
        feed = StandInFeed(truth, counter, by_truth=True)
        if crash_at is not None:

            class Crashing(Counter):
                def add_rsvps(self, pairs: object) -> None:
                    raise OSError("the booking path went away")

            with pytest.raises(OSError):
                play_hours(root / "truth", root / "landing", start + timedelta(hours=crash_at),
                           start + timedelta(hours=crash_at + 1), feed, Crashing(root / "truth"))  # fmt: skip
        play_hours(root / "truth", root / "landing", start, start + timedelta(hours=6), feed, counter)
        return _lines(root / "landing")

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    plain = run(_fresh_copy(world, tmp_path / "a"), None)
    # The crash leaves no marker, so the hour is played again from the state before it, and the
    # users' responses come from the hour's own seed: the same lines as a run that never crashed.
    crashed = run(_fresh_copy(world, tmp_path / "b"), 0)
    assert any(p.startswith("rsvps/") for p in plain)
    assert crashed == plain


def test_hours_outside_the_world_are_refused(world: Path) -> None:
    start = platform_start(world / "truth")
    assert start is not None
    feed = StandInFeed(GroundTruth.load(world / "truth"), Counter(world / "truth"), by_truth=False)
    with pytest.raises(ValueError, match="the platform plays"):
        play_hours(world / "truth", world / "landing", start - timedelta(hours=1), start, feed)
    end = start + timedelta(days=CONFIG.platform_days)
    with pytest.raises(ValueError, match="the platform plays"):
        play_hours(world / "truth", world / "landing", end, end + timedelta(hours=1), feed)
    assert not (platform_root(world / "truth") / "played").exists()


def test_hours_whose_feeds_all_failed_are_reported_not_dropped(world: Path, tmp_path: Path) -> None:
    """The service down (nothing listens on its port): every feed fails, the hour still delivers,
    and the loop report shows the day with its requests failed instead of leaving the day out."""
    import socket

    home = _fresh_copy(world, tmp_path)
    truth_root, landing = home / "truth", home / "landing"
    start = platform_start(truth_root)
    assert start is not None
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # free once closed: connections to it are refused
    feed = HttpFeed(f"http://127.0.0.1:{port}", timeout_s=5)
    try:
        hours = play_hours(truth_root, landing, start, start + timedelta(hours=3), feed, Counter(truth_root))
    finally:
        feed.close()
    asked = sum(h["requests"] for h in hours)
    assert asked > 0 and all(h["feeds_failed"] == h["requests"] for h in hours)
    assert all(h["first_error"] for h in hours if h["requests"]) and sum(
        sum(h["lines"].values()) for h in hours
    )

    days = loop_days(truth_root)
    assert days[["requests", "feeds_failed", "feeds", "served_by_model"]].to_dict("records") == [
        {"requests": asked, "feeds_failed": asked, "feeds": 0, "served_by_model": 0}
    ]
    assert days["expected_attendance"].isna().all() and days["share_of_oracle"].isna().all()
