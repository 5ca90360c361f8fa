"""Pure generation of behaviour: feed requests, logged impressions, RSVPs and their outcomes.

The loop runs over UTC days and metros only; everything inside is array work. RSVPs depend on
friends who RSVPed *before* the impression instant, including earlier the same day, so each
day is solved as a fixed point: with one uniform draw per impression fixed, "wants to RSVP"
is a function of the friend count, acceptance (capacity, one RSVP per user and event,
cancellations) is a function of who wants to, and the dependencies point strictly backwards in
time, so iterating converges to exactly the sequential outcome in a handful of rounds.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pandas as pd

from contracts.geo import haversine_km
from simulator.clock import DAY, HOUR, utc_offsets
from simulator.config import METROS, SimulationConfig
from simulator.model import (
    apply_friend_lift,
    attend_probability,
    rsvp_probability_without_friends,
)
from simulator.world import World

log = logging.getLogger(__name__)

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
Progress = Callable[[str, int, int], None]

SURFACE_HOME = 0
SURFACE_NEAR_YOU = 1
KIND_NONE = -1
KIND_RANDOM = 0
KIND_COLD = 1
SOURCE_TICKET = 0
SOURCE_GEOFENCE = 1

# Local hour-of-day weights of feed requests (lunch and evening peaks, quiet nights).
REQUEST_HOUR_WEIGHTS = np.array(
    [
        0.3,
        0.15,
        0.1,
        0.05,
        0.05,
        0.1,
        0.4,
        0.8,
        1.0,
        0.9,
        0.8,
        0.9,
        1.3,
        1.2,
        0.9,
        0.8,
        0.9,
        1.1,
        1.4,
        1.6,
        1.7,
        1.6,
        1.2,
        0.7,
    ]
)
_MAX_FIXED_POINT_ROUNDS = 1000


@dataclass
class Activity:
    """Everything that happened in the window, by integer row references into the World."""

    requests: pd.DataFrame
    impressions: pd.DataFrame
    rsvps: pd.DataFrame
    attendance: pd.DataFrame
    ratings: pd.DataFrame
    capacity_snapshots: pd.DataFrame


@dataclass
class _Arrays:
    """Column views of the world, so the hot loop indexes numpy arrays, not DataFrames."""

    u_metro: IntArray
    u_lat: FloatArray
    u_lng: FloatArray
    u_prop: FloatArray
    u_rel: FloatArray
    taste: FloatArray
    e_metro: IntArray
    e_lat: FloatArray
    e_lng: FloatArray
    e_start: IntArray
    e_end: IntArray
    e_created: IntArray
    e_cancel: IntArray  # int64 max when never cancelled
    e_capacity: IntArray
    e_factor: FloatArray
    e_cat: IntArray
    e_org: IntArray
    e_free: BoolArray
    e_attend_offset: FloatArray
    e_quality: FloatArray
    adj_ptr: IntArray
    adj_dst: IntArray
    adj_created: IntArray


def _arrays(world: World) -> _Arrays:
    u, ev, v = world.users, world.events, world.venues
    venue = ev["venue"].to_numpy()
    cancel = ev["cancelled_s"].to_numpy()
    fr = world.friendships
    src = np.concatenate([fr["a"].to_numpy(), fr["b"].to_numpy()])
    dst = np.concatenate([fr["b"].to_numpy(), fr["a"].to_numpy()])
    created = np.concatenate([fr["created_s"].to_numpy(), fr["created_s"].to_numpy()])
    order = np.argsort(src, kind="stable")
    ptr = np.zeros(len(u) + 1, dtype=np.int64)
    ptr[1:] = np.cumsum(np.bincount(src, minlength=len(u)))
    return _Arrays(
        u_metro=u["metro"].to_numpy(np.int64),
        u_lat=u["home_lat"].to_numpy(np.float64),
        u_lng=u["home_lng"].to_numpy(np.float64),
        u_prop=u["propensity"].to_numpy(np.float64),
        u_rel=u["reliability"].to_numpy(np.float64),
        taste=world.taste,
        e_metro=ev["metro"].to_numpy(np.int64),
        e_lat=v["lat"].to_numpy(np.float64)[venue],
        e_lng=v["lng"].to_numpy(np.float64)[venue],
        e_start=ev["start_s"].to_numpy(np.int64),
        e_end=ev["end_s"].to_numpy(np.int64),
        e_created=ev["created_s"].to_numpy(np.int64),
        e_cancel=np.where(cancel >= 0, cancel, np.iinfo(np.int64).max).astype(np.int64),
        e_capacity=ev["capacity"].to_numpy(np.int64),
        e_factor=ev["event_factor"].to_numpy(np.float64),
        e_cat=ev["category"].to_numpy(np.int64),
        e_org=ev["organizer"].to_numpy(np.int64),
        e_free=ev["is_free"].to_numpy(bool),
        e_attend_offset=ev["attend_offset"].to_numpy(np.float64),
        e_quality=ev["quality"].to_numpy(np.float64),
        adj_ptr=ptr,
        adj_dst=dst[order].astype(np.int64),
        adj_created=created[order].astype(np.int64),
    )


def _day_offsets(world: World) -> IntArray:
    """UTC offset (seconds) per metro and window day, taken at the day's noon."""
    noons = world.start_s + np.arange(world.config.days, dtype=np.int64) * DAY + 12 * HOUR
    return np.stack([utc_offsets(noons, METROS[m].timezone) for m in world.config.metros])


def _requests(world: World, a: _Arrays, rng: np.random.Generator, offsets: IntArray) -> pd.DataFrame:
    """Feed requests: heavy-tailed counts per user, diurnal in the user's local time."""
    cfg = world.config
    users = world.users
    active_from = np.maximum(users["signup_s"].to_numpy(), world.start_s)
    active_days = np.clip((world.history_end_s - active_from) / DAY, 0.0, None)
    counts = rng.poisson(users["request_rate"].to_numpy() * active_days)
    user = np.repeat(np.arange(len(users)), counts)
    t = rng.uniform(active_from[user], world.history_end_s)
    day = ((t - world.start_s) // DAY).astype(np.int64)
    hour = rng.choice(24, size=len(user), p=REQUEST_HOUR_WEIGHTS / REQUEST_HOUR_WEIGHTS.sum())
    local_sec = hour * HOUR + rng.integers(0, HOUR, len(user))
    served = (world.start_s + day * DAY + (local_sec - offsets[a.u_metro[user], day]) % DAY).astype(np.int64)
    late_start = active_from[user] + rng.integers(60, HOUR, len(user))
    served = np.where(served < active_from[user], late_start, served)
    keep = served < world.history_end_s
    user, served = user[keep], served[keep]
    local = served + offsets[a.u_metro[user], (served - world.start_s) // DAY]
    dow = ((local // DAY) + 3) % 7
    near = (dow >= 3) & (rng.random(len(user)) < cfg.near_you_module_rate)
    order = np.lexsort((user, served))
    return pd.DataFrame({"user": user[order], "served_s": served[order], "near_you": near[order]})


def _organic_intents(world: World, rng: np.random.Generator) -> pd.DataFrame:
    """RSVPs that do not come from a logged impression (search, a shared link)."""
    cfg = world.config
    users = world.users
    active_from = np.maximum(users["signup_s"].to_numpy(), world.start_s)
    active_days = np.clip((world.history_end_s - active_from) / DAY, 0.0, None)
    rate = (
        cfg.organic_rsvps_per_user_day
        * users["request_rate"].to_numpy()
        / max(cfg.requests_per_user_day, 1e-12)
    )
    counts = rng.poisson(rate * active_days)
    user = np.repeat(np.arange(len(users)), counts)
    t = rng.uniform(active_from[user], world.history_end_s).astype(np.int64)
    order = np.lexsort((user, t))
    return pd.DataFrame({"user": user[order], "t": t[order]})


def _p_without_friends(
    cfg: SimulationConfig,
    a: _Arrays,
    user: IntArray,
    event: IntArray,
    t: IntArray,
    dist_km: FloatArray,
) -> FloatArray:
    return rsvp_probability_without_friends(
        cfg.base_rsvp_rate,
        cfg.max_affinity,
        a.u_prop[user],
        a.taste[user, a.e_cat[event]],
        a.e_factor[event],
        (a.e_start[event] - t) / DAY,
        dist_km,
        cfg.distance_band_factors,
    )


def _top_k(score: FloatArray, k: int) -> tuple[IntArray, BoolArray]:
    """Column indices of the k best finite scores per row, best first, and which are real."""
    n_cols = score.shape[1]
    k = min(k, n_cols)
    if k <= 0:
        return np.zeros((score.shape[0], 0), dtype=np.int64), np.zeros((score.shape[0], 0), bool)
    part = (
        np.argpartition(-score, k - 1, axis=1)[:, :k]
        if k < n_cols
        else np.tile(np.arange(n_cols), (score.shape[0], 1))
    )
    part_scores = np.take_along_axis(score, part, axis=1)
    order = np.argsort(-part_scores, axis=1, kind="stable")
    top = np.take_along_axis(part, order, axis=1).astype(np.int64)
    ok = np.isfinite(np.take_along_axis(part_scores, order, axis=1))
    return top, ok


@dataclass
class _State:
    """Booking state carried from one day to the next."""

    event_rsvps: IntArray
    org_rsvps: IntArray
    rsvp_keys: IntArray  # sorted user * n_events + event
    fr_key: IntArray  # friend-RSVP rows: (friend of the RSVPer) * n_events + event, sorted
    fr_t: IntArray
    fr_created: IntArray
    # What the serving path knows at the start of the day: friends going per user*E+event.
    social_key: IntArray
    social_count: IntArray


def _count_friend_rsvps(
    q_key: IntArray,
    q_t: IntArray,
    r_key: IntArray,
    r_t: IntArray,
    r_created: IntArray,
    presorted: bool = False,
) -> IntArray:
    """For each query (user*E+event, t): friends with friendship by t who RSVPed strictly before t."""
    if len(q_key) == 0 or len(r_key) == 0:
        return np.zeros(len(q_key), dtype=np.int64)
    if not presorted:
        order = np.argsort(r_key, kind="stable")
        r_key, r_t, r_created = r_key[order], r_t[order], r_created[order]
    lo = np.searchsorted(r_key, q_key, side="left")
    hi = np.searchsorted(r_key, q_key, side="right")
    n = hi - lo
    total = int(n.sum())
    if total == 0:
        return np.zeros(len(q_key), dtype=np.int64)
    qi = np.repeat(np.arange(len(q_key)), n)
    ri = lo[qi] + (np.arange(total) - np.repeat(np.cumsum(n) - n, n))
    ok = (r_t[ri] < q_t[qi]) & (r_created[ri] <= q_t[qi])
    out: IntArray = np.bincount(qi[ok], minlength=len(q_key)).astype(np.int64)
    return out


def _expand_to_friends(
    a: _Arrays, n_events: int, user: IntArray, event: IntArray, t: IntArray
) -> tuple[IntArray, IntArray, IntArray]:
    """One row per (friend of the RSVPer, event): what the friend's point-in-time count reads."""
    deg = a.adj_ptr[user + 1] - a.adj_ptr[user]
    total = int(deg.sum())
    rep = np.repeat(np.arange(len(user)), deg)
    pos = a.adj_ptr[user][rep] + (np.arange(total) - np.repeat(np.cumsum(deg) - deg, deg))
    key = a.adj_dst[pos] * n_events + event[rep]
    return key, t[rep], a.adj_created[pos]


def _accept(
    a: _Arrays,
    state: _State,
    n_events: int,
    user: IntArray,
    event: IntArray,
    t: IntArray,
    src: IntArray,
) -> BoolArray:
    """Which RSVP attempts the booking path accepts, processed in time order."""
    accepted = np.zeros(len(user), dtype=bool)
    if len(user) == 0:
        return accepted
    order = np.lexsort((src, t))
    u, e, tt = user[order], event[order], t[order]
    key = u * n_events + e
    ok = ~np.isin(key, state.rsvp_keys)
    ok &= (tt < a.e_cancel[e]) & (tt < a.e_start[e])
    # One RSVP per user and event: the first attempt wins.
    first = np.zeros(len(u), dtype=bool)
    cand = np.nonzero(ok)[0]
    _, first_pos = np.unique(key[cand], return_index=True)
    first[cand[first_pos]] = True
    ok &= first
    # Capacity: seats are taken in time order; once full, RSVPs stop.
    cand = np.nonzero(ok)[0]
    ev = e[cand]
    by_event = np.argsort(ev, kind="stable")
    ev_sorted = ev[by_event]
    group_start = np.searchsorted(ev_sorted, ev_sorted, side="left")
    rank = np.empty(len(cand), dtype=np.int64)
    rank[by_event] = np.arange(len(cand)) - group_start
    remaining = a.e_capacity[ev] - state.event_rsvps[ev]
    ok[cand[rank >= remaining]] = False
    accepted[order] = ok
    return accepted


def _policy_for_metro(
    cfg: SimulationConfig,
    a: _Arrays,
    state: _State,
    rng: np.random.Generator,
    n_events: int,
    req_idx: IntArray,
    req_user: IntArray,
    req_t: IntArray,
    req_near: BoolArray,
    req_offset: IntArray,
    cand: IntArray,
) -> dict[str, npt.NDArray[np.generic]]:
    """policy-v0: noisy popularity near the user, plus the slot-25 exploration and the module."""
    n_r, n_c = len(req_idx), len(cand)
    dist = haversine_km(
        a.u_lat[req_user][:, None],
        a.u_lng[req_user][:, None],
        a.e_lat[cand][None, :],
        a.e_lng[cand][None, :],
    )
    t = req_t[:, None]
    start = a.e_start[cand][None, :]
    valid = (
        (a.e_created[cand][None, :] <= t)
        & (start > t + HOUR)
        & (start <= t + cfg.horizon_days * DAY)
        & (a.e_cancel[cand][None, :] > t)
    )
    valid &= ~np.isin(req_user[:, None] * n_events + cand[None, :], state.rsvp_keys)
    pop = np.log1p(state.event_rsvps[cand]) + 0.3 * np.log1p(state.org_rsvps[a.e_org[cand]])
    social: FloatArray = np.zeros((n_r, n_c))
    if len(state.social_key):
        pair_keys = req_user[:, None] * n_events + cand[None, :]
        pos = np.minimum(np.searchsorted(state.social_key, pair_keys), len(state.social_key) - 1)
        social = np.where(state.social_key[pos] == pair_keys, state.social_count[pos], 0).astype(np.float64)
    base_score = (
        pop[None, :]
        + cfg.policy_friend_boost * np.log1p(social)
        - cfg.policy_distance_penalty * np.log1p(dist / 2.0)
        - cfg.policy_lead_penalty * (start - t) / DAY
    )
    score = np.where(valid, base_score + cfg.policy_noise * rng.gumbel(size=(n_r, n_c)), -np.inf)

    ranked_slots = cfg.slots_per_request - 1
    top, ok = _top_k(score, ranked_slots)
    rows = np.repeat(np.arange(n_r), top.shape[1]).reshape(top.shape)
    positions = np.tile(np.arange(1, top.shape[1] + 1), (n_r, 1))
    chosen = np.zeros((n_r, n_c), dtype=bool)
    chosen[rows[ok], top[ok]] = True
    n_ranked = ok.sum(axis=1)

    # Slot 25: half a uniformly random eligible event, half a cold organizer's event.
    rest = valid & ~chosen
    keys = rng.random((n_r, n_c)) * rest
    cold = state.org_rsvps[a.e_org[cand]] < cfg.cold_organizer_max_rsvps
    cold_keys = keys * cold[None, :]
    want_cold = rng.random(n_r) < 0.5
    use_cold = want_cold & (cold_keys.max(axis=1) > 0)
    pick = np.where(use_cold, cold_keys.argmax(axis=1), keys.argmax(axis=1))
    has_explore = rest.any(axis=1)
    chosen[np.arange(n_r)[has_explore], pick[has_explore]] = True

    blocks_req = [rows[ok], np.arange(n_r)[has_explore]]
    blocks_col = [top[ok], pick[has_explore]]
    blocks_pos = [positions[ok], (n_ranked + 1)[has_explore]]
    blocks_surface = [np.full(int(ok.sum()), SURFACE_HOME), np.full(int(has_explore.sum()), SURFACE_HOME)]
    blocks_explore = [np.zeros(int(ok.sum()), bool), np.ones(int(has_explore.sum()), bool)]
    blocks_kind = [
        np.full(int(ok.sum()), KIND_NONE),
        np.where(use_cold, KIND_COLD, KIND_RANDOM)[has_explore],
    ]

    # "Near you this weekend": a few close events in the coming (or current) weekend.
    near_rows = np.nonzero(req_near)[0]
    if len(near_rows) and cfg.near_you_slots > 0:
        local = req_t[near_rows] + req_offset[near_rows]
        local_day = local // DAY
        dow = (local_day + 3) % 7
        friday = local_day + np.where(dow <= 4, 4 - dow, -(dow - 4))
        ws = friday * DAY + 17 * HOUR - req_offset[near_rows]
        we = (friday + 3) * DAY - req_offset[near_rows]
        st = start[0][None, :]
        mod_ok = (
            valid[near_rows]
            & ~chosen[near_rows]
            & (dist[near_rows] <= cfg.near_you_radius_km)
            & (st >= np.maximum(ws, req_t[near_rows])[:, None])
            & (st < we[:, None])
        )
        mscore = np.where(mod_ok, score[near_rows], -np.inf)
        mtop, mok = _top_k(mscore, cfg.near_you_slots)
        mrows = np.repeat(near_rows, mtop.shape[1]).reshape(mtop.shape)
        mpos = np.tile(np.arange(1, mtop.shape[1] + 1), (len(near_rows), 1))
        blocks_req.append(mrows[mok])
        blocks_col.append(mtop[mok])
        blocks_pos.append(mpos[mok])
        blocks_surface.append(np.full(int(mok.sum()), SURFACE_NEAR_YOU))
        blocks_explore.append(np.zeros(int(mok.sum()), bool))
        blocks_kind.append(np.full(int(mok.sum()), KIND_NONE))

    r = np.concatenate(blocks_req)
    c = np.concatenate(blocks_col)
    return {
        "request": req_idx[r],
        "user": req_user[r],
        "event": cand[c],
        "position": np.concatenate(blocks_pos),
        "surface": np.concatenate(blocks_surface),
        "is_exploration": np.concatenate(blocks_explore),
        "kind": np.concatenate(blocks_kind),
        "served_s": req_t[r],
        "dist_km": dist[r, c],
    }


def _organic_for_metro(
    cfg: SimulationConfig,
    a: _Arrays,
    state: _State,
    rng: np.random.Generator,
    n_events: int,
    users: IntArray,
    t: IntArray,
    cand: IntArray,
) -> tuple[IntArray, IntArray, IntArray]:
    """Organic RSVP intents pick an event by the user's own true preference."""
    dist = haversine_km(
        a.u_lat[users][:, None], a.u_lng[users][:, None], a.e_lat[cand][None, :], a.e_lng[cand][None, :]
    )
    tt = t[:, None]
    start = a.e_start[cand][None, :]
    valid = (
        (a.e_created[cand][None, :] <= tt)
        & (start > tt + HOUR)
        & (start <= tt + cfg.horizon_days * DAY)
        & (a.e_cancel[cand][None, :] > tt)
    )
    valid &= ~np.isin(users[:, None] * n_events + cand[None, :], state.rsvp_keys)
    uu = np.broadcast_to(users[:, None], dist.shape).ravel()
    ee = np.broadcast_to(cand[None, :], dist.shape).ravel()
    tb = np.broadcast_to(tt, dist.shape).ravel()
    p = _p_without_friends(cfg, a, uu, ee, tb, dist.ravel()).reshape(dist.shape)
    logit = np.where(valid & (p > 0), np.log(np.maximum(p, 1e-300)) + rng.gumbel(size=p.shape), -np.inf)
    pick = logit.argmax(axis=1)
    ok = np.isfinite(logit[np.arange(len(users)), pick])
    return users[ok], cand[pick[ok]], t[ok]


def simulate_activity(world: World, rng: np.random.Generator, progress: Progress | None = None) -> Activity:
    """Run the logging policy and user behaviour day by day over the window."""
    cfg = world.config
    a = _arrays(world)
    n_events = len(world.events)
    n_orgs = len(world.organizers)
    offsets = _day_offsets(world)
    requests = _requests(world, a, rng, offsets)
    organic = _organic_intents(world, rng)
    req_user = requests["user"].to_numpy()
    req_t = requests["served_s"].to_numpy()
    req_near = requests["near_you"].to_numpy()
    org_user = organic["user"].to_numpy()
    org_t = organic["t"].to_numpy()

    state = _State(
        event_rsvps=np.zeros(n_events, dtype=np.int64),
        org_rsvps=np.zeros(n_orgs, dtype=np.int64),
        rsvp_keys=np.zeros(0, dtype=np.int64),
        fr_key=np.zeros(0, dtype=np.int64),
        fr_t=np.zeros(0, dtype=np.int64),
        fr_created=np.zeros(0, dtype=np.int64),
        social_key=np.zeros(0, dtype=np.int64),
        social_count=np.zeros(0, dtype=np.int64),
    )
    imp_blocks: list[dict[str, npt.NDArray[np.generic]]] = []
    rsvp_blocks: list[dict[str, npt.NDArray[np.generic]]] = []
    rounds_needed = 0

    for d in range(cfg.days):
        day0 = world.start_s + d * DAY
        day1 = day0 + DAY
        r_lo, r_hi = np.searchsorted(req_t, [day0, day1])
        o_lo, o_hi = np.searchsorted(org_t, [day0, day1])
        day_imps: list[dict[str, npt.NDArray[np.generic]]] = []
        day_org: list[tuple[IntArray, IntArray, IntArray]] = []
        live = (
            (a.e_created < day1)
            & (a.e_start > day0 + HOUR)
            & (a.e_start <= day1 + cfg.horizon_days * DAY)
            & (a.e_cancel > day0)
            & (state.event_rsvps < a.e_capacity)  # sold out at the start of the day
        )
        for mi in range(len(cfg.metros)):
            cand = np.nonzero(live & (a.e_metro == mi))[0]
            if len(cand) == 0:
                continue
            ridx = np.arange(r_lo, r_hi)
            ridx = ridx[a.u_metro[req_user[ridx]] == mi]
            if len(ridx):
                day_imps.append(
                    _policy_for_metro(
                        cfg,
                        a,
                        state,
                        rng,
                        n_events,
                        ridx,
                        req_user[ridx],
                        req_t[ridx],
                        req_near[ridx],
                        offsets[mi, d] + np.zeros(len(ridx), dtype=np.int64),
                        cand,
                    )
                )
            oidx = np.arange(o_lo, o_hi)
            oidx = oidx[a.u_metro[org_user[oidx]] == mi]
            if len(oidx):
                day_org.append(
                    _organic_for_metro(cfg, a, state, rng, n_events, org_user[oidx], org_t[oidx], cand)
                )
        if not day_imps and not day_org:
            if progress:
                progress("activity", d + 1, cfg.days)
            continue
        imps = _concat_blocks(day_imps) if day_imps else _no_impressions()
        order = np.lexsort((imps["position"], imps["surface"], imps["request"]))
        imps = {k: v[order] for k, v in imps.items()}
        iu = imps["user"].astype(np.int64)
        ie = imps["event"].astype(np.int64)
        it = imps["served_s"].astype(np.int64)
        p0 = _p_without_friends(cfg, a, iu, ie, it, imps["dist_km"].astype(np.float64))
        draw = rng.random(len(iu))
        delay = np.clip(np.exp(rng.normal(np.log(90.0), 1.0, len(iu))), 5, 1800).astype(np.int64)
        ou = np.concatenate([b[0] for b in day_org]) if day_org else np.zeros(0, np.int64)
        oe = np.concatenate([b[1] for b in day_org]) if day_org else np.zeros(0, np.int64)
        ot = np.concatenate([b[2] for b in day_org]) if day_org else np.zeros(0, np.int64)

        q_key = iu * n_events + ie
        prior = _count_friend_rsvps(q_key, it, state.fr_key, state.fr_t, state.fr_created, presorted=True)
        accepted_prev: BoolArray | None = None
        counts = prior
        for round_no in range(_MAX_FIXED_POINT_ROUNDS):
            p = apply_friend_lift(p0, counts, cfg.friend_lifts)
            wants = np.nonzero(draw < p)[0]
            att_user = np.concatenate([iu[wants], ou])
            att_event = np.concatenate([ie[wants], oe])
            att_t = np.concatenate([it[wants] + delay[wants], ot])
            # Source id: impression index for feed RSVPs, -(k + 1) for organic ones.
            att_src = np.concatenate([wants, -(np.arange(len(ou)) + 1)])
            acc = _accept(a, state, n_events, att_user, att_event, att_t, att_src)
            accepted_src = np.sort(att_src[acc])
            if accepted_prev is not None and np.array_equal(accepted_src, accepted_prev):
                rounds_needed = max(rounds_needed, round_no + 1)
                break
            accepted_prev = accepted_src
            fk, ft, fc = _expand_to_friends(a, n_events, att_user[acc], att_event[acc], att_t[acc])
            counts = prior + _count_friend_rsvps(q_key, it, fk, ft, fc)
        else:
            raise RuntimeError(f"RSVP fixed point did not converge on day {d}")

        imps["friends_going"] = counts
        imps["p_rsvp"] = p
        imps["p_rsvp_no_friends"] = p0
        imp_blocks.append(imps)
        au, ae, at_, asrc = att_user[acc], att_event[acc], att_t[acc], att_src[acc]
        imp_src = np.where(asrc >= 0, asrc, 0)
        rsvp_blocks.append(
            {
                "user": au,
                "event": ae,
                "rsvp_s": at_,
                "request": np.where(asrc >= 0, imps["request"][imp_src], -1),
                "rec_s": np.where(asrc >= 0, it[imp_src], at_),
            }
        )
        _update_state(a, state, n_events, au, ae, at_, day1)
        if progress:
            progress("activity", d + 1, cfg.days)

    log.info("RSVP fixed point: at most %d rounds per day", rounds_needed)
    if not imp_blocks:
        empty = _no_impressions()
        empty["friends_going"] = np.zeros(0, dtype=np.int64)
        empty["p_rsvp"] = empty["p_rsvp_no_friends"] = np.zeros(0, dtype=np.float64)
        imp_blocks = [empty]
    impressions = pd.DataFrame(_concat_blocks(imp_blocks)).drop(columns=["dist_km"])
    rsvps = pd.DataFrame(_concat_blocks(rsvp_blocks))
    if len(rsvps):
        rsvps = rsvps.sort_values(["rsvp_s", "user", "event"], kind="stable").reset_index(drop=True)
    else:
        rsvps = pd.DataFrame(
            {k: np.zeros(0, np.int64) for k in ("user", "event", "rsvp_s", "request", "rec_s")}
        )
    attendance, ratings = _outcomes(cfg, a, rsvps, rng)
    snapshots = _capacity_snapshots(a, rsvps)
    return Activity(
        requests=requests,
        impressions=impressions.reset_index(drop=True),
        rsvps=rsvps,
        attendance=attendance,
        ratings=ratings,
        capacity_snapshots=snapshots,
    )


def _no_impressions() -> dict[str, npt.NDArray[np.generic]]:
    ints = ("request", "user", "event", "position", "surface", "kind", "served_s")
    out: dict[str, npt.NDArray[np.generic]] = {k: np.zeros(0, dtype=np.int64) for k in ints}
    out["is_exploration"] = np.zeros(0, dtype=bool)
    out["dist_km"] = np.zeros(0, dtype=np.float64)
    return out


def _concat_blocks(
    blocks: list[dict[str, npt.NDArray[np.generic]]],
) -> dict[str, npt.NDArray[np.generic]]:
    if not blocks:
        return {}
    return {k: np.concatenate([b[k] for b in blocks]) for k in blocks[0]}


def _update_state(
    a: _Arrays,
    state: _State,
    n_events: int,
    user: IntArray,
    event: IntArray,
    t: IntArray,
    next_day: int,
) -> None:
    state.event_rsvps += np.bincount(event, minlength=n_events)
    state.org_rsvps += np.bincount(a.e_org[event], minlength=len(state.org_rsvps))
    state.rsvp_keys = np.sort(np.concatenate([state.rsvp_keys, user * n_events + event]))
    fk, ft, fc = _expand_to_friends(a, n_events, user, event, t)
    key = np.concatenate([state.fr_key, fk])
    tt = np.concatenate([state.fr_t, ft])
    cc = np.concatenate([state.fr_created, fc])
    # Rows for events that have started can never be read again.
    live = a.e_start[key % n_events] > next_day
    key, tt, cc = key[live], tt[live], cc[live]
    order = np.argsort(key, kind="stable")
    state.fr_key, state.fr_t, state.fr_created = key[order], tt[order], cc[order]
    known = state.fr_created <= next_day
    state.social_key, state.social_count = np.unique(state.fr_key[known], return_counts=True)


def _outcomes(
    cfg: SimulationConfig, a: _Arrays, rsvps: pd.DataFrame, rng: np.random.Generator
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Attendance for every RSVP and the ratings a minority of attendees leave."""
    u = rsvps["user"].to_numpy(np.int64)
    e = rsvps["event"].to_numpy(np.int64)
    n = len(u)
    dist = haversine_km(a.u_lat[u], a.u_lng[u], a.e_lat[e], a.e_lng[e])
    p = attend_probability(
        a.e_free[e],
        a.u_rel[u],
        a.e_attend_offset[e],
        dist,
        cfg.attend_logit_paid,
        cfg.attend_logit_free,
        cfg.attend_distance_logit,
    )
    cancelled = a.e_cancel[e] < np.iinfo(np.int64).max
    attended = (rng.random(n) < p) & ~cancelled
    happened = np.where(cancelled, np.minimum(a.e_cancel[e], a.e_end[e]), a.e_end[e])
    observed = np.maximum(
        rsvps["rec_s"].to_numpy(np.int64) + rng.uniform(7 * DAY, 17 * DAY, n),
        happened + rng.uniform(HOUR, 36 * HOUR, n),
    ).astype(np.int64)
    attendance = pd.DataFrame(
        {
            "user": u,
            "event": e,
            "attended": attended,
            "source": np.where(a.e_free[e], SOURCE_GEOFENCE, SOURCE_TICKET),
            "observed_s": observed,
            "p_attend": p,
            "cancelled": cancelled,
        }
    )
    rates = attended & (rng.random(n) < cfg.rating_response_rate)
    ru, re_ = u[rates], e[rates]
    latent = np.log(a.taste[ru, a.e_cat[re_]]) + np.log(a.e_quality[re_]) + rng.normal(0.0, 0.7, len(ru))
    rating = 1 + np.searchsorted(np.array([-1.4, -0.8, -0.2, 0.5]), latent)
    rated = a.e_end[re_] + np.clip(np.exp(rng.normal(np.log(20 * HOUR), 0.8, len(ru))), HOUR, 7 * DAY)
    ratings = pd.DataFrame(
        {"user": ru, "event": re_, "rating": rating.astype(np.int64), "rated_s": rated.astype(np.int64)}
    )
    return attendance, ratings


def _capacity_snapshots(a: _Arrays, rsvps: pd.DataFrame) -> pd.DataFrame:
    """The booking counter at the end of every hour in which it moved."""
    if len(rsvps) == 0:
        return pd.DataFrame(
            {k: np.zeros(0, np.int64) for k in ("event", "seats_taken", "capacity", "snapshot_s")}
        )
    hour = rsvps["rsvp_s"].to_numpy(np.int64) // HOUR
    frame = pd.DataFrame({"event": rsvps["event"].to_numpy(np.int64), "hour": hour})
    per_hour = frame.groupby(["event", "hour"], sort=True).size().rename("n").reset_index()
    per_hour["seats_taken"] = per_hour.groupby("event")["n"].cumsum().astype(np.int64)
    ev = per_hour["event"].to_numpy(np.int64)
    return pd.DataFrame(
        {
            "event": ev,
            "seats_taken": per_hour["seats_taken"].to_numpy(np.int64),
            "capacity": a.e_capacity[ev],
            "snapshot_s": (per_hour["hour"].to_numpy(np.int64) + 1) * HOUR,
        }
    )
