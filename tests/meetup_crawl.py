"""A tiny crawl in the shape of ``../shared/data/meetup`` (same files, columns and id styles), so
the importer and the evaluation are tested on any machine, with or without the real data."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd

CITIES = {"Dallas": (32.78, -96.80), "San Diego": (32.72, -117.16)}
LETTERS = "bcdfghjklmnpqrstvwxz"


def write_crawl(
    folder: Path, members: int = 40, series: int = 16, one_offs: int = 120, seed: int = 3
) -> Path:
    rng = np.random.default_rng(seed)
    start = datetime(2011, 1, 3, tzinfo=UTC)
    events = []
    for s in range(series):
        city = list(CITIES)[s % 2]
        lat, lng = CITIES[city]
        vlat, vlng = lat + rng.normal(0, 0.05), lng + rng.normal(0, 0.05)
        code = "".join(rng.choice(list(LETTERS), 4))
        first = start + timedelta(days=int(rng.integers(0, 60)), hours=18)
        for i in range(40):  # weekly for 40 weeks
            when = first + timedelta(weeks=i)
            date_code = "".join(rng.choice(list(LETTERS), 7))
            events.append(
                (
                    f"{code}{date_code}",
                    f"Series {s}",
                    when - timedelta(days=10),
                    when,
                    vlat,
                    vlng,
                    f"Hall {s}",
                    city,
                )
            )
    for i in range(one_offs):
        city = list(CITIES)[i % 2]
        lat, lng = CITIES[city]
        when = start + timedelta(days=int(rng.integers(0, 300)), hours=19)
        created = None if i % 10 == 0 else when - timedelta(days=14)  # some without a creation time
        events.append(
            (
                str(5_000_000 + i),
                f"One-off {i}",
                created,
                when,
                lat + rng.normal(0, 0.03),
                lng + rng.normal(0, 0.03),
                f"Cafe {i % 30}",
                city,
            )
        )
    ev = pd.DataFrame(
        events,
        columns=[
            "event_id",
            "name",
            "created_utc",
            "start_utc",
            "venue_lat",
            "venue_lon",
            "venue_name",
            "venue_city",
        ],
    )
    iso = "%Y-%m-%dT%H:%M:%SZ"
    ev["start_utc"] = pd.to_datetime(ev["start_utc"], utc=True).dt.strftime(iso)
    ev["created_utc"] = pd.to_datetime(ev["created_utc"], utc=True).dt.strftime(iso)
    people, rsvps = [], []
    for m in range(members):
        city = list(CITIES)[m % 2]
        lat, lng = CITIES[city]
        split = start + timedelta(days=int(rng.integers(150, 260)))
        people.append((str(100 + m), city, lat, lng, split.strftime(iso)))
        local = ev[ev["venue_city"] == city]
        favourite = local[local["name"].str.startswith("Series")]["name"].unique()
        liked = set(rng.choice(favourite, 2, replace=False)) if len(favourite) >= 2 else set()
        for row in local.itertuples():
            p = 0.5 if row.name in liked else 0.03
            if rng.random() < p:
                rsvps.append((str(100 + m), row.event_id))
    folder.mkdir(parents=True, exist_ok=True)
    ev.to_csv(folder / "events.csv.gz", index=False)
    pd.DataFrame(people, columns=["member_id", "city", "home_lat", "home_lon", "split_utc"]).to_csv(
        folder / "members.csv.gz", index=False
    )
    pd.DataFrame(rsvps, columns=["member_id", "event_id"]).to_csv(folder / "rsvps.csv.gz", index=False)
    return folder
