"""Pure generation of the static world: users, friend graph, organizers, venues, series, events.

Nothing here touches the disk; ``run.simulate`` turns the result into landing files and truth.
Latent quantities (tastes, qualities, appeal) live next to the observable ones so the ground
truth can be written out and queried later.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pandas as pd

from contracts.landing import CATEGORIES, RECURRENCES
from simulator.clock import DAY, HOUR, dst_transitions, localize, to_local
from simulator.config import METROS, SimulationConfig

log = logging.getLogger(__name__)

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

N_CAT = len(CATEGORIES)
HOURS_PER_WEEK = 168
_CAT_INDEX = {c: i for i, c in enumerate(CATEGORIES)}

# When each category happens, in venue-local time: preferred hours and weekdays (Mon..Sun).
# Organizers schedule by these, and the metro x category x hour-of-week taste peaks on them.
_HOUR_PEAKS: dict[str, dict[int, float]] = {
    "music": {19: 2, 20: 3, 21: 2, 22: 1},
    "nightlife": {21: 1, 22: 2, 23: 3, 0: 2, 1: 1},
    "food_drink": {11: 1, 12: 2, 13: 1, 17: 1, 18: 2, 19: 2},
    "arts": {10: 1, 11: 1, 14: 1, 17: 1, 18: 2, 19: 1},
    "theatre": {14: 1, 19: 3, 20: 2},
    "comedy": {19: 2, 20: 3, 21: 2},
    "sports": {12: 1, 13: 1, 15: 1, 18: 1, 19: 2},
    "fitness": {6: 2, 7: 3, 8: 1, 17: 1, 18: 2, 19: 1},
    "outdoors": {7: 1, 8: 2, 9: 3, 10: 2, 11: 1},
    "tech": {18: 3, 19: 2},
    "business": {8: 2, 12: 1, 17: 1, 18: 2},
    "education": {10: 1, 11: 1, 14: 1, 18: 2, 19: 1},
    "family": {10: 2, 11: 2, 13: 1, 14: 1},
    "community": {10: 1, 11: 1, 14: 1, 17: 1, 18: 2, 19: 1},
    "markets": {8: 1, 9: 2, 10: 3, 11: 2, 12: 1},
    "wellness": {7: 2, 8: 1, 12: 1, 18: 2, 19: 1},
}
_DAY_WEIGHTS: dict[str, tuple[float, ...]] = {
    "music": (0.6, 0.7, 0.9, 1.4, 2.2, 2.4, 0.9),
    "nightlife": (0.2, 0.3, 0.5, 1.0, 3.0, 3.0, 0.6),
    "food_drink": (0.6, 0.7, 0.8, 1.0, 1.4, 1.8, 1.5),
    "arts": (0.5, 0.8, 0.9, 1.2, 1.2, 1.8, 1.6),
    "theatre": (0.4, 0.9, 1.0, 1.1, 1.6, 1.8, 1.0),
    "comedy": (0.5, 0.8, 1.0, 1.3, 1.8, 2.0, 0.7),
    "sports": (0.6, 0.7, 0.8, 0.9, 1.0, 2.0, 2.0),
    "fitness": (1.3, 1.2, 1.2, 1.1, 0.8, 1.5, 1.0),
    "outdoors": (0.3, 0.3, 0.4, 0.4, 0.6, 2.5, 2.5),
    "tech": (0.8, 1.6, 1.8, 1.6, 0.5, 0.2, 0.1),
    "business": (1.2, 1.5, 1.5, 1.4, 0.8, 0.1, 0.1),
    "education": (1.0, 1.1, 1.1, 1.0, 0.7, 1.2, 0.8),
    "family": (0.3, 0.3, 0.5, 0.4, 0.6, 2.5, 2.3),
    "community": (0.8, 0.9, 1.0, 1.0, 1.0, 1.5, 1.3),
    "markets": (0.2, 0.2, 0.3, 0.4, 0.6, 2.8, 2.6),
    "wellness": (1.2, 1.1, 1.1, 1.0, 0.8, 1.4, 1.3),
}
# Relative supply of each category (how many organizers lead with it).
_CATEGORY_SUPPLY: dict[str, float] = {
    "music": 1.4,
    "nightlife": 1.0,
    "food_drink": 1.3,
    "arts": 0.9,
    "theatre": 0.6,
    "comedy": 0.7,
    "sports": 0.8,
    "fitness": 1.0,
    "outdoors": 0.8,
    "tech": 0.7,
    "business": 0.6,
    "education": 0.6,
    "family": 0.7,
    "community": 0.9,
    "markets": 0.6,
    "wellness": 0.7,
}
_DURATION_MINUTES: dict[str, float] = {
    "music": 180,
    "nightlife": 300,
    "food_drink": 120,
    "arts": 120,
    "theatre": 150,
    "comedy": 120,
    "sports": 150,
    "fitness": 60,
    "outdoors": 180,
    "tech": 120,
    "business": 180,
    "education": 90,
    "family": 120,
    "community": 120,
    "markets": 300,
    "wellness": 75,
}
_CAT_NOUN: dict[str, tuple[str, ...]] = {
    "music": ("Live Set", "Concert", "Jazz Night", "Indie Showcase"),
    "nightlife": ("Club Night", "Techno Night", "Disco Party", "Late Session"),
    "food_drink": ("Supper Club", "Wine Tasting", "Street Food Night", "Brunch"),
    "arts": ("Gallery Opening", "Art Walk", "Print Fair", "Studio Visit"),
    "theatre": ("Play", "Improv Show", "Musical", "Reading"),
    "comedy": ("Stand-up Night", "Comedy Open Mic", "Sketch Show", "Roast"),
    "sports": ("Watch Party", "Five-a-side", "Climbing Session", "Match Day"),
    "fitness": ("Run Club", "HIIT Class", "Yoga Flow", "Spin Class"),
    "outdoors": ("Hike", "Bike Ride", "Kayak Trip", "Bird Walk"),
    "tech": ("Meetup", "Hack Night", "Demo Day", "AI Talk"),
    "business": ("Founders Breakfast", "Networking Mixer", "Panel", "Workshop"),
    "education": ("Lecture", "Language Exchange", "Masterclass", "Book Club"),
    "family": ("Kids Workshop", "Family Day", "Story Time", "Puppet Show"),
    "community": ("Neighbourhood Meetup", "Volunteer Day", "Swap Shop", "Town Hall"),
    "markets": ("Farmers Market", "Flea Market", "Makers Market", "Night Market"),
    "wellness": ("Sound Bath", "Meditation", "Breathwork", "Pilates"),
}
_ADJECTIVES = (
    "Sunset",
    "Friday",
    "Secret",
    "Open",
    "Big",
    "Tiny",
    "Neon",
    "Golden",
    "Urban",
    "Local",
    "Wild",
    "Quiet",
    "Grand",
    "Rooftop",
    "Riverside",
    "Underground",
)
_NAME_NOUNS = (
    "Collective",
    "Society",
    "Club",
    "Project",
    "Works",
    "House",
    "Lab",
    "Crew",
    "Guild",
    "Circle",
    "Studio",
    "Company",
)
_VENUE_NOUNS = (
    "Hall",
    "Loft",
    "Warehouse",
    "Park",
    "Gallery",
    "Bar",
    "Theatre",
    "Studio",
    "Garden",
    "Arena",
    "Library",
    "Market Hall",
    "Club",
    "Rooftop",
    "Cafe",
)
_RECURRENCE_WORD = {"weekly": "Weekly", "biweekly": "Fortnightly", "monthly": "Monthly"}
_CANCEL_REASONS = ("organizer_cancelled", "low_ticket_sales", "venue_unavailable", "weather")

# Where people live and where venues are, as (weight, min km, max km) rings around the center
# (the first ring is a Rayleigh core with that scale). Wide enough that 40+ mile pairs occur.
_HOME_RINGS: tuple[tuple[float, float, float], ...] = (
    (0.45, 0.0, 5.0),
    (0.40, 8.0, 32.0),
    (0.15, 32.0, 70.0),
)
_VENUE_RINGS: tuple[tuple[float, float, float], ...] = (
    (0.55, 0.0, 4.0),
    (0.35, 6.0, 30.0),
    (0.10, 30.0, 60.0),
)


@dataclass
class World:
    """The static world plus its latent parameters; rows are addressed by position (idx)."""

    config: SimulationConfig
    start_s: int
    end_s: int  # the world's end: the history plus the days the platform plays live
    history_end_s: int  # where the simulated activity (and the landing written up front) ends
    users: pd.DataFrame
    taste: FloatArray  # users x categories, multiplicative taste
    user_updates: pd.DataFrame
    friendships: pd.DataFrame
    organizers: pd.DataFrame
    venues: pd.DataFrame
    series: pd.DataFrame
    events: pd.DataFrame
    event_updates: pd.DataFrame
    mch: FloatArray  # metros x categories x hour-of-week taste factor
    category_profile: FloatArray  # categories x hour-of-week scheduling distribution


def make_ids(prefix: str, n: int, width: int) -> npt.NDArray[np.object_]:
    """Sequential ids like ``u0000042``: sortable, and stable for a given seed and size."""
    if n == 0:
        return np.zeros(0, dtype=object)
    digits = np.char.zfill(np.arange(n).astype(str), width)
    out: npt.NDArray[np.object_] = np.char.add(prefix, digits).astype(object)
    return out


def _lognormal_mean1(rng: np.random.Generator, sigma: float, n: int) -> FloatArray:
    out: FloatArray = np.exp(rng.normal(-0.5 * sigma * sigma, sigma, n))
    return out


def _scatter(
    rng: np.random.Generator,
    lat0: float,
    lng0: float,
    n: int,
    rings: tuple[tuple[float, float, float], ...],
) -> tuple[FloatArray, FloatArray]:
    """Points around a center: a dense core plus suburban and exurban rings."""
    weights = np.array([r[0] for r in rings])
    comp = rng.choice(len(rings), size=n, p=weights / weights.sum())
    lo = np.array([r[1] for r in rings])[comp]
    hi = np.array([r[2] for r in rings])[comp]
    radius = np.where(comp == 0, rng.rayleigh(1.0, n) * hi, rng.uniform(lo, hi))
    return _offset(lat0, lng0, radius, rng.uniform(0.0, 2 * np.pi, n))


def _offset(
    lat0: float | FloatArray, lng0: float | FloatArray, radius_km: FloatArray, theta: FloatArray
) -> tuple[FloatArray, FloatArray]:
    dy = radius_km * np.sin(theta)
    dx = radius_km * np.cos(theta)
    lat = lat0 + dy / 110.574
    lng = lng0 + dx / (111.320 * np.cos(np.radians(lat0)))
    return np.asarray(lat, dtype=np.float64), np.asarray(lng, dtype=np.float64)


def category_profile() -> FloatArray:
    """P(hour-of-week | category) used to schedule events (Monday 00:00 = 0)."""
    prof = np.zeros((N_CAT, HOURS_PER_WEEK))
    hours = np.arange(24)
    for c, cat in enumerate(CATEGORIES):
        hour_w = np.where((hours >= 8) & (hours <= 22), 0.04, 0.004)
        for h, w in _HOUR_PEAKS[cat].items():
            hour_w[h] = w
        day_w = np.asarray(_DAY_WEIGHTS[cat])
        prof[c] = np.outer(day_w, hour_w).ravel()
        prof[c] /= prof[c].sum()
    return prof


def _metro_category_hour_taste(rng: np.random.Generator, n_metros: int, profile: FloatArray) -> FloatArray:
    """metro x category x hour-of-week taste: peaks where the category's crowd is free."""
    time_appeal = (profile / profile.max(axis=1, keepdims=True)) ** 0.3
    metro_cat = rng.normal(0.0, 0.2, (n_metros, N_CAT, 1))
    # Local quirks per weekday and 6-hour block (Berlin nightlife runs later, ...).
    block = rng.normal(0.0, 0.15, (n_metros, N_CAT, 7, 4))
    block_full = np.repeat(block, 6, axis=3).reshape(n_metros, N_CAT, HOURS_PER_WEEK)
    raw = time_appeal[None, :, :] * np.exp(block_full)
    # Normalise so the schedule-weighted mean is exp(metro_cat): ratios carry the timing signal.
    mean = (raw * profile[None, :, :]).sum(axis=2, keepdims=True)
    out: FloatArray = np.clip(raw / mean * np.exp(metro_cat), 0.4, 1.8)
    return out


def _users(
    config: SimulationConfig, rng: np.random.Generator, start_s: int, end_s: int
) -> tuple[pd.DataFrame, FloatArray, int]:
    n = config.users
    metros = [METROS[m] for m in config.metros]
    weights = np.array([m.weight for m in metros])
    metro = np.sort(rng.choice(len(metros), size=n, p=weights / weights.sum()))
    lat = np.empty(n)
    lng = np.empty(n)
    community = np.empty(n, dtype=np.int64)
    n_comm = 0
    for mi, m in enumerate(metros):
        idx = np.nonzero(metro == mi)[0]
        if len(idx) == 0:
            continue
        hubs = max(1, round(len(idx) / config.community_size))
        hub_lat, hub_lng = _scatter(rng, m.lat, m.lng, hubs, _HOME_RINGS)
        sizes = rng.gamma(2.0, 1.0, hubs)
        local = rng.choice(hubs, size=len(idx), p=sizes / sizes.sum())
        # Friends live near each other: a user sits within a couple of km of the community hub.
        jitter_lat, jitter_lng = _offset(
            hub_lat[local],
            hub_lng[local],
            np.abs(rng.normal(0.0, 1.5, len(idx))),
            rng.uniform(0.0, 2 * np.pi, len(idx)),
        )
        lat[idx], lng[idx] = jitter_lat, jitter_lng
        community[idx] = n_comm + local
        n_comm += hubs

    # Tastes: half shared with the community (friends like the same things), half personal.
    z_comm = rng.normal(0.0, 1.0, (n_comm, N_CAT))
    z_user = rng.normal(0.0, 1.0, (n, N_CAT))
    log_taste = 0.45 * z_comm[community] + 0.45 * z_user - 0.5 * (2 * 0.45**2)
    taste = np.clip(np.exp(log_taste), 0.2, 2.5)

    new_user = rng.random(n) < config.new_user_share
    signup = np.where(
        new_user,
        rng.uniform(start_s, end_s - HOUR, n),
        start_s - np.exp(rng.uniform(np.log(2 * DAY), np.log(1500 * DAY), n)),
    ).astype(np.int64)

    # Regulars are keen too: the RSVP propensity is correlated with how often one opens the feed.
    rho = config.propensity_request_correlation
    z_req = rng.normal(0.0, 1.0, n)
    z_prop = rho * z_req + np.sqrt(1.0 - rho * rho) * rng.normal(0.0, 1.0, n)
    # Casual users open the app about once a month and rarely commit; regulars carry the
    # history. The mix is what makes ~41% of monthly actives RSVP nothing while the median
    # user with any RSVPs has about three.
    casual = rng.random(n) < config.casual_user_share
    regular_rate = config.requests_per_user_day / (
        1.0 - config.casual_user_share * (1.0 - config.casual_activity_factor)
    )
    activity = np.where(casual, config.casual_activity_factor, 1.0)
    users = pd.DataFrame(
        {
            "user_id": make_ids("u", n, 7),
            "metro": metro,
            "home_lat": np.round(lat, 6),
            "home_lng": np.round(lng, 6),
            "community": community,
            "signup_s": signup,
            "propensity": np.clip(
                np.exp(config.propensity_sigma * z_prop - 0.5 * config.propensity_sigma**2)
                * np.where(casual, config.casual_propensity_factor, 1.0),
                0.2,
                2.5,
            ),
            "request_rate": regular_rate
            * activity
            * np.exp(config.request_rate_sigma * z_req - 0.5 * config.request_rate_sigma**2),
            "casual": casual,
            "reliability": rng.normal(0.0, 0.5, n),
        }
    )
    users["onboarding"] = pd.Series(_onboarding(config, rng, taste), dtype=object)
    # Users who skipped onboarding: most exports omit the list (null), some send [].
    users["skipped_as_empty"] = rng.random(n) < 0.3
    return users, taste, n_comm


def _top_categories(rng: np.random.Generator, taste: FloatArray, k: IntArray) -> list[list[str]]:
    noisy = np.log(taste) + rng.gumbel(0.0, 0.5, taste.shape)
    order = np.argsort(-noisy, axis=1)
    cats = np.asarray(CATEGORIES, dtype=object)
    return [list(cats[row[:kk]]) for row, kk in zip(order, k, strict=True)]


def _onboarding(
    config: SimulationConfig, rng: np.random.Generator, taste: FloatArray
) -> list[list[str] | None]:
    n = len(taste)
    picked = rng.random(n) < config.onboarding_share
    k = rng.integers(2, 6, n)
    lists = _top_categories(rng, taste, k)
    return [lst if p else None for lst, p in zip(lists, picked, strict=True)]


def _user_updates(
    config: SimulationConfig,
    rng: np.random.Generator,
    users: pd.DataFrame,
    taste: FloatArray,
    start_s: int,
    end_s: int,
) -> pd.DataFrame:
    """Second profile versions: onboarding finished (or redone) later, delivered as a new row."""
    chosen = np.nonzero(rng.random(len(users)) < config.user_update_rate)[0]
    lo = np.maximum(users["signup_s"].to_numpy()[chosen], start_s) + HOUR
    keep = lo < end_s - HOUR
    chosen, lo = chosen[keep], lo[keep]
    updated = rng.uniform(lo, end_s - HOUR).astype(np.int64)
    lists = _top_categories(rng, taste[chosen], rng.integers(2, 6, len(chosen)))
    return pd.DataFrame({"user": chosen, "updated_s": updated, "onboarding": lists})


def _friendships(
    config: SimulationConfig,
    rng: np.random.Generator,
    users: pd.DataFrame,
    start_s: int,
    end_s: int,
) -> pd.DataFrame:
    """Clustered friend graph: most ties inside the community, some across the metro."""
    n = len(users)
    community = users["community"].to_numpy()
    metro = users["metro"].to_numpy()
    stubs = np.clip(np.round(np.exp(rng.normal(np.log(config.friend_stubs_median), 0.6, n))), 1, 150).astype(
        np.int64
    )
    src = np.repeat(np.arange(n), stubs)
    m = len(src)

    def pick_within(group: IntArray) -> IntArray:
        order = np.argsort(group, kind="stable")
        sorted_group = group[order]
        starts = np.searchsorted(sorted_group, group[src], side="left")
        ends = np.searchsorted(sorted_group, group[src], side="right")
        return order[starts + (rng.random(m) * (ends - starts)).astype(np.int64)]

    in_comm = pick_within(community)
    in_metro = pick_within(metro)
    anywhere = rng.integers(0, n, m)
    u = rng.random(m)
    share = config.friend_in_community_share
    dst = np.where(u < share, in_comm, np.where(u < share + (1 - share) * 0.9, in_metro, anywhere))
    a = np.minimum(src, dst)
    b = np.maximum(src, dst)
    pairs = np.unique(np.stack([a[a != b], b[a != b]], axis=1), axis=0)
    a, b = pairs[:, 0], pairs[:, 1]
    signup = users["signup_s"].to_numpy()
    t0 = np.maximum(signup[a], signup[b])
    during = rng.random(len(a)) < 0.06
    created = np.where(
        t0 >= start_s,
        t0 + rng.uniform(0, 3 * DAY, len(a)),
        np.where(during, rng.uniform(start_s, end_s, len(a)), t0 + rng.random(len(a)) * (start_s - t0)),
    ).astype(np.int64)
    keep = created < end_s
    return pd.DataFrame({"a": a[keep], "b": b[keep], "created_s": created[keep]})


def _names(rng: np.random.Generator, n: int, nouns: tuple[str, ...]) -> npt.NDArray[np.object_]:
    adj = np.asarray(_ADJECTIVES, dtype=object)[rng.integers(0, len(_ADJECTIVES), n)]
    noun = np.asarray(nouns, dtype=object)[rng.integers(0, len(nouns), n)]
    out: npt.NDArray[np.object_] = (adj + " " + noun).astype(object)
    return out


def _supply(
    config: SimulationConfig,
    rng: np.random.Generator,
    users: pd.DataFrame,
    start_s: int,
    end_s: int,
) -> tuple[pd.DataFrame, pd.DataFrame, IntArray]:
    """Venues and organizers per metro; each organizer works from one to three venues."""
    venue_rows: list[pd.DataFrame] = []
    org_rows: list[pd.DataFrame] = []
    org_venue_blocks: list[IntArray] = []
    supply = np.array([_CATEGORY_SUPPLY[c] for c in CATEGORIES])
    n_venues_total = 0
    for mi, name in enumerate(config.metros):
        metro = METROS[name]
        n_users = int((users["metro"] == mi).sum())
        nv = max(5, round(n_users * config.venues_per_1000_users / 1000))
        no = max(4, round(n_users * config.organizers_per_1000_users / 1000))
        vlat, vlng = _scatter(rng, metro.lat, metro.lng, nv, _VENUE_RINGS)
        # Venues follow people: most sit in a neighbourhood where users live.
        metro_users = np.nonzero(users["metro"].to_numpy() == mi)[0]
        if len(metro_users):
            anchor = rng.choice(metro_users, size=nv)
            plat, plng = _offset(
                users["home_lat"].to_numpy()[anchor],
                users["home_lng"].to_numpy()[anchor],
                rng.rayleigh(1.5, nv),
                rng.uniform(0.0, 2 * np.pi, nv),
            )
            follow = rng.random(nv) < config.venues_near_people_share
            vlat, vlng = np.where(follow, plat, vlat), np.where(follow, plng, vlng)
        venue_rows.append(
            pd.DataFrame(
                {
                    "metro": mi,
                    "lat": np.round(vlat, 6),
                    "lng": np.round(vlng, 6),
                    "timezone": metro.timezone,
                    "name": _names(rng, nv, _VENUE_NOUNS),
                    "created_s": (start_s - rng.uniform(30 * DAY, 3000 * DAY, nv)).astype(np.int64),
                }
            )
        )
        new = rng.random(no) < config.new_organizer_share
        created = np.where(
            new,
            rng.uniform(start_s - 20 * DAY, start_s + 0.6 * (end_s - start_s), no),
            start_s - rng.uniform(60 * DAY, 2000 * DAY, no),
        ).astype(np.int64)
        primary = rng.choice(N_CAT, size=no, p=supply / supply.sum())
        secondary = rng.choice(N_CAT, size=no, p=supply / supply.sum())
        org_rows.append(
            pd.DataFrame(
                {
                    "metro": mi,
                    "name": _names(rng, no, _NAME_NOUNS),
                    "created_s": created,
                    "is_new": new,
                    "primary_category": primary,
                    "secondary_category": secondary,
                    # Organizer quality is what events inherit (design: route signal to the
                    # persistent entity).
                    "quality": np.clip(_lognormal_mean1(rng, 0.35, no), 0.4, 2.2),
                    "reliability": rng.normal(0.0, 0.3, no),
                    "activity": _lognormal_mean1(rng, 0.9, no) * np.where(new, 0.5, 1.0),
                }
            )
        )
        org_venue_blocks.append(n_venues_total + rng.integers(0, nv, (no, 3)))
        n_venues_total += nv
    venues = pd.concat(venue_rows, ignore_index=True)
    venues.insert(0, "venue_id", make_ids("v", len(venues), 6))
    organizers = pd.concat(org_rows, ignore_index=True)
    organizers.insert(0, "organizer_id", make_ids("o", len(organizers), 6))
    org_venues = np.concatenate(org_venue_blocks)
    organizers["n_venues"] = rng.integers(1, 4, len(organizers))
    return venues, organizers, org_venues


def _sample_how(rng: np.random.Generator, profile: FloatArray, cats: IntArray) -> IntArray:
    how = np.empty(len(cats), dtype=np.int64)
    for c in np.unique(cats):
        sel = np.nonzero(cats == c)[0]
        how[sel] = rng.choice(HOURS_PER_WEEK, size=len(sel), p=profile[c])
    return how


def _monday_local(start_s: int, tz: str) -> int:
    """Local midnight of the Monday on or before the window start, as naive local seconds."""
    local = int(to_local(np.array([start_s], dtype=np.int64), tz)[0])
    day = local // DAY
    dow = (day + 3) % 7  # 1970-01-01 was a Thursday
    return int((day - dow) * DAY)


def _events_for_metro(
    config: SimulationConfig,
    rng: np.random.Generator,
    mi: int,
    n_users: int,
    organizers: pd.DataFrame,
    org_venues: IntArray,
    profile: FloatArray,
    start_s: int,
    end_s: int,
    series_offset: int,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    metro = METROS[config.metros[mi]]
    tz = metro.timezone
    span_end = end_s + config.horizon_days * DAY
    span_days = (span_end - start_s) / DAY
    total = round(config.events_per_1000_users_per_day * n_users / 1000 * span_days)
    monday = _monday_local(start_s, tz)
    n_weeks = int(np.ceil(span_days / 7)) + 2
    org_idx = np.nonzero(organizers["metro"].to_numpy() == mi)[0]
    org_act = organizers["activity"].to_numpy()[org_idx]
    established = org_idx[~organizers["is_new"].to_numpy()[org_idx]]
    if len(established) == 0:
        established = org_idx

    # --- recurring series: fixed weekday, wall-clock time and venue ---
    recur_p = np.array([0.6, 0.25, 0.15])
    period_days = np.array([7, 14, 28])
    expected_instances = float((recur_p * span_days / period_days).sum())
    n_series = int(round(config.series_event_share * total / max(expected_instances, 1.0)))
    s_org = rng.choice(
        established,
        size=n_series,
        p=org_act[np.isin(org_idx, established)] / org_act[np.isin(org_idx, established)].sum(),
    )
    s_rec = rng.choice(3, size=n_series, p=recur_p)
    s_cat = organizers["primary_category"].to_numpy()[s_org]
    s_how = _sample_how(rng, profile, s_cat)
    s_minute = rng.choice(np.array([0, 30]), size=n_series)
    s_phase = rng.integers(0, period_days[s_rec] // 7) * 7
    s_venue = org_venues[s_org, 0]
    s_created = np.maximum(
        start_s - rng.uniform(30 * DAY, 400 * DAY, n_series),
        organizers["created_s"].to_numpy()[s_org] + DAY,
    ).astype(np.int64)
    series = pd.DataFrame(
        {
            "organizer": s_org,
            "metro": mi,
            "recurrence": np.asarray(RECURRENCES, dtype=object)[s_rec],
            "category": s_cat,
            "venue": s_venue,
            "created_s": s_created,
            "quality": np.clip(_lognormal_mean1(rng, 0.3, n_series), 0.5, 2.0),
            "reliability": rng.normal(0.0, 0.3, n_series),
        }
    )
    recurrence_word = np.asarray([_RECURRENCE_WORD[r] for r in RECURRENCES], dtype=object)
    cat_noun = np.asarray([_CAT_NOUN[c][0] for c in CATEGORIES], dtype=object)
    series["title"] = (
        recurrence_word[s_rec] + " " + cat_noun[s_cat] + " by " + organizers["name"].to_numpy()[s_org]
    )

    reps = (n_weeks * 7) // period_days[s_rec] + 1
    inst_series = np.repeat(np.arange(n_series), reps)
    inst_k = np.arange(len(inst_series)) - np.repeat(np.cumsum(reps) - reps, reps)
    inst_local = (
        monday
        + (s_phase[inst_series] + inst_k * period_days[s_rec][inst_series]) * DAY
        + s_how[inst_series] * HOUR
        + s_minute[inst_series] * 60
    )

    # --- standalone events ---
    n_alone = max(0, total - len(inst_series))
    # (The instance count above is a superset of the window; trimmed below.)
    a_org = rng.choice(org_idx, size=n_alone, p=org_act / org_act.sum())
    a_cat = np.where(
        rng.random(n_alone) < 0.7,
        organizers["primary_category"].to_numpy()[a_org],
        organizers["secondary_category"].to_numpy()[a_org],
    )
    a_how = _sample_how(rng, profile, a_cat)
    a_minute = rng.choice(np.array([0, 0, 15, 30, 30, 45]), size=n_alone)
    span_local_lo = int(to_local(np.array([start_s]), tz)[0])
    span_local_hi = int(to_local(np.array([span_end]), tz)[0])
    a_local = np.zeros(n_alone, dtype=np.int64)
    todo = np.arange(n_alone)
    while len(todo):  # rejection sampling of the week; a few rounds at most
        week = rng.integers(0, n_weeks, len(todo))
        cand = monday + week * 7 * DAY + a_how[todo] * HOUR + a_minute[todo] * 60
        ok = (cand >= span_local_lo) & (cand < span_local_hi)
        a_local[todo[ok]] = cand[ok]
        todo = todo[~ok]
    a_venue = org_venues[a_org, rng.integers(0, organizers["n_venues"].to_numpy()[a_org])]

    events = pd.DataFrame(
        {
            "organizer": np.concatenate([s_org[inst_series], a_org]),
            "series": np.concatenate([series_offset + inst_series, np.full(n_alone, -1)]),
            "venue": np.concatenate([s_venue[inst_series], a_venue]),
            "category": np.concatenate([s_cat[inst_series], a_cat]),
            "start_local_s": np.concatenate([inst_local, a_local]).astype(np.int64),
        }
    )
    # Organizers avoid wall-clock times that do not exist or happen twice; a DST night does not
    # move a weekly class into the repeated hour. (The deliberate ones are added below.)
    for _ in range(3):
        res = localize(events["start_local_s"].to_numpy(), tz)
        bad = res.nonexistent | res.ambiguous
        if not bad.any():
            break
        events.loc[bad, "start_local_s"] += HOUR
    res = localize(events["start_local_s"].to_numpy(), tz)
    events["start_s"] = res.utc
    events["start_ambiguous"] = res.ambiguous
    events = events[(events["start_s"] >= start_s) & (events["start_s"] < span_end)]

    # --- deliberate DST events: start_local inside the repeated fall-back hour ---
    fall, _ = dst_transitions(tz, start_s, span_end)
    dst_rows = []
    for tr in fall:
        k = config.dst_ambiguous_events_per_metro
        if k <= 0:
            continue
        local = np.full(k, tr.local_start + tr.length // 2, dtype=np.int64)
        org = rng.choice(established, size=k)
        res = localize(local, tz)
        dst_rows.append(
            pd.DataFrame(
                {
                    "organizer": org,
                    "series": -1,
                    "venue": org_venues[org, 0],
                    "category": _CAT_INDEX["nightlife"],
                    "start_local_s": local,
                    "start_s": res.utc,
                    "start_ambiguous": res.ambiguous,
                }
            )
        )
    if dst_rows:
        events = pd.concat([events, *dst_rows], ignore_index=True)
    events["metro"] = mi
    return events.reset_index(drop=True), series


def _event_attributes(
    config: SimulationConfig,
    rng: np.random.Generator,
    events: pd.DataFrame,
    organizers: pd.DataFrame,
    series: pd.DataFrame,
    venues: pd.DataFrame,
    mch: FloatArray,
    start_s: int,
    end_s: int,
) -> pd.DataFrame:
    n = len(events)
    cats = events["category"].to_numpy()
    has_series = events["series"].to_numpy() >= 0
    sidx = np.where(has_series, events["series"].to_numpy(), 0)
    org = events["organizer"].to_numpy()

    lead = np.where(
        has_series,
        rng.uniform(7 * DAY, 21 * DAY, n),
        np.clip(np.exp(rng.normal(np.log(17 * DAY), 0.8, n)), DAY, 120 * DAY),
    )
    created = events["start_s"].to_numpy() - lead
    created = np.maximum(created, organizers["created_s"].to_numpy()[org] + HOUR)
    if len(series):
        created = np.where(
            has_series, np.maximum(created, series["created_s"].to_numpy()[sidx] + HOUR), created
        )
    created = created.astype(np.int64)
    events = events.assign(created_s=created)
    keep = (created < events["start_s"].to_numpy() - 2 * HOUR) & (created < end_s)
    events = events[keep].reset_index(drop=True)
    created = events["created_s"].to_numpy()
    n = len(events)
    cats = events["category"].to_numpy()
    has_series = events["series"].to_numpy() >= 0
    sidx = np.where(has_series, events["series"].to_numpy(), 0)
    org = events["organizer"].to_numpy()

    is_free = rng.random(n) < config.free_event_share
    price = np.where(
        is_free, 0, np.clip(np.round(np.exp(rng.normal(np.log(2800), 0.7, n)) / 100) * 100, 500, 50_000)
    ).astype(np.int64)
    small = rng.random(n) < config.small_capacity_share
    capacity = np.where(
        small,
        rng.integers(4, 16, n),
        np.clip(np.round(np.exp(rng.normal(np.log(120), 1.0, n))), 20, 20_000),
    ).astype(np.int64)
    med = np.array([_DURATION_MINUTES[c] for c in CATEGORIES])[cats]
    duration = np.clip(np.round(med * np.exp(rng.normal(0, 0.25, n)) / 15) * 15, 30, 7 * 24 * 60)
    # A few multi-day conferences and festivals.
    multi = rng.random(n) < 0.01
    duration = np.where(multi, rng.integers(2, 4, n) * 24 * 60, duration).astype(np.int64)

    series_quality = np.where(has_series, series["quality"].to_numpy()[sidx] if len(series) else 1.0, 1.0)
    series_rel = np.where(has_series, series["reliability"].to_numpy()[sidx] if len(series) else 0.0, 0.0)
    appeal = np.clip(_lognormal_mean1(rng, 0.3, n), 0.4, 2.2)
    quality = np.clip(organizers["quality"].to_numpy()[org] * series_quality * appeal, 0.3, 2.5)

    local = events["start_local_s"].to_numpy()
    local_day = local // DAY
    how = ((local_day + 3) % 7) * 24 + (local % DAY) // HOUR
    mch_factor = mch[events["metro"].to_numpy(), cats, how]
    free_factor = np.where(is_free, config.free_rsvp_boost, 1.0)

    cancelled = rng.random(n) < config.cancellation_rate
    start = events["start_s"].to_numpy()
    cancelled_s = np.where(cancelled, created + rng.uniform(0.15, 0.95, n) * (start - created), -1).astype(
        np.int64
    )
    reason_pool = np.asarray((*_CANCEL_REASONS, None), dtype=object)
    reason = reason_pool[rng.integers(0, len(reason_pool), n)]

    noun_idx = rng.integers(0, 4, n)
    nouns = np.asarray(
        [_CAT_NOUN[CATEGORIES[c]][k] for c, k in zip(cats, noun_idx, strict=True)], dtype=object
    )
    adjectives = np.asarray(_ADJECTIVES, dtype=object)[rng.integers(0, len(_ADJECTIVES), n)]
    standalone_title = adjectives + " " + nouns
    title = standalone_title
    if len(series):
        title = np.where(has_series, series["title"].to_numpy()[sidx], standalone_title)
    venue_name = venues["name"].to_numpy()[events["venue"].to_numpy()]
    description = np.full(n, None, dtype=object)
    has_description = rng.random(n) < 0.7
    description[has_description] = (title + " at " + venue_name + ".")[has_description]

    return events.assign(
        is_free=is_free,
        price_cents=price,
        capacity=capacity,
        duration_minutes=duration,
        end_s=start + duration * 60,
        appeal=appeal,
        organizer_quality=organizers["quality"].to_numpy()[org],
        series_quality=series_quality,
        quality=quality,
        hour_of_week=how,
        mch_factor=mch_factor,
        event_factor=mch_factor * quality * free_factor,
        attend_offset=organizers["reliability"].to_numpy()[org] + series_rel + rng.normal(0, 0.2, n),
        cancelled_s=cancelled_s,
        cancel_reason=reason,
        title=title,
        description=description,
    )


def _event_updates(
    config: SimulationConfig, rng: np.random.Generator, events: pd.DataFrame, end_s: int
) -> pd.DataFrame:
    """Edited listings: a later version of the same event_id with a new description."""
    chosen = np.nonzero(rng.random(len(events)) < config.event_update_rate)[0]
    created = events["created_s"].to_numpy()[chosen]
    until = np.minimum(events["start_s"].to_numpy()[chosen], end_s)
    updated = (created + rng.uniform(0.05, 0.9, len(chosen)) * (until - created)).astype(np.int64)
    keep = updated > created
    chosen, updated = chosen[keep], updated[keep]
    desc = events["title"].to_numpy()[chosen] + " - updated details, see the listing."
    return pd.DataFrame({"event": chosen, "updated_s": updated, "description": desc})


def build_world(config: SimulationConfig, rng: np.random.Generator) -> World:
    """Generate the whole static world for one config (deterministic given ``rng``)."""
    start_s = int(config.start.timestamp())
    history_end_s = start_s + config.days * DAY
    end_s = history_end_s + config.platform_days * DAY
    users, taste, _ = _users(config, rng, start_s, end_s)
    user_updates = _user_updates(config, rng, users, taste, start_s, end_s)
    friendships = _friendships(config, rng, users, start_s, end_s)
    venues, organizers, org_venues = _supply(config, rng, users, start_s, end_s)
    profile = category_profile()
    mch = _metro_category_hour_taste(rng, len(config.metros), profile)

    event_blocks: list[pd.DataFrame] = []
    series_blocks: list[pd.DataFrame] = []
    n_series = 0
    for mi in range(len(config.metros)):
        n_users = int((users["metro"] == mi).sum())
        ev, se = _events_for_metro(
            config, rng, mi, n_users, organizers, org_venues, profile, start_s, end_s, n_series
        )
        event_blocks.append(ev)
        series_blocks.append(se)
        n_series += len(se)
    series = pd.concat(series_blocks, ignore_index=True)
    series.insert(0, "series_id", make_ids("s", len(series), 6))
    events = pd.concat(event_blocks, ignore_index=True)
    events = _event_attributes(config, rng, events, organizers, series, venues, mch, start_s, end_s)
    # Stable, meaningful order: by creation time, so ids read like an auto-increment.
    events = events.sort_values(["created_s", "start_s"], kind="stable").reset_index(drop=True)
    events.insert(0, "event_id", make_ids("e", len(events), 7))
    event_updates = _event_updates(config, rng, events, end_s)
    log.info(
        "world: %d users, %d friendships, %d organizers, %d venues, %d series, %d events",
        len(users),
        len(friendships),
        len(organizers),
        len(venues),
        len(series),
        len(events),
    )
    return World(
        config=config,
        start_s=start_s,
        end_s=end_s,
        history_end_s=history_end_s,
        users=users,
        taste=taste,
        user_updates=user_updates,
        friendships=friendships,
        organizers=organizers,
        venues=venues,
        series=series,
        events=events,
        event_updates=event_updates,
        mch=mch,
        category_profile=profile,
    )
