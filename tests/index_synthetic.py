"""A small synthetic platform for the index and tower tests, shaped like the silver tables.

The words are made-up syllable strings, so nothing here leans on English: an organizer has its
own signature words, a category its own vocabulary, every title and description adds filler.
Users favour two organizers and one category and RSVP accordingly, which is the taste signal
the content tower must recover from co-RSVPs alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd

METROS = {
    "nyc": (40.7128, -74.0060, "America/New_York"),
    "sf": (37.7749, -122.4194, "America/Los_Angeles"),
    "london": (51.5074, -0.1278, "Europe/London"),
    "berlin": (52.5200, 13.4050, "Europe/Berlin"),
}
CATEGORIES = ("music", "arts", "tech", "fitness", "food_drink", "outdoors", "comedy", "markets")
SYLLABLES = (
    "ka",
    "lo",
    "mi",
    "ru",
    "te",
    "van",
    "zo",
    "pel",
    "dri",
    "sho",
    "gu",
    "nex",
    "bar",
    "qui",
    "fen",
    "tal",
)
WORLD_START = datetime(2026, 9, 1, tzinfo=UTC)


def _words(rng: np.random.Generator, n: int, taken: set[str]) -> list[str]:
    out: list[str] = []
    while len(out) < n:
        w = "".join(rng.choice(SYLLABLES, size=int(rng.integers(2, 4))))
        if w not in taken:
            taken.add(w)
            out.append(w)
    return out


@dataclass(frozen=True)
class World:
    events: pd.DataFrame
    venues: pd.DataFrame
    cancellations: pd.DataFrame
    rsvps: pd.DataFrame


def make_world(
    seed: int = 0,
    n_users: int = 600,
    n_organizers: int = 60,
    n_events: int = 1500,
    days: int = 75,
) -> World:
    """Events spread over ``days`` from WORLD_START, with venues, cancellations and RSVPs."""
    rng = np.random.default_rng(seed)
    taken: set[str] = set()
    cat_words = {c: _words(rng, 6, taken) for c in CATEGORIES}
    filler = _words(rng, 150, taken)
    metros = list(METROS)

    venues = []
    for m in metros:
        lat0, lng0, tz = METROS[m]
        for i in range(30):
            venues.append(
                {
                    "venue_id": f"v-{m}-{i}",
                    "name": f"venue {i}",
                    "metro": m,
                    # About 15 km spread: most venues inside the 40 km radius, a few outside.
                    "lat": lat0 + rng.normal(0, 0.14),
                    "lng": lng0 + rng.normal(0, 0.18),
                    "timezone": tz,
                    "created_at": WORLD_START - timedelta(days=100),
                    "_record_id": f"rv-{m}-{i}",
                }
            )
    venues_df = pd.DataFrame(venues)

    organizers = []
    for o in range(n_organizers):
        organizers.append(
            {
                "organizer_id": f"o{o}",
                "metro": metros[o % len(metros)],
                "category": CATEGORIES[int(rng.integers(len(CATEGORIES)))],
                "signature": _words(rng, 3, taken),
                "series": [(f"s{o}-{k}", _words(rng, 1, taken)[0]) for k in range(int(rng.integers(0, 3)))],
            }
        )

    events = []
    for e in range(n_events):
        org = organizers[int(rng.integers(n_organizers))]
        metro = org["metro"]
        cat = org["category"] if rng.random() < 0.8 else CATEGORIES[int(rng.integers(len(CATEGORIES)))]
        sig, cw = org["signature"], cat_words[cat]
        series_id = None
        if org["series"] and rng.random() < 0.4:
            series_id, series_word = org["series"][int(rng.integers(len(org["series"])))]
            title = f"{sig[0]} {series_word} {cw[0]}"
        else:
            parts = [*rng.choice(cw, 2, replace=False), rng.choice(filler)]
            if rng.random() < 0.7:
                parts.insert(0, rng.choice(sig))
            title = " ".join(parts)
        description = None
        if rng.random() < 0.9:
            description = " ".join([*rng.choice(sig, 2), *rng.choice(cw, 3), *rng.choice(filler, 6)])
        start = WORLD_START + timedelta(minutes=int(rng.integers(0, days * 24 * 60 // 15)) * 15)
        created = start - timedelta(hours=int(rng.integers(24, 40 * 24)))
        venue = venues_df[venues_df["metro"] == metro].iloc[int(rng.integers(30))]
        events.append(
            {
                "event_id": f"e{e:05d}",
                "organizer_id": org["organizer_id"],
                "venue_id": venue["venue_id"],
                "series_id": series_id,
                "category": cat,
                "title": title,
                "description": description,
                "timezone": venue["timezone"],
                "duration_minutes": 120,
                "is_free": bool(rng.random() < 0.45),
                "price_cents": 1500,
                "capacity": 100,
                "created_at": created,
                "updated_at": created,
                "start_at": start,
                "start_was_ambiguous": False,
                "_record_id": f"re{e:05d}",
            }
        )
    events_df = pd.DataFrame(events)

    cancelled = events_df.sample(frac=0.02, random_state=seed)
    cancellations_df = pd.DataFrame(
        {
            "event_id": cancelled["event_id"].to_numpy(),
            "cancelled_at": (cancelled["created_at"] + timedelta(hours=12)).to_numpy(),
            "reason": "organizer",
            "_record_id": [f"rc{i}" for i in range(len(cancelled))],
        }
    )

    by_org = events_df.groupby("organizer_id").indices
    org_metro = {o["organizer_id"]: o["metro"] for o in organizers}
    metro_events = {m: np.flatnonzero(events_df["organizer_id"].map(org_metro) == m) for m in metros}
    cat_events = {
        (m, c): np.flatnonzero((events_df["organizer_id"].map(org_metro) == m) & (events_df["category"] == c))
        for m in metros
        for c in CATEGORIES
    }
    rsvps = []
    for u in range(n_users):
        metro = metros[u % len(metros)]
        local_orgs = [o["organizer_id"] for o in organizers if o["metro"] == metro]
        favs = rng.choice(local_orgs, size=2, replace=False)
        fav_cat = CATEGORIES[int(rng.integers(len(CATEGORIES)))]
        for _ in range(int(rng.poisson(6)) + 2):
            r = rng.random()
            if r < 0.55:
                pool = by_org[str(rng.choice(favs))]
            elif r < 0.8 and len(cat_events[(metro, fav_cat)]):
                pool = cat_events[(metro, fav_cat)]
            else:
                pool = metro_events[metro]
            ev = events_df.iloc[int(rng.choice(pool))]
            span = (ev["start_at"] - ev["created_at"]).total_seconds()
            at = ev["created_at"] + timedelta(seconds=float(rng.uniform(0, span)))
            rid = f"r{len(rsvps):06d}"
            rsvps.append(
                {
                    "rsvp_id": rid,
                    "user_id": f"u{u}",
                    "event_id": ev["event_id"],
                    "request_id": None,
                    "rsvp_at": at,
                    "_record_id": f"rr{rid}",
                }
            )
    return World(events_df, venues_df, cancellations_df, pd.DataFrame(rsvps))


def live_event_frame(world: World, now: datetime) -> pd.DataFrame:
    """The index's input computed the slow, obvious way: what ``read_live_events`` must match."""
    ev = world.events.merge(world.venues[["venue_id", "lat", "lng"]], on="venue_id")
    cancelled = world.cancellations[world.cancellations["cancelled_at"] <= now]["event_id"]
    ev = ev[(ev["start_at"] > now) & (ev["created_at"] <= now) & ~ev["event_id"].isin(cancelled)]
    start_us = (ev["start_at"] - pd.Timestamp("1970-01-01", tz="UTC")) // pd.Timedelta(microseconds=1)
    return pd.DataFrame(
        {"event_id": ev["event_id"], "start_us": start_us.astype("int64"), "lat": ev["lat"], "lng": ev["lng"]}
    ).reset_index(drop=True)


def random_events(
    n: int, centers: list[tuple[float, float, float]], now: datetime, days: float, seed: int
) -> pd.DataFrame:
    """``n`` events around ``centers`` (lat, lng, spread in degrees), starts uniform over ``days``."""
    rng = np.random.default_rng(seed)
    which = rng.integers(0, len(centers), n)
    c = np.asarray(centers, dtype=np.float64)[which]
    lat = np.clip(c[:, 0] + rng.normal(0, 1, n) * c[:, 2], -89.9, 89.9)
    lng = (c[:, 1] + rng.normal(0, 1, n) * c[:, 2] / np.cos(np.radians(c[:, 0])) + 540) % 360 - 180
    now_us = int(now.timestamp()) * 1_000_000
    # Whole minutes, so many events share a start and the (start, event_id) tie-break matters.
    start = now_us + (rng.integers(1, int(days * 24 * 60), n) * 60_000_000)
    return pd.DataFrame(
        {"event_id": [f"x{i:07d}" for i in range(n)], "start_us": start, "lat": lat, "lng": lng}
    )


SILVER_SCHEMAS = {
    "events": "event_id string, organizer_id string, venue_id string, series_id string, category string, "
    "title string, description string, timezone string, duration_minutes int, is_free boolean, "
    "price_cents int, capacity int, created_at timestamp, updated_at timestamp, start_at timestamp, "
    "start_was_ambiguous boolean, _record_id string",
    "venues": "venue_id string, name string, metro string, lat double, lng double, timezone string, "
    "created_at timestamp, _record_id string",
    "event_cancellations": "event_id string, cancelled_at timestamp, reason string, _record_id string",
    "rsvps": "rsvp_id string, user_id string, event_id string, request_id string, rsvp_at timestamp, "
    "_record_id string",
}


def write_silver(spark: Any, settings: Any, world: World) -> None:
    """Overwrite silver.{events, venues, event_cancellations, rsvps} under ``settings``'s lake."""
    frames = {
        "events": world.events,
        "venues": world.venues,
        "event_cancellations": world.cancellations,
        "rsvps": world.rsvps,
    }
    for name, frame in frames.items():
        columns = [c.split()[0] for c in SILVER_SCHEMAS[name].split(", ")]
        rows = [
            tuple(None if (v is None or (isinstance(v, float) and np.isnan(v))) else _py(v) for v in row)
            for row in frame[columns].itertuples(index=False, name=None)
        ]
        df = spark.createDataFrame(rows, SILVER_SCHEMAS[name])
        path = settings.lake.table_path("silver", name)
        df.write.format("delta").mode("overwrite").option("overwriteSchema", "true").save(path)


def _py(v: object) -> object:
    if isinstance(v, pd.Timestamp):
        return v.to_pydatetime()
    if isinstance(v, np.generic):
        return v.item()
    return v
