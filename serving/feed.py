"""One feed request as plain stages: locate -> retrieve -> filter -> assemble -> score -> rerank ->
explore -> log. Each stage is a function over arrays; ``serve_feed`` times them and picks the
fallback when a dependency fails, so a request is answered whatever is down.

Paths (``served_by``): ``model`` or ``popularity`` (no usable model), plus ``+index_scan`` (no
index: the snapshot is scanned with the same distance predicate), ``+last_snapshot`` (the online
store failed to refresh the event snapshot), ``+cached_user`` / ``+user_store_down`` (the user's
row came from the last good read / could not be read: cold-start features), and
``+availability_stale`` (the capacity counter was unreachable: the last sold-out set it returned
was applied, and the user's RSVPs could not be checked), and ``+no_candidates`` (no live event in
reach passed the hard filters: an empty feed, named after the model that would have ranked one,
not counted as a popularity fallback).
"""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from contracts.geo import chord_sq, chord_sq_to_km, unit_vectors
from contracts.instants import iso_z, to_micros
from published.geo_index import GeoParams
from serving.features import UserRow, assemble, weekend_windows, zone_offsets_min
from serving.impressions import impression_records
from serving.rank import mmr_select, pick_exploration, prefilter
from serving.schema import FeedItem, FeedResult
from serving.snapshot import CATALOG_ONLY, EventSnapshot
from serving.state import LoadedModel, ServingState

log = logging.getLogger(__name__)

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
Bool = npt.NDArray[np.bool_]


class NoLocation(ValueError):
    """Neither GPS nor a known home: there is nowhere to retrieve around (a client error)."""


@dataclass(frozen=True)
class FeedRequest:
    user_id: str
    now: datetime  # aware
    lat: float | None = None
    lng: float | None = None
    request_id: str = ""


@dataclass(frozen=True)
class Retrieved:
    rows: I64  # snapshot rows, soonest first
    distance_km: F64
    index_scan: bool


def resolve_location(req: FeedRequest, user: UserRow | None) -> tuple[float, float, str]:
    """GPS when the client sent it, else the user's home; neither is a client error."""
    if req.lat is not None and req.lng is not None:
        return req.lat, req.lng, "gps"
    if user is not None:
        lat, lng = user.number("home_lat"), user.number("home_lng")
        if np.isfinite(lat) and np.isfinite(lng):
            return lat, lng, "home"
    raise NoLocation("no lat/lng given and no home location known for this user: send lat and lng")


def retrieve(state: ServingState, lat: float, lng: float, now: datetime) -> Retrieved:
    """The published index's ring query, or, with no usable index, an exact scan of the snapshot
    with the same predicate, window and cap (slower, same answer for events in both)."""
    snap = state.snapshot
    if state.index is not None:
        try:
            cands = state.index.query(lat, lng, now)
            rows = state.index_rows(state.index)[cands.positions]
            known = rows >= 0
            state.health["index"].set("ok")
            return Retrieved(rows[known], cands.distance_km[known], index_scan=False)
        except Exception as e:
            log.warning("index query failed, scanning the snapshot: %s", e)
            state.health["index"].set("down", f"query failed: {e}")
    params = state.index.params if state.index is not None else GeoParams()
    now_s = to_micros(now) / 1e6
    end_s = now_s + params.horizon_days * 86_400
    point = unit_vectors([lat], [lng])[0]
    c2 = chord_sq(snap.xyz, point)
    ok = (snap.start_ts > now_s) & (snap.start_ts <= end_s) & (c2 <= params.chord_limit_sq)
    idx = np.flatnonzero(ok)
    order = np.lexsort((snap.event_id[idx], snap.start_ts[idx]))[: params.max_candidates]
    rows = idx[order].astype(np.int64)
    return Retrieved(rows, chord_sq_to_km(c2[rows]), index_scan=True)


def hard_filter(
    snapshot: EventSnapshot, rows: I64, now_s: float, unavailable: frozenset[str], rsvped: frozenset[str]
) -> Bool:
    """True for candidates that may be shown: not sold out, cancelled, started or RSVPed."""
    blocked = unavailable | rsvped
    keep: Bool = snapshot.start_ts[rows] > now_s
    if blocked:
        # Blocked ids to snapshot rows (one binary search each), then a compare of integers: ~20x
        # faster than matching the candidates' id strings. Ids the snapshot lacks block nothing.
        at = snapshot.rows_for(np.fromiter(blocked, dtype=snapshot.event_id.dtype, count=len(blocked)))
        keep &= ~np.isin(rows, at[at >= 0])
    return keep


def friends_going_for(snapshot: EventSnapshot, rows: I64, counts: dict[str, int]) -> F64:
    """Per candidate, how many of the user's friends RSVPed (the social join)."""
    out = np.zeros(len(rows))
    if counts:
        ids = np.fromiter(counts.keys(), dtype=snapshot.event_id.dtype, count=len(counts))
        at = snapshot.rows_for(ids)
        per_row = np.zeros(len(snapshot))
        hit = at >= 0
        per_row[at[hit]] = np.fromiter(counts.values(), dtype=float, count=len(counts))[hit]
        out = per_row[rows]
    return out


def _rng(seed: int, request_id: str) -> np.random.Generator:
    digest = hashlib.sha256(f"{seed}:{request_id}".encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def _iso(ts: float, offset_min: float) -> tuple[str, str]:
    utc = datetime.fromtimestamp(ts, UTC)
    local = utc + timedelta(minutes=0 if np.isnan(offset_min) else offset_min)
    sign = "+" if offset_min >= 0 else "-"
    m = 0 if np.isnan(offset_min) else int(abs(offset_min))
    return utc.strftime("%Y-%m-%dT%H:%M:%SZ"), local.strftime(
        "%Y-%m-%dT%H:%M:%S"
    ) + f"{sign}{m // 60:02d}:{m % 60:02d}"


class StageTimer:
    """Milliseconds per named stage, each lap measured from the previous one."""

    def __init__(self) -> None:
        self.started = self.last = time.perf_counter()
        self.ms: dict[str, float] = {}

    def lap(self, name: str) -> None:
        t = time.perf_counter()
        self.ms[name] = round((t - self.last) * 1000, 3)
        self.last = t

    def finish(self) -> dict[str, float]:
        self.ms["total"] = round((time.perf_counter() - self.started) * 1000, 3)
        return self.ms


def read_user(state: ServingState, user_id: str, now: datetime) -> tuple[UserRow | None, list[str]]:
    """The user's online row and the ``served_by`` tags its source earned."""
    user, status = state.users.get(user_id, now)
    tags = {"cached": ["cached_user"], "unavailable": ["user_store_down"]}.get(status, [])
    state.health["online_store"].set(
        "ok" if status == "ok" and state.health["snapshot"].status == "ok" else "down",
        "" if status == "ok" else "user row read failed",
    )
    return user, tags


def apply_hard_filters(
    state: ServingState, user_id: str, got: Retrieved, now_s: float
) -> tuple[I64, F64, bool]:
    """Candidates that may be shown (rows, distances) and whether the counter was live."""
    blocked, live = state.blocked(user_id)
    keep = hard_filter(state.snapshot, got.rows, now_s, blocked.unavailable, blocked.rsvped)
    return got.rows[keep], got.distance_km[keep], live


def weekend_mask(snap: EventSnapshot, rows: I64, distance: F64, now: datetime, radius_km: float) -> Bool:
    """Candidates of the "near you this weekend" module: this weekend in each venue's own zone."""
    w_start, w_end = weekend_windows(snap.zones, now)
    zc = snap.zone_code[rows]
    starts = snap.start_ts[rows]
    out: Bool = (starts >= w_start[zc]) & (starts < w_end[zc]) & (distance <= radius_km)
    return out


@dataclass
class Scores:
    """Per candidate: the ranking score (calibrated P(attend), or popularity) and both heads."""

    score: F64
    p_rsvp: F64
    p_attend: F64
    scored: int  # rows both full heads scored
    model: LoadedModel | None  # None: popularity ranked


def score_candidates(
    state: ServingState,
    rows: I64,
    weekend: Bool,
    user: UserRow | None,
    lat: float,
    lng: float,
    now_s: float,
    going: F64,
    offsets: F64,
    timer: StageTimer,
) -> Scores:
    """The funnel: the first stage on every candidate, both heads on the survivors (plus
    the best of the ``weekend`` module's own candidates); metro popularity when there is no model
    or it fails to score."""
    cfg, snap = state.config, state.snapshot
    n = len(rows)
    out = Scores(np.full(n, -np.inf), np.full(n, np.nan), np.full(n, np.nan), 0, state.models.current)
    model = out.model
    if not n:  # nothing eligible to rank: an empty feed, whichever path would have ranked it
        timer.lap("score")
        return out
    # A snapshot without online features (the store was never reachable) would be scored on NaNs.
    if model is not None and model.scorer.rsvp is not None and snap.source != CATALOG_ONLY:
        try:
            # Every candidate gets the first stage's few columns, in its order; the survivors then
            # get every column both heads and the calibration segments read.
            rsvp = model.scorer.rsvp
            first_x = assemble(snap, rows, rsvp.first_stage_columns(), user, lat, lng, now_s, going, offsets)
            timer.lap("features")
            chosen = prefilter(
                first_x, rsvp, cfg.prefilter_keep, cfg.num_threads, also=weekend, also_keep=cfg.weekend_keep
            )
            timer.lap("prefilter")
            columns = sorted({*model.scorer.columns(), "is_free", "history_depth"})
            x = assemble(snap, rows[chosen], columns, user, lat, lng, now_s, going[chosen], offsets)
            s = model.scorer.score(pd.DataFrame(x, columns=columns, copy=False), num_threads=cfg.num_threads)
            out.score[chosen], out.p_rsvp[chosen], out.p_attend[chosen] = (
                s["score"],
                s["p_rsvp"],
                s["p_attend"],
            )
            out.scored = len(chosen)
            timer.lap("score")
            return out
        except Exception as e:  # a model that cannot score must not blank the feed
            log.exception("scoring failed, serving popularity: %s", e)
            state.health["model"].set("degraded", f"scoring failed: {e}")
    out.model = None
    out.score = np.nan_to_num(snap.popularity[rows], nan=0.0)
    timer.lap("score")
    return out


def rerank(
    state: ServingState, rows: I64, scores: Scores, rng: np.random.Generator
) -> tuple[I64, tuple[int, str] | None]:
    """Slots 1-24 by MMR over organizer and category (at most ``max_per_organizer`` each while
    other organizers have events in range, then filled in the same order), and slot 25's
    exploration pick among every candidate left. A metro with fewer than 25 candidates keeps its
    last slot for exploration: those impressions are the only unbiased labels there are."""
    cfg, snap = state.config, state.snapshot
    known = np.isfinite(scores.score)
    org, cat = snap.organizer_code[rows], snap.category_code[rows]
    ranked = min(cfg.feed_size - 1, max(int(known.sum()) - 1, 1))
    picks = mmr_select(
        scores.score[known], org[known], cat[known], ranked, cfg.mmr_lambda, cfg.max_per_organizer,
        cfg.mmr_pool, fill=True,
    )  # fmt: skip
    picks = np.flatnonzero(known)[picks]
    exploration: tuple[int, str] | None = None
    if len(rows) > len(picks):
        eligible = np.ones(len(rows), dtype=bool)
        eligible[picks] = False
        cold = ~(snap.org_event_count[rows] > cfg.cold_organizer_max_events)  # NaN (no stats yet) is cold
        exploration = pick_exploration(rng, eligible, cold)
    return picks, exploration


def weekend_picks(state: ServingState, rows: I64, weekend: Bool, scores: Scores) -> I64:
    """The weekend module: the best by score among weekend candidates, organizer cap applies."""
    cfg, snap = state.config, state.snapshot
    w_idx = np.flatnonzero(weekend & np.isfinite(scores.score))
    org, cat = snap.organizer_code[rows], snap.category_code[rows]
    chosen: I64 = w_idx[
        mmr_select(
            scores.score[w_idx],
            org[w_idx],
            cat[w_idx],
            cfg.weekend_size,
            cfg.mmr_lambda,
            cfg.max_per_organizer,
            cfg.mmr_pool,
        )  # fmt: skip
    ]
    return chosen


def hydrate(
    snap: EventSnapshot, rows: I64, distance: F64, going: F64, scores: Scores, offsets: F64,
    i: int, position: int, kind: str | None,
) -> FeedItem:  # fmt: skip
    """The human-facing item for candidate ``i``: only the 25 + 6 shown are ever hydrated."""
    row = int(rows[i])
    starts_utc, starts_local = _iso(float(snap.start_ts[row]), float(offsets[snap.zone_code[row]]))
    known = scores.model is not None and np.isfinite(scores.score[i])
    return FeedItem(
        event_id=str(snap.event_id[row]),
        position=position,
        score=float(scores.score[i]) if known else None,
        p_rsvp=float(scores.p_rsvp[i]) if known else None,
        p_attend_given_rsvp=float(scores.p_attend[i]) if known else None,
        distance_km=round(float(distance[i]), 3),
        friends_going=int(going[i]),
        is_exploration=kind is not None,
        exploration_kind=kind,
        category=snap.categories[snap.category_code[row]],
        organizer_id=str(snap.organizer_id[row]),
        starts_at=starts_utc,
        starts_at_local=starts_local,
        timezone=snap.zones[snap.zone_code[row]],
    )


def log_impressions(
    state: ServingState, req: FeedRequest, served_at_s: float, version: str, events: list[FeedItem],
    weekend: list[FeedItem],
) -> bool:  # fmt: skip
    """One impression line per event shown, stamped with the server's instant; a failed write is
    logged and shown (False), never raised."""
    records = impression_records(
        req.request_id,
        req.user_id,
        served_at_s,
        version,
        [
            *(("home_feed", e.event_id, e.position, e.is_exploration, e.exploration_kind) for e in events),
            *(("near_you_this_weekend", e.event_id, e.position, False, None) for e in weekend),
        ],
    )
    try:
        state.impressions.write(records)
    except Exception as e:
        log.error("impression log write failed (request %s): %s", req.request_id, e)
        state.health["impression_log"].set("down", f"{type(e).__name__}: {e}")
        return False
    state.health["impression_log"].set("ok")
    return True


def dependency_tags(state: ServingState, now: datetime) -> list[str]:
    """``served_by`` tags for what is down around this request, whatever the request path does."""
    tags = []
    if state.snapshot.source == CATALOG_ONLY:
        tags.append("no_features")
    elif not state.health["snapshot"].ok:
        tags.append("last_snapshot")
    if not state.health["registry"].ok:
        tags.append("registry_down")
    if state.stale(now):
        tags.append("stale_state")
    return tags


def serve_feed(state: ServingState, req: FeedRequest) -> FeedResult:
    """Answer one request, one function per stage; every dependency failure picks its fallback
    rather than raising."""
    cfg = state.config
    timer = StageTimer()
    now = req.now.astimezone(UTC)
    now_s = to_micros(now) / 1e6
    snap = state.snapshot
    tags = dependency_tags(state, now)

    user, user_tags = read_user(state, req.user_id, now)
    tags += user_tags
    lat, lng, location_source = resolve_location(req, user)
    timer.lap("user")

    got = retrieve(state, lat, lng, now)
    if got.index_scan:
        tags.append("index_scan")
    timer.lap("retrieve")

    rows, distance, live = apply_hard_filters(state, req.user_id, got, now_s)
    if not live:
        tags.append("availability_stale")
    if not len(rows):
        tags.append("no_candidates")
    timer.lap("filter")

    friends = state.friends_going(user.friends) if user is not None and user.friends else {}
    going = friends_going_for(snap, rows, friends)
    timer.lap("social")

    weekend = weekend_mask(snap, rows, distance, now, cfg.weekend_radius_km)
    offsets = zone_offsets_min(snap.zones, now_s)
    scores = score_candidates(state, rows, weekend, user, lat, lng, now_s, going, offsets, timer)

    picks, exploration = rerank(state, rows, scores, _rng(state.seed, req.request_id))
    timer.lap("rerank")

    def item(i: int, position: int, kind: str | None) -> FeedItem:
        return hydrate(snap, rows, distance, going, scores, offsets, i, position, kind)

    events = [item(int(i), p + 1, None) for p, i in enumerate(picks)]
    if exploration is not None:
        events.append(item(exploration[0], len(events) + 1, exploration[1]))
    weekend_items = [
        item(int(i), p + 1, None) for p, i in enumerate(weekend_picks(state, rows, weekend, scores))
    ]
    timer.lap("hydrate")

    version = scores.model.version if scores.model is not None else "popularity"
    # The instant the feed was computed for: the service's clock, or the request's ``now`` when it
    # sent one (a simulated platform replays its own clock, and its impressions land in its hours).
    served_at_s = to_micros(req.now) / 1e6
    if not log_impressions(state, req, served_at_s, version, events, weekend_items):
        tags.append("unlogged")
    timer.lap("log")

    return FeedResult(
        request_id=req.request_id,
        user_id=req.user_id,
        served_at=iso_z(served_at_s),
        model_version=version,
        served_by="+".join(["model" if scores.model is not None else "popularity", *tags]),
        location_source=location_source,
        events=events,
        near_you_this_weekend=weekend_items,
        candidates=len(got.rows),
        eligible=len(rows),
        scored=scores.scored,
        stages_ms=timer.finish(),
    )


def result_to_dict(result: FeedResult) -> dict[str, Any]:
    from dataclasses import asdict

    return asdict(result)
