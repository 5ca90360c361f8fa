"""The platform, live: one hour at a time, its users shown what the running feed service returns.

``simulate(SimulationConfig(platform_days=N))`` writes the history and keeps back everything due
after it (``start_platform``). ``play_hours(truth_root, landing_root, start, end, feed, booking)``
then plays the platform one UTC hour after another:

1. **What the hour brings**: the world's own records due in it (sign-ups, friendships, venues,
   organizers, series and events listed, edits, cancellations) and the outcomes that fall due
   (attendance checked in, ratings, RSVPs made near the end of an earlier hour).
2. **Feeds**: the hour's feed requests, drawn from each user's request rate in the user's local
   hour of day exactly as the history draws them, each asked of the **running service** at the
   request's instant, from the user's home. The service logs the impressions itself, into this
   landing zone: what it served is what ingestion reads back.
3. **Responses from the hidden ground truth**: each user RSVPs to what they were shown with
   ``GroundTruth.p_rsvp`` (friends who had RSVPed by then included); the booking path accepts
   while seats remain, the event is live and the user has no RSVP for it yet. Each accepted RSVP's
   attendance and rating are drawn at once and delivered when they are observed (7 to 17 days
   after the recommendation, as in the history): the nine-day label delay, for real.
4. **The booking path**: every accepted RSVP, new event and cancellation goes to ``booking``, the
   capacity counter the service reads its hard filters from.
5. **The record**: per request, what was served and what it was worth under the ground truth
   (expected RSVPs and attendances), beside what an oracle ranking every live event by its true
   expected attendance would have served for the same request; ``loop_days`` rolls it up per day.

The hour's landing lines go to ``<entity>/delivered=<hour>/part-platform.jsonl``, the folder the
service writes that hour's impressions to, so the ``ingest`` run for the hour reads both.

State lives under ``<truth_root>/platform``. An hour is played once: its report
(``played/<hour>.json``) is written last, after everything else the hour changed, so an hour
that crashed midway is played again from the state before it, and a played hour is a no-op.
Organic RSVPs (search, shared links) are not simulated live: every live RSVP answers a feed.
"""

from __future__ import annotations

import json
import logging
import os
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import pandas as pd

from contracts.landing import CATEGORIES, ENTITIES, delivered_partition
from simulator.activity import REQUEST_HOUR_WEIGHTS
from simulator.clock import DAY, HOUR, iso_instants, utc_offsets
from simulator.config import METROS
from simulator.delivery import EntityDelivery, serialize
from simulator.truth import TASTE_PREFIX, GroundTruth

log = logging.getLogger(__name__)

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

PART_NAME = "part-platform.jsonl"
FEED_SLOTS = 25
_NEVER = np.iinfo(np.int64).max


class OutsideWorld(ValueError):
    """Hours the simulated world has nothing for: before its live days, or after them."""


def platform_root(truth_root: Path) -> Path:
    return Path(truth_root) / "platform"


def hour_key(hour: int) -> str:
    """``2026-11-09T13`` for an epoch hour."""
    return str(iso_instants([hour * HOUR])[0])[:13]


# ------------------------------------------------------------------------------------ the seams


@dataclass(frozen=True)
class ServedItem:
    event_id: str
    position: int
    surface: str  # home | near_you
    is_exploration: bool
    exploration_kind: str | None


@dataclass(frozen=True)
class FeedAnswer:
    model_version: str
    served_by: str
    items: list[ServedItem]


class Feed(Protocol):
    """Asks the feed service for one user's feed as of ``at`` (raises when it cannot)."""

    def __call__(self, user_id: str, at: datetime, request_id: str, lat: float, lng: float) -> FeedAnswer: ...


class Booking(Protocol):
    """The booking path's writes to the capacity counter serving reads (``WritableAvailability``)."""

    def set_capacity(self, rows: Iterable[tuple[str, int | None, int]]) -> None: ...

    def cancel(self, event_ids: Iterable[str]) -> None: ...

    def add_rsvps(self, pairs: Iterable[tuple[str, str]]) -> None: ...


class HttpFeed:
    """The service's ``GET /v1/feed`` over HTTP, with the platform's request id and instant."""

    def __init__(self, base_url: str, timeout_s: float = 30.0) -> None:
        import httpx

        self.base_url = base_url.rstrip("/")
        self._client = httpx.Client(base_url=self.base_url, timeout=timeout_s)

    def __call__(self, user_id: str, at: datetime, request_id: str, lat: float, lng: float) -> FeedAnswer:
        response = self._client.get(
            "/v1/feed",
            params={
                "user_id": user_id,
                "now": at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "request_id": request_id,
                "lat": f"{lat:.6f}",
                "lng": f"{lng:.6f}",
            },
        )
        if response.status_code != 200:
            raise RuntimeError(
                f"feed for {user_id} at {at.isoformat()}: {response.status_code} {response.text[:300]}"
            )
        body = response.json()
        items = [
            ServedItem(
                e["event_id"], int(e["position"]), surface, bool(e["is_exploration"]), e["exploration_kind"]
            )
            for surface, key in (("home", "events"), ("near_you", "near_you_this_weekend"))
            for e in body[key]
        ]
        return FeedAnswer(str(body["model_version"]), str(body["served_by"]), items)

    def close(self) -> None:
        self._client.close()


# ------------------------------------------------------------------------------------ the state


def start_platform(truth_root: Path, held: list[EntityDelivery], history_end_s: int) -> None:
    """Keep the lines due from the history's end on, for the hours that will deliver them."""
    root = platform_root(truth_root)
    root.mkdir(parents=True, exist_ok=True)
    pending = pd.DataFrame(
        {
            "entity": [d.entity for d in held for _ in range(len(d.lines))],
            "hour": np.concatenate([np.zeros(0, np.int64), *(d.hours for d in held)]).astype(np.int64),
            "line": [str(line) for d in held for line in d.lines],
        }
    )
    pending["origin"] = np.int64(-1)  # -1: the history; else the hour that produced the line
    _write_parquet(pending, root / "pending.parquet")
    history = pd.read_parquet(Path(truth_root) / "rsvps.parquet")
    rsvps = pd.DataFrame(
        {
            "user_id": history["user_id"].astype(str),
            "event_id": history["event_id"].astype(str),
            "rsvp_s": _epoch_s(history["rsvp_at"]),
            "request_id": None,
            "origin": np.int64(-1),
        }
    )
    _write_parquet(rsvps, root / "rsvps.parquet")
    (root / "clock.json").write_text(
        json.dumps({"history_end": str(iso_instants([history_end_s])[0])}, indent=2) + "\n"
    )


def platform_start(truth_root: Path) -> datetime | None:
    """The first instant the platform plays (the history's end), or None for a world without it."""
    clock = platform_root(truth_root) / "clock.json"
    if not clock.is_file():
        return None
    return datetime.fromisoformat(json.loads(clock.read_text())["history_end"].replace("Z", "+00:00"))


def played_hours(truth_root: Path) -> list[dict[str, Any]]:
    """Every played hour's report, oldest first."""
    folder = platform_root(truth_root) / "played"
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))] if folder.is_dir() else []


def _write_parquet(frame: pd.DataFrame, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    frame.to_parquet(tmp, index=False)
    os.replace(tmp, path)


def _epoch_s(values: pd.Series) -> IntArray:
    nanos = np.asarray(pd.to_datetime(values, utc=True).astype("int64"), dtype=np.int64)
    return np.floor_divide(nanos, 1_000_000_000).astype(np.int64)


# ------------------------------------------------------------------------------------ the world


@dataclass
class _World:
    """The truth's arrays, addressed by row, for the hour's vector work."""

    truth: GroundTruth
    user_ids: npt.NDArray[np.object_]
    user_row: dict[str, int]
    u_metro: npt.NDArray[np.object_]
    u_lat: FloatArray
    u_lng: FloatArray
    u_signup: IntArray
    u_rate: FloatArray
    taste: FloatArray
    event_ids: npt.NDArray[np.object_]
    event_row: dict[str, int]
    e_metro: npt.NDArray[np.object_]
    e_created: IntArray
    e_start: IntArray
    e_end: IntArray
    e_cancel: IntArray
    e_capacity: IntArray
    e_free: npt.NDArray[np.bool_]
    e_cat: IntArray
    e_quality: FloatArray
    friends: list[tuple[IntArray, IntArray]]  # per user: friend rows, friendship created_s


def _load_world(truth_root: Path) -> _World:
    truth = GroundTruth.load(truth_root)
    users, events = truth.users, truth.events
    user_ids = users["user_id"].to_numpy(object)
    user_row = {str(u): i for i, u in enumerate(user_ids)}
    fr = pd.read_parquet(Path(truth_root) / "friendships.parquet")
    a = fr["user_id"].map(user_row).to_numpy(np.int64)
    b = fr["friend_id"].map(user_row).to_numpy(np.int64)
    created = _epoch_s(fr["created_at"])
    src, dst, at = np.concatenate([a, b]), np.concatenate([b, a]), np.concatenate([created, created])
    order = np.argsort(src, kind="stable")
    src, dst, at = src[order], dst[order], at[order]
    bounds = np.searchsorted(src, np.arange(len(users) + 1))
    friends = [(dst[bounds[i] : bounds[i + 1]], at[bounds[i] : bounds[i + 1]]) for i in range(len(users))]
    cancel = events["cancelled_at"]
    cat_index = {c: i for i, c in enumerate(CATEGORIES)}
    return _World(
        truth=truth,
        user_ids=user_ids,
        user_row=user_row,
        u_metro=users["metro"].to_numpy(object),
        u_lat=users["home_lat"].to_numpy(np.float64),
        u_lng=users["home_lng"].to_numpy(np.float64),
        u_signup=_epoch_s(users["signup_at"]),
        u_rate=users["request_rate_per_day"].to_numpy(np.float64),
        taste=users[[f"{TASTE_PREFIX}{c}" for c in CATEGORIES]].to_numpy(np.float64),
        event_ids=events["event_id"].to_numpy(object),
        event_row={str(e): i for i, e in enumerate(events["event_id"])},
        e_metro=events["metro"].to_numpy(object),
        e_created=_epoch_s(events["created_at"]),
        e_start=_epoch_s(events["start_at"]),
        e_end=_epoch_s(events["end_at"]),
        e_cancel=np.where(cancel.isna(), _NEVER, _epoch_s(cancel.fillna(pd.Timestamp(0, tz="UTC")))),
        e_capacity=events["capacity"].to_numpy(np.int64),
        e_free=events["is_free"].to_numpy(bool),
        e_cat=np.asarray(events["category"].map(cat_index), dtype=np.int64),
        e_quality=events["quality"].to_numpy(np.float64),
        friends=friends,
    )


@dataclass
class _Bookings:
    """Accepted RSVPs so far (history and live), as the booking path counts them."""

    user: list[int]
    event: list[int]
    t: list[int]
    pairs: set[tuple[int, int]]
    taken: IntArray

    @classmethod
    def of(cls, world: _World, rsvps: pd.DataFrame) -> _Bookings:
        user = [world.user_row[u] for u in rsvps["user_id"]]
        event = [world.event_row[e] for e in rsvps["event_id"]]
        taken = np.bincount(np.asarray(event, np.int64), minlength=len(world.event_ids)).astype(np.int64)
        return cls(user, event, [int(t) for t in rsvps["rsvp_s"]], set(zip(user, event, strict=True)), taken)

    def add(self, u: int, e: int, t: int) -> None:
        self.user.append(u)
        self.event.append(e)
        self.t.append(t)
        self.pairs.add((u, e))
        self.taken[e] += 1

    def friends_going(self, world: _World, u: int, at: int) -> IntArray:
        """Per event: friends of ``u`` (friends by ``at``) who RSVPed before ``at``."""
        friend_rows, since = world.friends[u]
        known = friend_rows[since <= at]
        counts = np.zeros(len(world.event_ids), dtype=np.int64)
        if len(known) == 0 or not self.user:
            return counts
        users = np.asarray(self.user, np.int64)
        before = (np.asarray(self.t, np.int64) < at) & np.isin(users, known)
        out: IntArray = counts + np.bincount(np.asarray(self.event, np.int64)[before], minlength=len(counts))
        return out


# ------------------------------------------------------------------------------------ one hour


@dataclass
class HourReport:
    """What one platform hour did; ``played/<hour>.json``."""

    hour: str
    start: str
    end: str
    requests: int = 0
    feeds_failed: int = 0
    served_by: dict[str, int] = field(default_factory=dict)
    model_versions: dict[str, int] = field(default_factory=dict)
    impressions: int = 0
    exploration_impressions: int = 0
    rsvps: int = 0
    rsvps_refused: int = 0  # wanted, but sold out, no longer live, or already RSVPed
    attendances_drawn: int = 0  # of this hour's RSVPs (delivered when observed)
    lines: dict[str, int] = field(default_factory=dict)  # landing lines this hour delivered
    expected_rsvps: float = 0.0  # summed over the hour's served home feeds, under the truth
    expected_attendance: float = 0.0
    oracle_expected_attendance: float = 0.0  # the same requests, ranked by the truth
    first_error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _hour_requests(world: _World, rng: np.random.Generator, hour: int) -> tuple[IntArray, IntArray]:
    """(user rows, instants) of the hour's feed requests, in time order (as the history draws them)."""
    t0 = hour * HOUR
    weights = REQUEST_HOUR_WEIGHTS / REQUEST_HOUR_WEIGHTS.sum()
    local_hour = np.zeros(len(world.user_ids), dtype=np.int64)
    for metro in np.unique(world.u_metro):
        offset = int(utc_offsets(np.array([t0], dtype=np.int64), METROS[str(metro)].timezone)[0])
        local_hour[world.u_metro == metro] = ((t0 + offset) // HOUR) % 24
    expected = world.u_rate * weights[local_hour]
    counts = rng.poisson(np.where(world.u_signup < t0 + HOUR, expected, 0.0))
    users = np.repeat(np.arange(len(world.user_ids)), counts)
    at = t0 + rng.integers(0, HOUR, len(users))
    at = np.maximum(at, world.u_signup[users] + 1)
    order = np.lexsort((users, at))
    return users[order], at[order]


def _live_in_metro(world: _World, bookings: _Bookings, u: int, at: int, horizon_s: int) -> IntArray:
    """Events a request at ``at`` could show user ``u``: in the metro, listed, not started, within
    the horizon, not cancelled, not sold out, not RSVPed by ``u`` (the oracle's candidates)."""
    ok = (
        (world.e_metro == world.u_metro[u])
        & (world.e_created <= at)
        & (world.e_start > at)
        & (world.e_start <= at + horizon_s)
        & (world.e_cancel > at)
        & (bookings.taken < world.e_capacity)
    )
    rows = np.nonzero(ok)[0]
    return np.asarray([e for e in rows if (u, int(e)) not in bookings.pairs], dtype=np.int64)


def _outcome_lines(
    world: _World, rng: np.random.Generator, u: int, e: int, rec_s: int, rating_rate: float
) -> list[tuple[str, int, dict[str, Any]]]:
    """The attendance record of one accepted RSVP (and its rating, if one is left), drawn now."""
    p = float(world.truth.p_attend_given_rsvp([world.user_ids[u]], [world.event_ids[e]])[0])
    cancelled = world.e_cancel[e] < _NEVER
    attended = bool(rng.random() < p) and not cancelled
    happened = min(int(world.e_cancel[e]), int(world.e_end[e])) if cancelled else int(world.e_end[e])
    observed = int(max(rec_s + rng.uniform(7 * DAY, 17 * DAY), happened + rng.uniform(HOUR, 36 * HOUR)))
    attendance = {
        "user_id": world.user_ids[u],
        "event_id": world.event_ids[e],
        "attended": attended,
        "source": "geofence" if world.e_free[e] else "ticket",
        "observed_at": iso_instants([observed])[0],
    }
    out = [("attendance", observed // HOUR, attendance)]
    if attended and rng.random() < rating_rate:
        latent = np.log(world.taste[u, world.e_cat[e]]) + np.log(world.e_quality[e]) + rng.normal(0.0, 0.7)
        stars = 1 + int(np.searchsorted(np.array([-1.4, -0.8, -0.2, 0.5]), latent))
        rated = int(world.e_end[e] + np.clip(np.exp(rng.normal(np.log(20 * HOUR), 0.8)), HOUR, 7 * DAY))
        rating = {
            "user_id": world.user_ids[u],
            "event_id": world.event_ids[e],
            "rating": stars,
            "rated_at": iso_instants([rated])[0],
        }
        out.append(("ratings", rated // HOUR, rating))
    return out


def _lines(entity: str, records: list[dict[str, Any]]) -> npt.NDArray[np.object_]:
    frame = pd.DataFrame(records, columns=list(ENTITIES[entity].field_names))
    return serialize(frame)


def play_hour(
    world: _World,
    state: dict[str, pd.DataFrame],
    truth_root: Path,
    landing_root: Path,
    hour: int,
    feed: Feed,
    booking: Booking | None,
) -> HourReport:
    """Play one hour; returns its report and leaves the new state in ``state``."""
    cfg = world.truth.config
    t0, t1 = hour * HOUR, (hour + 1) * HOUR
    key = hour_key(hour)
    report = HourReport(hour=key, start=str(iso_instants([t0])[0]), end=str(iso_instants([t1])[0]))
    rng = np.random.default_rng([cfg.seed, hour])
    rsvps_before = state["rsvps"][state["rsvps"]["origin"] != hour]
    bookings = _Bookings.of(world, rsvps_before)
    later: list[tuple[str, int, dict[str, Any]]] = []  # (entity, hour due, record)
    new_rsvps: list[dict[str, Any]] = []
    requests: list[dict[str, Any]] = []
    shown: list[dict[str, Any]] = []
    served_by: Counter[str] = Counter()
    versions: Counter[str] = Counter()
    horizon = cfg.horizon_days * DAY

    users, instants = _hour_requests(world, rng, hour)
    for k, (u, at) in enumerate(zip(users.tolist(), instants.tolist(), strict=True)):
        request_id = f"pr{key.replace('-', '').replace('T', '')}n{k:05d}"
        when = datetime.fromtimestamp(at, UTC)
        report.requests += 1
        try:
            answer = feed(
                str(world.user_ids[u]), when, request_id, float(world.u_lat[u]), float(world.u_lng[u])
            )
        except Exception as err:  # the service down or refusing: the user sees nothing this time
            report.feeds_failed += 1
            report.first_error = report.first_error or f"{type(err).__name__}: {err}"
            continue
        served_by[answer.served_by] += 1
        versions[answer.model_version] += 1
        going = bookings.friends_going(world, u, at)
        at64 = np.datetime64(at, "s")
        # What the oracle would have served: every live event in the metro by true expected attendance.
        cand = _live_in_metro(world, bookings, u, at, horizon)
        n = len(cand)
        uid = np.full(n, world.user_ids[u], dtype=object)
        p_cand = world.truth.p_rsvp(uid, world.event_ids[cand], at64, going[cand]) if n else np.zeros(0)
        a_cand = world.truth.p_attend_given_rsvp(uid, world.event_ids[cand]) if n else np.zeros(0)
        oracle = float(np.sort(p_cand * a_cand)[::-1][:FEED_SLOTS].sum())

        items = [i for i in answer.items if i.event_id in world.event_row]
        rows = np.asarray([world.event_row[i.event_id] for i in items], dtype=np.int64)
        uid = np.full(len(rows), world.user_ids[u], dtype=object)
        p_rsvp = (
            world.truth.p_rsvp(uid, world.event_ids[rows], at64, going[rows]) if len(rows) else np.zeros(0)
        )
        p_att = world.truth.p_attend_given_rsvp(uid, world.event_ids[rows]) if len(rows) else np.zeros(0)
        draws = rng.random(len(rows))
        delays = np.clip(np.exp(rng.normal(np.log(90.0), 1.0, len(rows))), 5, 1800).astype(np.int64)
        home = np.asarray([i.surface == "home" for i in items], dtype=bool)
        rsvped = attended = 0
        for j, item in enumerate(items):
            e = int(rows[j])
            outcome = "none"
            if draws[j] < p_rsvp[j]:
                t_rsvp = at + int(delays[j])
                live = t_rsvp < world.e_start[e] and t_rsvp < world.e_cancel[e]
                if (u, e) in bookings.pairs or not live or bookings.taken[e] >= world.e_capacity[e]:
                    report.rsvps_refused += 1
                    outcome = "refused"
                else:
                    outcome = "rsvp"
                    bookings.add(u, e, t_rsvp)
                    rsvped += 1
                    record = {
                        "rsvp_id": f"rv{request_id}{j:02d}",
                        "user_id": world.user_ids[u],
                        "event_id": world.event_ids[e],
                        "request_id": request_id,
                        "rsvp_at": iso_instants([t_rsvp])[0],
                    }
                    new_rsvps.append({"user_id": record["user_id"], "event_id": record["event_id"],
                                      "rsvp_s": t_rsvp, "request_id": request_id, "origin": hour})  # fmt: skip
                    later.append(("rsvps", t_rsvp // HOUR, record))
                    outcomes = _outcome_lines(world, rng, u, e, at, cfg.rating_response_rate)
                    attended += int(outcomes[0][2]["attended"])
                    later.extend(outcomes)
            shown.append(
                {
                    "request_id": request_id,
                    "user_id": world.user_ids[u],
                    "event_id": item.event_id,
                    "position": item.position,
                    "surface": item.surface,
                    "is_exploration": item.is_exploration,
                    "exploration_kind": item.exploration_kind,
                    "friends_going": int(going[e]),
                    "p_rsvp_true": float(p_rsvp[j]),
                    "p_attend_true": float(p_att[j]),
                    "outcome": outcome,
                }
            )
        report.impressions += len(items)
        report.exploration_impressions += sum(i.is_exploration for i in items)
        report.rsvps += rsvped
        report.attendances_drawn += attended
        # An item the user cannot take up (sold out, RSVPed already, past the horizon) is worth nothing.
        worth = home & np.isin(rows, cand)
        expected_rsvps = float(p_rsvp[worth].sum())
        expected_attendance = float((p_rsvp * p_att)[worth].sum())
        report.expected_rsvps += expected_rsvps
        report.expected_attendance += expected_attendance
        report.oracle_expected_attendance += oracle
        requests.append(
            {
                "request_id": request_id,
                "user_id": world.user_ids[u],
                "served_at": when,
                "model_version": answer.model_version,
                "served_by": answer.served_by,
                "home_items": int(home.sum()),
                "expected_rsvps": expected_rsvps,
                "expected_attendance": expected_attendance,
                "oracle_expected_attendance": oracle,
                "candidates": n,
                "rsvps": rsvped,
                "attendances": attended,
            }
        )
    report.served_by = dict(served_by)
    report.model_versions = dict(versions)

    # The booking path: this hour's RSVPs, events listed and cancellations.
    listed = np.nonzero((world.e_created >= t0) & (world.e_created < t1))[0]
    cancelled = np.nonzero((world.e_cancel >= t0) & (world.e_cancel < t1))[0]
    if booking is not None:
        booking.set_capacity((str(world.event_ids[e]), int(world.e_capacity[e]), 0) for e in listed)
        booking.add_rsvps((r["user_id"], r["event_id"]) for r in new_rsvps)
        booking.cancel(str(world.event_ids[e]) for e in cancelled)

    # Capacity snapshots at the hour's end for every event whose counter moved in the hour.
    t_all = np.asarray(bookings.t, np.int64)
    e_all = np.asarray(bookings.event, np.int64)
    moved = np.unique(e_all[(t_all >= t0) & (t_all < t1)])
    snapshots = [
        {
            "event_id": world.event_ids[e],
            "seats_taken": int(((e_all == e) & (t_all < t1)).sum()),
            "capacity": int(world.e_capacity[e]),
            "snapshot_at": iso_instants([t1])[0],
        }
        for e in moved
    ]

    # The hour's landing export: what was due now, and what this hour produced for now.
    pending = state["pending"][state["pending"]["origin"] != hour]
    produced = pd.DataFrame(
        {
            "entity": [entity for entity, _, _ in later] + ["capacity_snapshots"] * len(snapshots),
            "hour": np.asarray([h for _, h, _ in later] + [hour] * len(snapshots), dtype=np.int64),
            "line": [str(_lines(entity, [r])[0]) for entity, _, r in later]
            + [str(x) for x in (_lines("capacity_snapshots", snapshots) if snapshots else [])],
            "origin": np.int64(hour),
        }
    )
    pending = pd.concat([pending, produced], ignore_index=True)
    due = pending[pending["hour"] == hour]
    for entity, group in due.groupby("entity"):
        folder = Path(landing_root) / str(entity) / delivered_partition(report.start)
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{PART_NAME}.tmp"
        tmp.write_text("\n".join(group["line"]) + "\n", encoding="utf-8")
        os.replace(tmp, folder / PART_NAME)
        report.lines[str(entity)] = len(group)

    # Commit: the hour's record, then the state, then the marker.
    root = platform_root(truth_root)
    (root / "requests").mkdir(exist_ok=True)
    (root / "impressions").mkdir(exist_ok=True)
    _write_parquet(pd.DataFrame(requests, columns=_REQUEST_COLUMNS), root / "requests" / f"{key}.parquet")
    _write_parquet(pd.DataFrame(shown, columns=_SHOWN_COLUMNS), root / "impressions" / f"{key}.parquet")
    state["pending"] = pending
    state["rsvps"] = pd.concat(
        [rsvps_before, pd.DataFrame(new_rsvps, columns=rsvps_before.columns)], ignore_index=True
    )
    _write_parquet(state["pending"], root / "pending.parquet")
    _write_parquet(state["rsvps"], root / "rsvps.parquet")
    (root / "played").mkdir(exist_ok=True)
    marker = root / "played" / f"{key}.json"
    marker.with_suffix(".tmp").write_text(json.dumps(report.to_dict(), indent=2) + "\n")
    os.replace(marker.with_suffix(".tmp"), marker)
    log.info(
        "platform %s: %d requests (%d failed), %d impressions, %d RSVPs, lines %s",
        key, report.requests, report.feeds_failed, report.impressions, report.rsvps, report.lines,
    )  # fmt: skip
    return report


_REQUEST_COLUMNS = [
    "request_id", "user_id", "served_at", "model_version", "served_by", "home_items", "expected_rsvps",
    "expected_attendance", "oracle_expected_attendance", "candidates", "rsvps", "attendances",
]  # fmt: skip
_SHOWN_COLUMNS = [
    "request_id", "user_id", "event_id", "position", "surface", "is_exploration", "exploration_kind",
    "friends_going", "p_rsvp_true", "p_attend_true", "outcome",
]  # fmt: skip


def play_hours(
    truth_root: Path,
    landing_root: Path,
    start: datetime,
    end: datetime,
    feed: Feed,
    booking: Booking | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> list[dict[str, Any]]:
    """Play every whole UTC hour in [start, end) not played yet; returns each hour's report.

    Refuses hours before the platform's start (the history is the simulator's) and past the
    world's end (nothing was generated for them).
    """
    first = platform_start(truth_root)
    if first is None:
        raise ValueError(
            f"{truth_root} has no live platform: simulate with platform_days > 0 (turnout simulate --platform-days N)"
        )
    world = _load_world(truth_root)
    cfg = world.truth.config
    world_end = first + timedelta(days=cfg.platform_days)
    start, end = start.astimezone(UTC), end.astimezone(UTC)
    if start < first or end > world_end:
        raise OutsideWorld(
            f"the platform plays [{first.isoformat()}, {world_end.isoformat()}); "
            f"asked for [{start.isoformat()}, {end.isoformat()})"
        )
    root = platform_root(truth_root)
    state = {
        "pending": pd.read_parquet(root / "pending.parquet"),
        "rsvps": pd.read_parquet(root / "rsvps.parquet"),
    }
    hours = range(int(start.timestamp()) // HOUR, -(-int(end.timestamp()) // HOUR))
    out = []
    for i, hour in enumerate(hours):
        if progress:
            progress(f"platform {hour_key(hour)}", i, len(hours))
        marker = root / "played" / f"{hour_key(hour)}.json"
        if marker.is_file():  # played already: the same answer, nothing delivered twice
            out.append({**json.loads(marker.read_text()), "already_played": True})
            continue
        out.append(play_hour(world, state, truth_root, landing_root, hour, feed, booking).to_dict())
    if progress:
        progress("platform", len(hours), len(hours))
    return out


# ------------------------------------------------------------------------------------ the report


def loop_days(truth_root: Path) -> pd.DataFrame:
    """Per simulated UTC day of the live platform: what was served and what it was worth.

    ``requests`` counts the day's feed requests and ``feeds_failed`` those the service did not
    answer; ``feeds`` the answered ones, of which ``served_by_model`` a model ranked and
    ``empty_feeds`` held no event (nothing in reach passed the hard filters).
    ``expected_*`` are per answered feed (NaN on a day with none) under the ground truth, beside
    the oracle's expected attendance for the same requests; ``rsvps`` and ``attendances`` per
    feed are the outcomes the users actually drew (attendance is delivered days
    later); ``attend_labels`` counts the attendance lines delivered by the day's end, the history's
    and the live platform's (what the weekly p_attend retrain can learn from).
    """
    root = platform_root(truth_root)
    played = pd.DataFrame(played_hours(truth_root))
    if played.empty:
        return pd.DataFrame()
    # Every request of the day counts, answered or not: a day whose feeds all failed (the service
    # down, or asked about an instant it does not serve yet) is a row with no feed, not a gap.
    played["day"] = played["start"].str[:10]
    asked = played.groupby("day")[["requests", "feeds_failed"]].sum()
    frames = [f for f in map(pd.read_parquet, sorted((root / "requests").glob("*.parquet"))) if len(f)]
    req = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=_REQUEST_COLUMNS)
    shown = pd.concat(
        [f for f in map(pd.read_parquet, sorted((root / "impressions").glob("*.parquet"))) if len(f)]
        or [pd.DataFrame(columns=["request_id", "is_exploration"])],
        ignore_index=True,
    )
    req["day"] = pd.to_datetime(req["served_at"], utc=True).dt.strftime("%Y-%m-%d")
    shown = shown.merge(req[["request_id", "day"]], on="request_id")
    pending = pd.read_parquet(root / "pending.parquet")
    attendance_hours = np.sort(pending.loc[pending["entity"] == "attendance", "hour"].to_numpy(np.int64))
    manifest = json.loads((Path(truth_root) / "manifest.json").read_text())
    history_labels = int(manifest["entities"]["attendance"]["lines_written"])
    rows = []
    for day, counts in asked.iterrows():
        group = req[req["day"] == day]
        feeds = len(group)
        day_end = int(pd.Timestamp(str(day), tz="UTC").timestamp()) + DAY
        imps = shown[shown["day"] == day]
        versions = sorted(v for v in group["model_version"].unique())
        mean = {  # NaN for a day with no answered feed
            c: float(group[c].mean())
            for c in (
                "expected_rsvps",
                "expected_attendance",
                "oracle_expected_attendance",
                "rsvps",
                "attendances",
            )
        }
        rows.append(
            {
                "day": day,
                "champions": ", ".join(versions),
                "requests": int(counts["requests"]),
                "feeds_failed": int(counts["feeds_failed"]),
                "feeds": feeds,
                "served_by_model": int(group["served_by"].str.startswith("model").sum()),
                "empty_feeds": int((group["home_items"] == 0).sum()),
                "expected_rsvps": mean["expected_rsvps"],
                "expected_attendance": mean["expected_attendance"],
                "oracle_expected_attendance": mean["oracle_expected_attendance"],
                "rsvps": mean["rsvps"],
                "attendances": mean["attendances"],
                "exploration_share": float(imps["is_exploration"].mean()) if len(imps) else 0.0,
                "attend_labels": history_labels + int(np.searchsorted(attendance_hours, day_end // HOUR)),
            }
        )
    out = pd.DataFrame(rows)
    out["share_of_oracle"] = out["expected_attendance"] / out["oracle_expected_attendance"].where(
        out["oracle_expected_attendance"] > 0
    )
    return out
