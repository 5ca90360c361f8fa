"""The simulator writes the landing contract exactly and reproduces the design's phenomena.

Effects are measured back from the landing files alone (plus ``GroundTruth`` for the
counterfactual denominators), the way an analyst would, never from the simulator's internals:

* distance bands: RSVPs per band divided by what the same impressions would give if the user
  stood at the venue (``GroundTruth.p_rsvp(..., lat=venue, lng=venue)``), normalised to 0-2 mi;
* friend lift: RSVPs per friends-going bucket divided by what the same impressions would give
  with no friends going, normalised to 0 friends; friends going is recomputed point in time
  from the landing friendships and RSVPs;
* follow-through: attended / RSVPed for free and paid events that were not cancelled.

Tolerance (stated once, used everywhere): a measured ratio must be within
``max(10% of the target, 3 standard errors)``, the standard error coming from the Poisson count
of RSVPs the ground truth expects in the compared buckets. The far bands (20-40, 40+ miles)
get few RSVPs at demo size, so for them the 3-SE term dominates; the near bands and every
friend bucket are held to the 10% band.
"""

from __future__ import annotations

import io
import json
import math
import re
import zoneinfo
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from contracts.landing import ENTITIES, ID_PATTERN, LandingEntity
from simulator import GroundTruth, SimulationConfig, SimulationSummary, simulate

DEMO = SimulationConfig()
SMALL = SimulationConfig(users=300, days=5)
REL_TOL = 0.10
N_SIGMA = 3.0
MAX_RSVP_DELAY_S = 1800  # an RSVP lands at most 30 minutes after the impression that caused it

_INSTANT = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")
_LOCAL = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}$")
_PATH = re.compile(r"^(?P<entity>[a-z_]+)/delivered=(?P<hour>\d{4}-\d{2}-\d{2}T\d{2})/part-\d+\.jsonl$")
_ZONES = zoneinfo.available_timezones()


# --------------------------------------------------------------------------- landing reader


def _kind_ok(kind: str, value: Any) -> bool:
    if kind in ("string", "id", "instant", "local_datetime", "zone"):
        return isinstance(value, str)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "double":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "string_list":
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    raise AssertionError(kind)


def _local_exists(local: str, zone: str) -> bool:
    naive = datetime.fromisoformat(local)
    aware = naive.replace(tzinfo=zoneinfo.ZoneInfo(zone))
    return aware.astimezone(UTC).astimezone(zoneinfo.ZoneInfo(zone)).replace(tzinfo=None) == naive


def quarantine_reason(line: str, entity: LandingEntity) -> str | None:
    """An independent reading of landing_schema: None if valid, else why it is rejected."""
    try:
        rec = json.loads(line)
    except json.JSONDecodeError:
        return "truncated_json"
    if not isinstance(rec, dict):
        return "truncated_json"
    if set(rec) - set(entity.field_names):
        return "unknown_field"
    present = {f.name: rec[f.name] for f in entity.fields if rec.get(f.name) is not None}
    for f in entity.fields:
        if f.name not in present:
            if f.required:
                return "missing_required_field"
            continue
        if not _kind_ok(f.kind, present[f.name]):
            return "wrong_type"
    for f in entity.fields:
        value = present.get(f.name)
        if value is None:
            continue
        if (f.min is not None and value < f.min) or (f.max is not None and value > f.max):
            return "out_of_range"
        if f.allowed and value not in f.allowed:
            return "not_allowed"
        if f.kind == "zone" and value not in _ZONES:
            return "invalid_zone"
        if f.kind == "id" and not re.match(ID_PATTERN, value):
            return "invalid_id"
        if f.kind == "instant" and not _INSTANT.match(value):
            return "instant_without_offset" if _LOCAL.match(value) else "wrong_type"
        if f.kind == "local_datetime" and not _LOCAL.match(value):
            return "wrong_type"
    locals_ = [f.name for f in entity.fields if f.kind == "local_datetime" and f.name in present]
    zones = [f.name for f in entity.fields if f.kind == "zone" and f.name in present]
    for name in locals_:
        if zones and not _local_exists(present[name], present[zones[0]]):
            return "nonexistent_local_time"
    return None


@dataclass
class EntityLines:
    """What one entity's landing folder holds, split by validity."""

    lines: int
    valid_lines: list[str]
    valid_hours: list[str]
    reasons: Counter[str]
    malformed_keys: set[tuple[Any, ...]]
    files: int
    bad_paths: list[str]

    @cached_property
    def first_delivered(self) -> pd.Series:
        """Earliest delivered hour of each distinct valid line, in first-seen order."""
        line_code, lines = pd.factorize(pd.Series(self.valid_lines, dtype=object))
        hour_code, hours = pd.factorize(pd.Series(self.valid_hours, dtype=object), sort=True)
        first = np.full(len(lines), len(hours), dtype=np.int64)
        np.minimum.at(first, line_code, hour_code)
        return pd.Series(np.asarray(hours, dtype=object)[first], index=pd.Index(lines, dtype=object))

    @cached_property
    def frame(self) -> pd.DataFrame:
        """Distinct valid records (byte-identical redeliveries collapse), in first-seen order."""
        if not len(self.first_delivered):
            return pd.DataFrame()
        text = "\n".join(self.first_delivered.index)
        return pd.read_json(io.StringIO(text), lines=True, dtype=False, convert_dates=False)


def read_landing(root: Path) -> dict[str, EntityLines]:
    out: dict[str, EntityLines] = {}
    for name, entity in ENTITIES.items():
        el = EntityLines(0, [], [], Counter(), set(), 0, [])
        for path in sorted((root / name).rglob("*")):
            if not path.is_file():
                continue
            rel = path.relative_to(root).as_posix()
            match = _PATH.match(rel)
            if not match or match["entity"] != name:
                el.bad_paths.append(rel)
                continue
            el.files += 1
            for line in path.read_text(encoding="utf-8").splitlines():
                el.lines += 1
                reason = quarantine_reason(line, entity)
                if reason is None:
                    el.valid_lines.append(line)
                    el.valid_hours.append(match["hour"])
                    continue
                el.reasons[reason] += 1
                try:
                    rec = json.loads(line)
                    el.malformed_keys.add(tuple(rec.get(k) for k in entity.key))
                except json.JSONDecodeError:
                    pass
        out[name] = el
    return out


def _seconds(values: pd.Series) -> np.ndarray:
    return (
        pd.to_datetime(values, utc=True)
        .dt.tz_convert(None)
        .to_numpy()
        .astype("datetime64[s]")
        .astype(np.int64)
    )


def _latest(frame: pd.DataFrame, entity: str) -> pd.DataFrame:
    e = ENTITIES[entity]
    return frame.sort_values(e.version_field).drop_duplicates(list(e.key), keep="last")


def _haversine_km(lat1: Any, lng1: Any, lat2: Any, lng2: Any) -> np.ndarray:
    p1, p2 = np.radians(lat1), np.radians(lat2)
    a = (
        np.sin((p2 - p1) / 2) ** 2
        + np.cos(p1) * np.cos(p2) * np.sin(np.radians(np.asarray(lng2) - np.asarray(lng1)) / 2) ** 2
    )
    return 2 * 6371.0088 * np.arcsin(np.sqrt(a))


# --------------------------------------------------------------------------- fixtures


@dataclass
class Run:
    landing: Path
    truth: Path
    summary: SimulationSummary
    lines: dict[str, EntityLines]
    truth_model: GroundTruth


def simulate_and_read(config: SimulationConfig, base: Path) -> Run:
    summary = simulate(config, base / "landing", base / "truth")
    return Run(
        landing=base / "landing",
        truth=base / "truth",
        summary=summary,
        lines=read_landing(base / "landing"),
        truth_model=GroundTruth.load(base / "truth"),
    )


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return simulate_and_read(DEMO, tmp_path_factory.mktemp("demo"))


@dataclass
class Observed:
    """Impressions labelled from the landing data, with point-in-time friend counts."""

    imps: pd.DataFrame
    measurable: np.ndarray  # impressions whose outcome only depended on p_rsvp


@pytest.fixture(scope="module")
def observed(demo: Run) -> Observed:
    return observe(demo)


def observe(demo: Run) -> Observed:
    """Label impressions and recompute friends going from the landing files alone."""
    t = {name: el.frame for name, el in demo.lines.items()}
    imps = t["impressions"].copy()
    imps["t"] = _seconds(imps["served_at"])
    rsvps = t["rsvps"].copy()
    rsvps["t_r"] = _seconds(rsvps["rsvp_at"])
    events = _latest(t["events"], "events")
    venues = t["venues"].set_index("venue_id")
    users = _latest(t["users"], "users").set_index("user_id")

    # Label: the RSVP that names this impression's request.
    fed = rsvps.dropna(subset=["request_id"])[["request_id", "user_id", "event_id"]].assign(y=1)
    imps = imps.merge(fed, on=["request_id", "user_id", "event_id"], how="left")
    imps["y"] = imps["y"].fillna(0).astype(int)

    # Friends going at the impression instant, from friendships and RSVPs only.
    fr = t["friendships"]
    edges = pd.concat(
        [
            fr.rename(columns={"user_id": "u", "friend_id": "f"}),
            fr.rename(columns={"friend_id": "u", "user_id": "f"}),
        ]
    )[["u", "f", "created_at"]]
    edges["fc"] = _seconds(edges["created_at"])
    going = rsvps[["user_id", "event_id", "t_r"]].rename(columns={"user_id": "f"}).merge(edges, on="f")
    cand = imps[["impression_id", "user_id", "event_id", "t"]].merge(
        going.rename(columns={"u": "user_id"}), on=["user_id", "event_id"]
    )
    cand = cand[(cand["t_r"] < cand["t"]) & (cand["fc"] <= cand["t"])]
    counts = cand.groupby("impression_id").size()
    imps["friends"] = imps["impression_id"].map(counts).fillna(0).astype(int)

    ev = events.set_index("event_id")
    imps["venue_lat"] = venues.loc[ev.loc[imps["event_id"], "venue_id"], "lat"].to_numpy()
    imps["venue_lng"] = venues.loc[ev.loc[imps["event_id"], "venue_id"], "lng"].to_numpy()
    imps["miles"] = (
        _haversine_km(
            users.loc[imps["user_id"], "home_lat"].to_numpy(),
            users.loc[imps["user_id"], "home_lng"].to_numpy(),
            imps["venue_lat"],
            imps["venue_lng"],
        )
        / 1.609344
    )

    # Outcomes that were not up to p_rsvp: cancelled events, the same user's other RSVP to
    # the event landing before this impression could, and seats running out.
    cancelled = set(t["event_cancellations"]["event_id"])
    own = rsvps.set_index(["user_id", "event_id"])
    key = pd.MultiIndex.from_frame(imps[["user_id", "event_id"]])
    other_t = own["t_r"].reindex(key).to_numpy()
    other_req = own["request_id"].reindex(key).to_numpy()
    rsvped_elsewhere = (
        ~np.isnan(other_t)
        & (other_req != imps["request_id"].to_numpy())
        & (other_t < imps["t"].to_numpy() + MAX_RSVP_DELAY_S)
    )
    ordered = rsvps.sort_values("t_r", kind="stable")
    seat = ordered.groupby("event_id").cumcount().to_numpy() + 1
    last_seat = seat == ordered["event_id"].map(ev["capacity"]).to_numpy()
    sellout = ordered.loc[last_seat].set_index("event_id")["t_r"]
    sold = imps["event_id"].map(sellout).to_numpy(dtype=float)
    near_sellout = ~np.isnan(sold) & (imps["t"].to_numpy() + MAX_RSVP_DELAY_S >= sold)
    measurable = ~imps["event_id"].isin(cancelled).to_numpy() & ~rsvped_elsewhere & ~near_sellout

    at = imps["t"].to_numpy().astype("datetime64[s]").astype("datetime64[ns]")
    gt = demo.truth_model
    u, e = imps["user_id"].to_numpy(), imps["event_id"].to_numpy()
    imps["p"] = gt.p_rsvp(u, e, at, imps["friends"].to_numpy())
    imps["p_at_venue"] = gt.p_rsvp(
        u, e, at, imps["friends"].to_numpy(), lat=imps["venue_lat"], lng=imps["venue_lng"]
    )
    imps["p_alone"] = gt.p_rsvp(u, e, at, np.zeros(len(imps), dtype=int))
    return Observed(imps=imps, measurable=measurable)


def _within(measured: float, target: float, expected_a: float, expected_b: float) -> tuple[bool, float]:
    """Ratio-of-ratios check; the SE combines the Poisson noise of both buckets."""
    se = target * math.sqrt(1.0 / max(expected_a, 1e-9) + 1.0 / max(expected_b, 1e-9))
    tol = max(REL_TOL * target, N_SIGMA * se)
    return abs(measured - target) <= tol, tol


# --------------------------------------------------------------------------- determinism


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_same_seed_is_byte_identical_and_another_seed_is_not(tmp_path: Path) -> None:
    a = simulate(SMALL, tmp_path / "a" / "landing", tmp_path / "a" / "truth")
    b = simulate(SMALL, tmp_path / "b" / "landing", tmp_path / "b" / "truth")
    c = simulate(
        SimulationConfig(users=SMALL.users, days=SMALL.days, seed=SMALL.seed + 1),
        tmp_path / "c" / "landing",
        tmp_path / "c" / "truth",
    )
    tree_a, tree_b, tree_c = (_tree(tmp_path / x / "landing") for x in "abc")
    assert tree_a and tree_a == tree_b
    assert a.to_dict() == b.to_dict()
    assert tree_c != tree_a
    assert c.to_dict()["entities"] != a.to_dict()["entities"]


def test_refuses_to_mix_runs_in_one_landing_root(tmp_path: Path) -> None:
    simulate(SMALL, tmp_path / "landing", tmp_path / "truth")
    with pytest.raises(FileExistsError):
        simulate(SMALL, tmp_path / "landing", tmp_path / "truth")
    simulate(SMALL, tmp_path / "landing", tmp_path / "truth", overwrite=True)


# --------------------------------------------------------------------------- the contract


def test_landing_files_follow_the_schema_and_the_dirt_is_counted_exactly(demo: Run) -> None:
    manifest = json.loads((demo.truth / "manifest.json").read_text())
    assert manifest == demo.summary.to_dict()
    for name, el in demo.lines.items():
        s = demo.summary.entities[name]
        assert not el.bad_paths, el.bad_paths[:3]
        assert el.files == s.files
        assert el.lines == s.lines_written, name
        # Every malformed line is one the summary announced, for the announced reason.
        assert dict(el.reasons) == {r: n for r, n in s.malformed.items() if n}, name
        # Valid lines = clean records + byte-identical redeliveries.
        assert len(el.valid_lines) == s.generated + s.duplicates, name
        assert len(set(el.valid_lines)) == s.generated, name
        frame = el.frame
        if len(frame):
            assert list(frame.columns) == list(ENTITIES[name].field_names), name
            keys = set(map(tuple, frame[list(ENTITIES[name].key)].to_numpy().tolist()))
            assert not (keys & el.malformed_keys), f"{name}: a malformed line reuses a clean key"
            versions = frame[[*ENTITIES[name].key, ENTITIES[name].version_field]]
            assert not versions.duplicated().any(), f"{name}: two clean records share key+version"
    totals = Counter[str]()
    for s in demo.summary.entities.values():
        totals.update(s.malformed)
    # At demo size every kind of dirt the brief lists is present somewhere.
    assert {
        "truncated_json",
        "missing_required_field",
        "wrong_type",
        "out_of_range",
        "not_allowed",
        "invalid_zone",
        "nonexistent_local_time",
    } <= {r for r, n in totals.items() if n}
    assert sum(s.duplicates for s in demo.summary.entities.values()) > 0


def test_late_records_arrive_after_their_on_time_hour(demo: Run) -> None:
    start_hour = demo.summary.window_start[:13]
    for name, el in demo.lines.items():
        if not el.valid_lines:
            continue
        happened = pd.to_datetime(el.frame[ENTITIES[name].version_field], utc=True)
        # An hourly export delivers the hour that just closed; older history comes first thing.
        next_hour = (happened.dt.floor("h") + pd.Timedelta(hours=1)).dt.strftime("%Y-%m-%dT%H")
        on_time = next_hour.where(next_hour > start_hour, start_hour).to_numpy()
        first = el.first_delivered.to_numpy()
        assert (first >= on_time).all(), f"{name}: delivered before it happened"
        assert (first > on_time).sum() == demo.summary.entities[name].late, name


def test_dst_fall_back_hour_events_are_present(demo: Run) -> None:
    events = _latest(demo.lines["events"].frame, "events")
    ambiguous = []
    for local, zone, event_id in zip(
        events["start_local"], events["timezone"], events["event_id"], strict=True
    ):
        naive = datetime.fromisoformat(local)
        tz = zoneinfo.ZoneInfo(zone)
        if naive.replace(tzinfo=tz, fold=0).utcoffset() != naive.replace(tzinfo=tz, fold=1).utcoffset():
            ambiguous.append((event_id, zone, naive))
    assert len(ambiguous) == demo.summary.facts["ambiguous_start_events"] >= 1
    zones = {z for _, z, _ in ambiguous}
    assert any(z.startswith("America/") for z in zones) and any(z.startswith("Europe/") for z in zones)
    # The hidden truth resolved each to its first occurrence (the pre-transition offset).
    truth = pd.read_parquet(demo.truth / "events.parquet").set_index("event_id")
    for event_id, zone, naive in ambiguous:
        first = naive.replace(tzinfo=zoneinfo.ZoneInfo(zone), fold=0).astimezone(UTC)
        assert truth.loc[event_id, "start_at"] == pd.Timestamp(first)


# --------------------------------------------------------------------------- behaviour


def test_friend_counts_and_probabilities_match_the_ground_truth(demo: Run, observed: Observed) -> None:
    logged = pd.read_parquet(demo.truth / "impressions.parquet").set_index("impression_id")
    imps = observed.imps.set_index("impression_id")
    logged = logged.loc[imps.index]
    assert (imps["friends"].to_numpy() == logged["friends_going"].to_numpy()).all()
    np.testing.assert_allclose(imps["p"].to_numpy(), logged["p_rsvp"].to_numpy(), rtol=1e-9)
    # Low base rate: even at 11.2x the probability stays well below 1.
    assert imps["p"].max() < 0.8
    assert (imps["friends"] >= 3).sum() > 500


def test_distance_bands_reproduce_the_design_decay(demo: Run, observed: Observed) -> None:
    imps = observed.imps[observed.measurable]
    edges = [0, 2, 5, 10, 20, 40, np.inf]
    band = np.digitize(imps["miles"], edges[1:-1], right=False)
    targets = DEMO.distance_band_factors
    rsvps = np.bincount(band, weights=imps["y"], minlength=6)
    at_venue = np.bincount(band, weights=imps["p_at_venue"], minlength=6)
    expected = np.bincount(band, weights=imps["p"], minlength=6)
    rate = (rsvps / at_venue) / (rsvps[0] / at_venue[0])
    report = []
    for b in range(1, 6):
        ok, tol = _within(rate[b], targets[b], expected[b], expected[0])
        report.append((b, round(rate[b], 4), targets[b], round(tol, 4), int(rsvps[b])))
        assert ok, report
    assert all(rate[b] > rate[b + 1] for b in range(4)), report


def test_friend_lift_reproduces_the_design(demo: Run, observed: Observed) -> None:
    imps = observed.imps[observed.measurable]
    bucket = np.minimum(imps["friends"].to_numpy(), 3)
    rsvps = np.bincount(bucket, weights=imps["y"], minlength=4)
    alone = np.bincount(bucket, weights=imps["p_alone"], minlength=4)
    expected = np.bincount(bucket, weights=imps["p"], minlength=4)
    lift = (rsvps / alone) / (rsvps[0] / alone[0])
    report = []
    for k in range(1, 4):
        ok, tol = _within(lift[k], DEMO.friend_lifts[k], expected[k], expected[0])
        report.append((k, round(lift[k], 3), DEMO.friend_lifts[k], round(tol, 3), int(rsvps[k])))
        assert ok, report


def test_follow_through_free_vs_paid_and_distance(demo: Run) -> None:
    t = {n: el.frame for n, el in demo.lines.items()}
    att = _latest(t["attendance"], "attendance")
    events = _latest(t["events"], "events").set_index("event_id")
    cancelled = set(t["event_cancellations"]["event_id"])
    att = att[~att["event_id"].isin(cancelled)]
    free = events.loc[att["event_id"], "is_free"].to_numpy(bool)
    attended = att["attended"].to_numpy(bool)
    assert abs(attended[free].mean() - 0.41) <= 0.05
    assert abs(attended[~free].mean() - 0.88) <= 0.04
    # Tickets are scanned, free events are geofenced.
    assert (att["source"].to_numpy()[free] == "geofence").all()
    assert (att["source"].to_numpy()[~free] == "ticket_scan").all()
    # Consistent with the ground truth within 3 SE, for each half.
    p = demo.truth_model.p_attend_given_rsvp(att["user_id"].to_numpy(), att["event_id"].to_numpy())
    for half in (free, ~free):
        se = math.sqrt(float((p[half] * (1 - p[half])).sum()))
        assert abs(attended[half].sum() - p[half].sum()) <= N_SIGMA * se
    # Distance lowers follow-through: far free RSVPs flake more than near ones.
    users = _latest(t["users"], "users").set_index("user_id")
    venues = t["venues"].set_index("venue_id")
    vid = events.loc[att["event_id"], "venue_id"]
    miles = (
        _haversine_km(
            users.loc[att["user_id"], "home_lat"].to_numpy(),
            users.loc[att["user_id"], "home_lng"].to_numpy(),
            venues.loc[vid, "lat"].to_numpy(),
            venues.loc[vid, "lng"].to_numpy(),
        )
        / 1.609344
    )
    near, far = free & (miles < 5), free & (miles >= 10)
    assert far.sum() > 50 and attended[far].mean() < attended[near].mean()


def test_activity_is_heavy_tailed(demo: Run) -> None:
    t = {n: el.frame for n, el in demo.lines.items()}
    active = set(t["impressions"]["user_id"])
    per_user = t["rsvps"]["user_id"].value_counts()
    counts = np.array([per_user.get(u, 0) for u in active])
    with_any = counts[counts > 0]
    assert 0.33 <= (counts == 0).mean() <= 0.49  # design: ~41% of monthly actives RSVP nothing
    assert 2 <= np.median(with_any) <= 4  # design: the median user has ~3
    assert np.quantile(with_any, 0.99) >= 5 * np.median(with_any)
    onboarded = _latest(t["users"], "users")["onboarding_categories"].map(
        lambda v: isinstance(v, list) and len(v) > 0
    )
    assert 0.2 <= onboarded.mean() <= 0.5


def test_feed_logging_policy_and_exploration_slot(demo: Run) -> None:
    imps = demo.lines["impressions"].frame
    explore = imps[imps["is_exploration"]]
    assert (imps["exploration_kind"].notna() == imps["is_exploration"]).all()
    assert (explore["position"] == DEMO.slots_per_request).mean() > 0.95
    assert (explore["surface"] == "home_feed").all()
    share_random = (explore["exploration_kind"] == "random").mean()
    assert 0.4 <= share_random <= 0.6
    per_request = imps[imps["surface"] == "home_feed"].groupby("request_id").size()
    assert per_request.max() == DEMO.slots_per_request and per_request.median() == DEMO.slots_per_request
    assert (imps["surface"] == "near_you_this_weekend").sum() > 0
    assert set(imps["model_version"]) == {DEMO.model_version}
    # One impression of an event per request, and nothing shown after it starts or is cancelled.
    assert not imps.duplicated(["request_id", "event_id"]).any()
    events = _latest(demo.lines["events"].frame, "events").set_index("event_id")
    truth = pd.read_parquet(demo.truth / "events.parquet").set_index("event_id")
    served = pd.to_datetime(imps["served_at"], utc=True).to_numpy()
    assert (served < truth.loc[imps["event_id"], "start_at"].to_numpy()).all()
    cancelled_at = truth.loc[imps["event_id"], "cancelled_at"]
    assert not (served >= cancelled_at.to_numpy()).any()
    assert len(events) == len(truth)


def test_supply_side_phenomena(demo: Run) -> None:
    t = {n: el.frame for n, el in demo.lines.items()}
    events = _latest(t["events"], "events").set_index("event_id")
    seats = t["rsvps"]["event_id"].value_counts()
    capacity = events.loc[seats.index, "capacity"]
    assert (seats <= capacity).all()  # RSVPs stop once full
    assert (seats == capacity).sum() >= 3  # and some events do sell out
    snaps = t["capacity_snapshots"].sort_values("snapshot_at")
    last = snaps.groupby("event_id")["seats_taken"].last()
    assert (last == seats.reindex(last.index)).all()
    assert snaps.groupby("event_id")["seats_taken"].apply(lambda s: s.is_monotonic_increasing).all()
    cancelled = t["event_cancellations"]["event_id"].nunique() / len(events)
    assert 0.01 <= cancelled <= 0.035  # design: ~2%
    series_share = events["series_id"].notna().mean()
    assert 0.17 <= series_share <= 0.28  # design: ~22% of events are series instances
    attended = t["attendance"]["attended"].sum()
    assert 0.08 <= len(t["ratings"]) / attended <= 0.16  # design: ~12% of attendees rate
    assert len(t["rsvps"]) > 2000 and attended > 1000  # the demo has thousands of both


def test_attendance_lands_7_to_17_days_after_the_recommendation(demo: Run) -> None:
    t = {n: el.frame for n, el in demo.lines.items()}
    rsvps = t["rsvps"]
    served = t["impressions"].drop_duplicates("request_id").set_index("request_id")["served_at"]
    recommended = pd.to_datetime(rsvps["request_id"].map(served), utc=True).fillna(
        pd.to_datetime(rsvps["rsvp_at"], utc=True)
    )
    att = _latest(t["attendance"], "attendance").set_index(["user_id", "event_id"])
    observed = pd.to_datetime(
        att.loc[pd.MultiIndex.from_frame(rsvps[["user_id", "event_id"]]), "observed_at"], utc=True
    ).to_numpy()
    delay_days = (observed - recommended.to_numpy()) / pd.Timedelta(days=1)
    assert len(att) == len(rsvps)  # every RSVP gets an attendance record
    assert (delay_days >= 7).all()
    assert ((delay_days >= 7) & (delay_days <= 17)).mean() >= 0.9  # later only for far-off events
    # Nobody can be observed at an event before it is over (or called off).
    truth = pd.read_parquet(demo.truth / "events.parquet").set_index("event_id")
    happened = truth[["end_at", "cancelled_at"]].min(axis=1)
    assert (observed > happened.loc[rsvps["event_id"]].to_numpy()).all()


def test_references_resolve_to_delivered_records(demo: Run) -> None:
    t = {n: el.frame for n, el in demo.lines.items()}
    users, events = set(t["users"]["user_id"]), set(t["events"]["event_id"])
    assert set(t["friendships"]["user_id"]) | set(t["friendships"]["friend_id"]) <= users
    assert (t["friendships"]["user_id"] < t["friendships"]["friend_id"]).all()
    assert set(t["events"]["organizer_id"]) <= set(t["organizers"]["organizer_id"])
    assert set(t["events"]["venue_id"]) <= set(t["venues"]["venue_id"])
    assert set(t["events"]["series_id"].dropna()) <= set(t["series"]["series_id"])
    for name in ("impressions", "rsvps", "attendance", "ratings"):
        assert set(t[name]["user_id"]) <= users, name
    for name in (
        "impressions",
        "rsvps",
        "attendance",
        "ratings",
        "capacity_snapshots",
        "event_cancellations",
    ):
        assert set(t[name]["event_id"]) <= events, name
    assert set(t["rsvps"]["request_id"].dropna()) <= set(t["impressions"]["request_id"])
    assert t["rsvps"]["request_id"].isna().any()  # some RSVPs come from outside the feed
    zones = dict(zip(t["venues"]["venue_id"], t["venues"]["timezone"], strict=True))
    assert (t["events"]["venue_id"].map(zones) == t["events"]["timezone"]).all()
    assert (t["events"]["updated_at"] >= t["events"]["created_at"]).all()
