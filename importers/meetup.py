"""A public Meetup crawl (2013, ``../shared/data/meetup/``) mapped into turnout's landing schema.

Like the simulator, an importer is a stand-in for the platform: it knows only the landing schema
(``contracts.landing``) and writes JSONL files that the ordinary ingest -> gold -> index path reads
unchanged. What the crawl has, and how each landing field is filled:

* **users** (``mu-u-<member_id>``): home point as given; ``metro`` from the home's region
  (``sf_bay``, ``san_diego``, ``dfw``); no sign-up time in the crawl, so ``signup_at`` is the
  creation time of the first event the member RSVPed to (the earliest evidence of the account).
* **venues** (``mu-v-<hash>``): the crawl has no venue ids; a venue is a distinct (name, lat, lng).
  ``timezone`` is looked up from the coordinates (``timezonefinder``), ``created_at`` is the
  creation of its first event.
* **series** (``mu-s-<code>``): Meetup's recurring events have ids ``<series code><7-letter date
  code>`` (e.g. ``bbjx`` + ``pynqbgb``); every such id maps to series ``<series code>``, with a
  recurrence from the median gap between starts. Numeric ids are one-off events: no series.
* **organizers**: a series' group (``mu-o-<code>``); a one-off event's organizer is unknown and
  is taken to be its venue (``mu-o-v<hash>``). Reported.
* **events** (``mu-e-<event_id>``): start as venue-local wall time in the venue's zone. Unknown in
  the crawl and filled with a constant, each counted in the report: ``category`` (``community``),
  duration (120 min), free, capacity (1,000). 26,061 old San Diego events have no creation time:
  it is imputed as the start minus the median lead time of the events that have one, and counted.
* **rsvps** (``mu-r-<member>-<event>``): "yes" pairs without a time. ``rsvp_at`` is the event's
  start, the latest instant the RSVP can have been made: a point-in-time join then never sees an
  RSVP before it could be known (it sees some later than they were). ``request_id`` is absent
  (no feed led to them).
* **not in the crawl, not written**: impressions, attendance, ratings, capacity snapshots,
  cancellations, friendships. p_rsvp needs exposures and p_attend needs attendance; see
  ``bench/bench_meetup.py`` for the implicit-exposure mode the offline evaluation uses.

Everything lands in one delivery hour (the crawl's: ``DELIVERED``).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import numpy as np
import pandas as pd

# The crawl's newest event was created 2013-02-24T18:04:52Z: the export arrives the hour after.
DELIVERED: Final = datetime(2013, 2, 24, 19, tzinfo=UTC)
DATE_CODE_LEN: Final = 7
DEFAULTS: Final[dict[str, Any]] = {
    "category": "community",
    "duration_minutes": 120,
    "is_free": True,
    "price_cents": 0,
    "capacity": 1000,
}


@dataclass
class ImportReport:
    """What was written per entity, and what could not be mapped or had to be filled in."""

    written: dict[str, int] = field(default_factory=dict)
    skipped: Counter[str] = field(default_factory=Counter)
    filled: dict[str, int] = field(default_factory=dict)
    delivered: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "delivered": self.delivered,
            "written": dict(self.written),
            "skipped": dict(self.skipped),
            "filled": dict(self.filled),
        }


def region(lat: np.ndarray, lng: np.ndarray) -> np.ndarray:
    """The crawl's three regions by coordinates (its cities are in the Bay Area, San Diego
    County and Dallas-Fort Worth); ``other`` for the few points elsewhere."""
    lat, lng = np.asarray(lat, float), np.asarray(lng, float)
    out = np.full(len(lat), "other", dtype=object)
    out[(lat > 36.8) & (lat < 38.9) & (lng > -123.6) & (lng < -121.0)] = "sf_bay"
    out[(lat > 32.4) & (lat < 33.6) & (lng > -117.7) & (lng < -116.0)] = "san_diego"
    out[(lat > 31.8) & (lat < 34.0) & (lng > -98.5) & (lng < -95.8)] = "dfw"
    return out


def series_code(event_id: str) -> str | None:
    """``bbjx`` for ``bbjxpynqbgb``: a recurring event's series; None for a numeric (one-off) id."""
    if event_id.isdigit() or len(event_id) <= DATE_CODE_LEN:
        return None
    return event_id[:-DATE_CODE_LEN]


def _hash(*parts: object) -> str:
    return hashlib.sha1("\x1f".join(map(str, parts)).encode()).hexdigest()[:12]


def _iso(ts: pd.Series) -> pd.Series:
    return ts.dt.strftime("%Y-%m-%dT%H:%M:%SZ")


def _recurrence(starts: pd.Series) -> str:
    seconds = np.diff(np.sort(starts.to_numpy(dtype="datetime64[s]").astype(np.int64)))
    gaps = pd.Series(seconds / 86400.0)
    gap = float(gaps.median()) if len(gaps) else 7.0
    return "weekly" if gap <= 10 else "biweekly" if gap <= 20 else "monthly"


def read_crawl(source: Path) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The crawl's three files: events, members, rsvps (times parsed as UTC)."""
    events = pd.read_csv(source / "events.csv.gz", dtype={"event_id": str, "name": str, "venue_name": str})
    members = pd.read_csv(source / "members.csv.gz", dtype={"member_id": str})
    rsvps = pd.read_csv(source / "rsvps.csv.gz", dtype=str)
    for frame, cols in ((events, ("created_utc", "start_utc")), (members, ("split_utc",))):
        for c in cols:
            frame[c] = pd.to_datetime(frame[c], utc=True, format="ISO8601")
    return events, members, rsvps


def map_crawl(
    events: pd.DataFrame, members: pd.DataFrame, rsvps: pd.DataFrame, report: ImportReport
) -> dict[str, pd.DataFrame]:
    """The crawl as landing records, one frame per entity (columns = landing fields)."""
    from timezonefinder import TimezoneFinder

    ev = events.copy()
    unusable = ev["start_utc"].isna() | ev["venue_lat"].isna() | ev["venue_lon"].isna()
    report.skipped["events: no start or venue location"] += int(unusable.sum())
    ev = ev[~unusable].copy()
    ev["venue_name"] = ev["venue_name"].fillna("(unnamed venue)")
    ev["name"] = ev["name"].fillna("(untitled)")
    lead = (ev["start_utc"] - ev["created_utc"]).dropna()
    no_created = ev["created_utc"].isna()
    ev.loc[no_created, "created_utc"] = ev.loc[no_created, "start_utc"] - lead.median()
    report.filled["events.created_at (start - median lead time)"] = int(no_created.sum())
    for name in DEFAULTS:
        report.filled[f"events.{name} (constant {DEFAULTS[name]!r})"] = len(ev)

    # Venues: a distinct (name, lat, lng); zone from the coordinates.
    ev["venue_id"] = [
        f"mu-v-{_hash(n, a, b)}"
        for n, a, b in zip(ev["venue_name"], ev["venue_lat"], ev["venue_lon"], strict=True)
    ]
    venues = ev.groupby("venue_id", as_index=False).agg(
        name=("venue_name", "first"),
        lat=("venue_lat", "first"),
        lng=("venue_lon", "first"),
        created=("created_utc", "min"),
    )
    finder = TimezoneFinder()
    venues["timezone"] = [
        finder.timezone_at(lat=a, lng=b) for a, b in zip(venues["lat"], venues["lng"], strict=True)
    ]
    no_zone = venues["timezone"].isna()
    report.skipped["venues: no time zone at the coordinates"] += int(no_zone.sum())
    venues = venues[~no_zone]
    venues["metro"] = region(venues["lat"].to_numpy(), venues["lng"].to_numpy())
    before = len(ev)
    ev = ev.merge(venues[["venue_id", "timezone", "metro"]], on="venue_id", how="inner")
    report.skipped["events: venue without a time zone"] += before - len(ev)

    # Series and organizers.
    ev["code"] = ev["event_id"].map(series_code)
    recurring = ev[ev["code"].notna()]
    series = (
        recurring.groupby("code")
        .agg(
            title=("name", lambda s: s.mode().iloc[0]),
            created=("created_utc", "min"),
            metro=("metro", lambda s: s.mode().iloc[0]),
            recurrence=("start_utc", _recurrence),
        )
        .reset_index()
    )
    series["series_id"] = "mu-s-" + series["code"]
    series["organizer_id"] = "mu-o-" + series["code"]
    ev["series_id"] = [None if c is None else f"mu-s-{c}" for c in ev["code"]]
    ev["organizer_id"] = np.where(
        ev["code"].notna(),
        "mu-o-" + ev["code"].fillna(""),
        "mu-o-v" + ev["venue_id"].str.removeprefix("mu-v-"),
    )
    one_off = ev[ev["code"].isna()]
    report.filled["organizers: one-off event's venue taken as organizer"] = int(one_off["venue_id"].nunique())
    organizers = pd.concat(
        [
            series[["organizer_id", "title", "metro", "created"]].rename(columns={"title": "name"}),
            one_off.groupby("organizer_id", as_index=False).agg(
                name=("venue_name", "first"), metro=("metro", "first"), created=("created_utc", "min")
            ),
        ],
        ignore_index=True,
    )

    # Members and their RSVPs.
    ids = set(ev["event_id"])
    known = rsvps["event_id"].isin(ids)
    report.skipped["rsvps: event not mapped"] += int((~known).sum())
    rs = rsvps[known].merge(ev[["event_id", "start_utc", "created_utc"]], on="event_id")
    first_seen = rs.groupby("member_id")["created_utc"].min()
    users = members.copy()
    users["signup"] = users["member_id"].map(first_seen)
    no_rsvp = users["signup"].isna()
    report.skipped["users: no mapped RSVP (no sign-up evidence)"] += int(no_rsvp.sum())
    users = users[~no_rsvp]
    report.filled["users.signup_at (first RSVPed event's creation)"] = len(users)
    report.filled["rsvps.rsvp_at (the event's start)"] = len(rs)

    start_local = [
        ts.tz_convert(zone).strftime("%Y-%m-%dT%H:%M:%S")
        for ts, zone in zip(ev["start_utc"], ev["timezone"], strict=True)
    ]
    return {
        "users": pd.DataFrame(
            {
                "user_id": "mu-u-" + users["member_id"],
                "metro": region(users["home_lat"].to_numpy(), users["home_lon"].to_numpy()),
                "home_lat": users["home_lat"],
                "home_lng": users["home_lon"],
                "signup_at": _iso(users["signup"]),
                "updated_at": _iso(users["signup"]),
            }
        ),
        "organizers": pd.DataFrame(
            {
                "organizer_id": organizers["organizer_id"],
                "name": organizers["name"],
                "metro": organizers["metro"],
                "created_at": _iso(organizers["created"]),
            }
        ),
        "venues": pd.DataFrame(
            {
                "venue_id": venues["venue_id"],
                "name": venues["name"],
                "metro": venues["metro"],
                "lat": venues["lat"],
                "lng": venues["lng"],
                "timezone": venues["timezone"],
                "created_at": _iso(venues["created"]),
            }
        ),
        "series": pd.DataFrame(
            {
                "series_id": series["series_id"],
                "organizer_id": series["organizer_id"],
                "title": series["title"],
                "recurrence": series["recurrence"],
                "created_at": _iso(series["created"]),
            }
        ),
        "events": pd.DataFrame(
            {
                "event_id": "mu-e-" + ev["event_id"],
                "organizer_id": ev["organizer_id"],
                "venue_id": ev["venue_id"],
                "series_id": ev["series_id"],
                "category": DEFAULTS["category"],
                "title": ev["name"],
                "start_local": start_local,
                "timezone": ev["timezone"],
                "duration_minutes": DEFAULTS["duration_minutes"],
                "is_free": DEFAULTS["is_free"],
                "price_cents": DEFAULTS["price_cents"],
                "capacity": DEFAULTS["capacity"],
                "created_at": _iso(ev["created_utc"]),
                "updated_at": _iso(ev["created_utc"]),
            }
        ),
        "rsvps": pd.DataFrame(
            {
                "rsvp_id": "mu-r-" + rs["member_id"] + "-" + rs["event_id"],
                "user_id": "mu-u-" + rs["member_id"],
                "event_id": "mu-e-" + rs["event_id"],
                "rsvp_at": _iso(rs["start_utc"]),
            }
        ),
    }


def _records(frame: pd.DataFrame) -> Iterable[dict[str, Any]]:
    for row in frame.to_dict(orient="records"):
        yield {
            str(k): v for k, v in row.items() if v is not None and not (isinstance(v, float) and np.isnan(v))
        }


def write_landing(
    entities: dict[str, pd.DataFrame], landing: Path, delivered: datetime = DELIVERED
) -> dict[str, int]:
    """One JSONL file per entity under ``<landing>/<entity>/delivered=<hour>/``; refuses to
    overwrite a delivery (landing files are append-only)."""
    hour = delivered.astimezone(UTC).strftime("%Y-%m-%dT%H")
    written = {}
    for name, frame in entities.items():
        folder = landing / name / f"delivered={hour}"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / "part-0.jsonl"
        if path.exists():
            raise FileExistsError(f"{path} exists: landing files are append-only (import into a fresh home)")
        with open(path, "w", encoding="utf-8", newline="\n") as fh:
            for record in _records(frame):
                fh.write(json.dumps(record, ensure_ascii=False) + "\n")
        written[name] = len(frame)
    return written


def import_meetup(source: Path, landing: Path, members: int | None = None) -> ImportReport:
    """Read the crawl at ``source``, map it, write it to ``landing``; ``members`` keeps only the
    first N members (and the events and RSVPs that reach them) for a small run."""
    events, people, rsvps = read_crawl(source)
    if members is not None:
        people = people.head(members)
        rsvps = rsvps[rsvps["member_id"].isin(people["member_id"])]
        events = events[events["event_id"].isin(rsvps["event_id"])]
    report = ImportReport(delivered=DELIVERED.isoformat())
    report.written = write_landing(map_crawl(events, people, rsvps, report), landing)
    return report
