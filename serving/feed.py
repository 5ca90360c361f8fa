"""One feed request as plain stages: locate -> retrieve -> filter -> assemble -> score -> rerank ->
explore -> log. Each stage is a function over arrays; ``serve_feed`` times them and picks the
fallback when a dependency fails, so a request is answered whatever is down.

Paths (``served_by``): ``model`` or ``popularity`` (no usable model), plus ``+index_scan`` (no
index: the snapshot is scanned with the same distance predicate), ``+last_snapshot`` (the online
store failed to refresh the event snapshot), ``+cached_user`` / ``+user_store_down`` (the user's
row came from the last good read / could not be read: cold-start features), and
``+availability_stale`` (the capacity counter was unreachable: the last sold-out set it returned
was applied, and the user's RSVPs could not be checked).
"""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import numpy.typing as npt

from pipelines.index.geo import GeoParams, chord_sq, chord_sq_to_km, to_micros, unit_vectors
from serving.features import UserRow, assemble, weekend_windows, zone_offsets_min
from serving.impressions import impression_records
from serving.rank import mmr_select, pick_exploration, prefilter
from serving.snapshot import EventSnapshot
from serving.state import ServingState

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


@dataclass
class FeedItem:
    event_id: str
    position: int
    score: float | None  # calibrated P(attend) = p_rsvp * p_attend_given_rsvp; None on popularity
    p_rsvp: float | None
    p_attend_given_rsvp: float | None
    distance_km: float
    friends_going: int
    is_exploration: bool
    exploration_kind: str | None
    category: str
    organizer_id: str
    starts_at: str  # UTC
    starts_at_local: str  # the venue's wall clock, with its offset
    timezone: str


@dataclass
class FeedResult:
    request_id: str
    user_id: str
    served_at: str
    model_version: str
    served_by: str
    location_source: str  # gps | home
    events: list[FeedItem]
    near_you_this_weekend: list[FeedItem]
    candidates: int  # retrieved, in radius and window, before the hard filters
    eligible: int  # after the hard filters
    scored: int  # rows both full heads scored
    stages_ms: dict[str, float] = field(default_factory=dict)


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
    ids = snapshot.event_id[rows]
    blocked = unavailable | rsvped
    keep: Bool = snapshot.start_ts[rows] > now_s
    if blocked:
        keep &= ~np.isin(ids, np.fromiter(blocked, dtype=ids.dtype, count=len(blocked)))
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


def serve_feed(state: ServingState, req: FeedRequest) -> FeedResult:
    """Answer one request; every dependency failure picks its fallback rather than raising."""
    cfg = state.config
    stages: dict[str, float] = {}
    started = last = time.perf_counter()
    tags: list[str] = []

    def lap(name: str) -> None:
        nonlocal last
        t = time.perf_counter()
        stages[name] = round((t - last) * 1000, 3)
        last = t

    now = req.now.astimezone(UTC)
    now_s = to_micros(now) / 1e6
    snap = state.snapshot
    if state.health["snapshot"].status != "ok":
        tags.append("last_snapshot")

    # 1. user row and location
    user, user_status = state.users.get(req.user_id, now)
    if user_status == "cached":
        tags.append("cached_user")
    elif user_status == "unavailable":
        tags.append("user_store_down")
    state.health["online_store"].set(
        "ok" if user_status == "ok" and state.health["snapshot"].status == "ok" else "down",
        "" if user_status == "ok" else "user row read failed",
    )
    lat, lng, location_source = resolve_location(req, user)
    lap("user")

    # 2. retrieval
    got = retrieve(state, lat, lng, now)
    if got.index_scan:
        tags.append("index_scan")
    lap("retrieve")

    # 3. hard filters from the authoritative counter
    blocked, live = state.blocked(req.user_id)
    if not live:
        tags.append("availability_stale")
    keep = hard_filter(snap, got.rows, now_s, blocked.unavailable, blocked.rsvped)
    rows, distance = got.rows[keep], got.distance_km[keep]
    lap("filter")

    # 4. the social join: friends x live RSVP lists
    friends = state.friends_going(user.friends) if user is not None and user.friends else {}
    going = friends_going_for(snap, rows, friends)
    lap("social")

    # 5. weekend module candidates (decided in each venue's own zone)
    w_start, w_end = weekend_windows(snap.zones, now)
    zc = snap.zone_code[rows]
    starts = snap.start_ts[rows]
    weekend = (starts >= w_start[zc]) & (starts < w_end[zc]) & (distance <= cfg.weekend_radius_km)

    # 6. scoring: first stage on every candidate, both heads on the survivors
    score = np.full(len(rows), -np.inf)
    p_rsvp = np.full(len(rows), np.nan)
    p_attend = np.full(len(rows), np.nan)
    model = state.models.current
    scored_n = 0
    offsets = zone_offsets_min(snap.zones, now_s)
    if model is not None and model.scorer.rsvp is not None and len(rows):
        try:
            columns = sorted({*model.scorer.columns(), "is_free", "history_depth"})
            x = assemble(snap, rows, columns, user, lat, lng, now_s, going, offsets)
            lap("features")
            first = prefilter(x, model.scorer.rsvp, cfg.prefilter_trees, cfg.prefilter_keep, cfg.num_threads)
            chosen = np.union1d(first, np.flatnonzero(weekend)).astype(np.int64)
            lap("prefilter")
            s = model.scorer.score(x.iloc[chosen], num_threads=cfg.num_threads)
            score[chosen], p_rsvp[chosen], p_attend[chosen] = s["score"], s["p_rsvp"], s["p_attend"]
            scored_n = len(chosen)
            lap("score")
        except Exception as e:  # a model that cannot score must not blank the feed
            log.exception("scoring failed, serving popularity: %s", e)
            state.health["model"].set("degraded", f"scoring failed: {e}")
            model = None
    if model is None:
        score = np.nan_to_num(snap.popularity[rows], nan=0.0)
        lap("score")
    scores_known = np.isfinite(score)

    # 7. MMR for the first 24 slots, exploration in slot 25
    org, cat = snap.organizer_code[rows], snap.category_code[rows]
    ranked_score = np.where(scores_known, score, -np.inf)
    n_ranked = cfg.feed_size - 1
    picks = mmr_select(
        np.where(scores_known, score, np.nan)[scores_known],
        org[scores_known],
        cat[scores_known],
        n_ranked,
        cfg.mmr_lambda,
        cfg.max_per_organizer,
        cfg.mmr_pool,
    )
    picks = np.flatnonzero(scores_known)[picks]
    rng = _rng(state.seed, req.request_id)
    exploration: tuple[int, str] | None = None
    if len(rows) > len(picks):
        chosen_mask = np.zeros(len(rows), dtype=bool)
        chosen_mask[picks] = True
        org_full = np.bincount(org[picks], minlength=int(org.max()) + 1) >= cfg.max_per_organizer
        eligible = ~chosen_mask & ~org_full[org]
        org_events = snap.org_event_count[rows]
        cold = ~(org_events > cfg.cold_organizer_max_events)  # NaN (no stats yet) is cold
        exploration = pick_exploration(rng, eligible, cold)
    lap("rerank")

    # 8. the weekend module: best by score among weekend candidates, organizer cap applies
    w_idx = np.flatnonzero(weekend & np.isfinite(ranked_score))
    w_pick = w_idx[
        mmr_select(
            score[w_idx],
            org[w_idx],
            cat[w_idx],
            cfg.weekend_size,
            cfg.mmr_lambda,
            cfg.max_per_organizer,
            cfg.mmr_pool,
        )
    ]

    def item(i: int, position: int, kind: str | None) -> FeedItem:
        row = int(rows[i])
        starts_utc, starts_local = _iso(float(snap.start_ts[row]), float(offsets[snap.zone_code[row]]))
        known = model is not None and np.isfinite(score[i])
        return FeedItem(
            event_id=str(snap.event_id[row]),
            position=position,
            score=float(score[i]) if known else None,
            p_rsvp=float(p_rsvp[i]) if known else None,
            p_attend_given_rsvp=float(p_attend[i]) if known else None,
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

    events = [item(int(i), p + 1, None) for p, i in enumerate(picks)]
    if exploration is not None:
        events.append(item(exploration[0], len(events) + 1, exploration[1]))
    weekend_items = [item(int(i), p + 1, None) for p, i in enumerate(w_pick)]
    lap("hydrate")

    # 9. the impression log (never fails the response)
    version = model.version if model is not None else "popularity"
    records = impression_records(
        req.request_id,
        req.user_id,
        now_s,
        version,
        [
            *(("home_feed", e.event_id, e.position, e.is_exploration, e.exploration_kind) for e in events),
            *(("near_you_this_weekend", e.event_id, e.position, False, None) for e in weekend_items),
        ],
    )
    try:
        state.impressions.write(records)
        state.health["impression_log"].set("ok")
    except Exception as e:
        log.error("impression log write failed (request %s): %s", req.request_id, e)
        state.health["impression_log"].set("down", str(e))
    lap("log")
    stages["total"] = round((time.perf_counter() - started) * 1000, 3)

    base = "model" if model is not None else "popularity"
    return FeedResult(
        request_id=req.request_id,
        user_id=req.user_id,
        served_at=datetime.fromtimestamp(now_s, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        model_version=version,
        served_by="+".join([base, *tags]),
        location_source=location_source,
        events=events,
        near_you_this_weekend=weekend_items,
        candidates=len(got.rows),
        eligible=len(rows),
        scored=scored_n,
        stages_ms=stages,
    )


def result_to_dict(result: FeedResult) -> dict[str, Any]:
    from dataclasses import asdict

    return asdict(result)
