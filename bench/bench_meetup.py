"""Offline evaluation on real people: the 2013 Meetup crawl, per member at the member's split.

    python bench/bench_meetup.py [--source ../shared/data/meetup] [--members N] [--seed 0]

The crawl is read and mapped exactly as ``turnout import meetup`` maps it (``importers.meetup``:
the same event, venue and series ids, zones and imputed creation times). For each member, at the
member's ``split_utc`` (the instant T):

* **candidates** are what turnout's geo-time index (``published.geo_index``) retrieves for the
  member's home at T: events created by T, starting in (T, T + 21 d], within 40.23 km, soonest
  first, capped as in serving;
* **positives** are the member's "yes" RSVPs to events starting in (T, T + 21 d];
* a ranker orders the candidates; **recall@25** is the share of the member's positives in its
  top 25 (mean over members with at least one positive); **retrieval keeps** is the share of
  positives that are candidates at all (the ceiling for every ranker).

The crawl has no RSVP times: an RSVP counts as known at its event's start (``rsvp_at`` in the
import), so everything a ranker may use at T (popularity, the member's own history) comes from
events that *started* before T. Rankers, each scored on the same candidates:

* ``random`` (seeded), ``soonest`` (the index's own order), ``nearest``;
* ``popularity``: RSVPs (all members) to earlier events of the candidate's series (for a one-off
  event: its venue), started before T;
* ``own history``: the member's own RSVPs to earlier events of the series, then of the venue,
  then popularity to break ties;
* ``model behind the first-stage cut``: serving's funnel on real people: the best max(50, a
  tenth) of the candidates by a first stage distilled from the model (``models.heads.
  distill_first_stage``, as training distills p_rsvp's), then the model's order among them;
* ``model``: LightGBM on implicit exposures. The crawl has no impressions, so a training row is
  what retrieval returned for a member at an earlier instant t (every member's split minus 21,
  42, ... days), labelled by whether the member RSVPed; features are the rankers' signals plus
  distance, lead time and local start hour/weekday, all as of t. One model per calendar quarter
  of splits, trained only on rows whose 21-day label window ended before the quarter began, so
  no member's ranking sees anything after the member's split (``tests/unit/test_meetup_eval.py``
  truncates the crawl at a split and checks the ranking is unchanged).

Prints the import summary's counts, the recall table and the run's time.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from importers.meetup import ImportReport, map_crawl, read_crawl
from models.heads import FirstStage, distill_first_stage
from published.geo_index import GeoParams, build_geo_index

DEFAULT_SOURCE = Path(__file__).resolve().parents[2] / "shared" / "data" / "meetup"
HORIZON = timedelta(days=21)
K = 25
FEATURES = [
    "distance_km",
    "lead_days",
    "local_hour",
    "local_weekday",
    "is_recurring",
    "group_pop",
    "venue_pop",
    "own_group",
    "own_venue",
    "member_rsvps",
]
MODEL_PARAMS: dict[str, Any] = {
    "objective": "binary",
    "learning_rate": 0.05,
    "num_leaves": 31,
    "min_data_in_leaf": 50,
    "feature_fraction": 0.9,
    "verbose": -1,
    "seed": 7,
    "deterministic": True,
    "force_row_wise": True,
    "num_threads": 1,
}


class Counts:
    """How many RSVPs (with multiplicity) fall in group ``g`` with a start before ``t``: one sorted
    composite array and two binary searches per query, for any number of (g, t) pairs."""

    SHIFT = np.int64(2**32)

    def __init__(self, groups: np.ndarray, start_s: np.ndarray) -> None:
        self.keys = np.sort(groups.astype(np.int64) * self.SHIFT + start_s.astype(np.int64))

    def before(self, groups: np.ndarray, t_s: np.ndarray) -> np.ndarray:
        g = groups.astype(np.int64) * self.SHIFT
        return np.searchsorted(self.keys, g + t_s.astype(np.int64), "left") - np.searchsorted(
            self.keys, g, "left"
        )


@dataclass
class Crawl:
    """The mapped crawl as arrays the evaluation indexes into."""

    events: (
        pd.DataFrame
    )  # event_id, start_s, created_s, lat, lng, venue, group, recurring, local hour/weekday
    members: pd.DataFrame  # user_id, lat, lng, split_s
    rsvps: pd.DataFrame  # user, event (row positions), start_s
    group_pop: Counts
    venue_pop: Counts
    own_group: Counts
    own_venue: Counts
    member_total: Counts
    by_user: dict[int, tuple[np.ndarray, np.ndarray]]  # member -> (events RSVPed, their starts)


def load(
    source: Path, members: int | None = None, cutoff: datetime | None = None
) -> tuple[Crawl, ImportReport]:
    """Read and map the crawl; ``cutoff`` drops everything not knowable at that instant (events
    created after it, RSVPs to events starting after it): the leak test's truncated world."""
    events, people, rsvps = read_crawl(source)
    report = ImportReport()
    mapped = map_crawl(events, people, rsvps, report)
    ev = mapped["events"].reset_index(drop=True)
    venues = mapped["venues"].set_index("venue_id")
    start = pd.to_datetime(ev["start_local"]).dt.tz_localize(None)
    start_utc = pd.Series(
        [
            pd.Timestamp(s).tz_localize(z, ambiguous=True).tz_convert(UTC)
            for s, z in zip(start, ev["timezone"], strict=True)
        ]
    )
    frame = pd.DataFrame(
        {
            "event_id": ev["event_id"],
            "start_s": start_utc.map(lambda x: int(x.timestamp())).to_numpy(),
            "created_s": pd.to_datetime(ev["created_at"], utc=True)
            .map(lambda x: int(x.timestamp()))
            .to_numpy(),
            "lat": venues.loc[ev["venue_id"], "lat"].to_numpy(),
            "lng": venues.loc[ev["venue_id"], "lng"].to_numpy(),
            "venue": pd.factorize(ev["venue_id"])[0],
            "group": pd.factorize(ev["series_id"].fillna(ev["organizer_id"]))[0],
            "recurring": ev["series_id"].notna().to_numpy(),
            "local_hour": start.dt.hour.to_numpy(),
            "local_weekday": start.dt.weekday.to_numpy(),
        }
    )
    users = mapped["users"].reset_index(drop=True)
    split_of = dict(zip(people["member_id"], people["split_utc"], strict=True))
    split = [split_of[m] for m in users["user_id"].str.removeprefix("mu-u-")]
    member_frame = pd.DataFrame(
        {
            "user_id": users["user_id"],
            "lat": users["home_lat"].to_numpy(),
            "lng": users["home_lng"].to_numpy(),
            "split_s": np.array([int(x.timestamp()) for x in split], dtype=np.int64),
        }
    )
    pos = pd.Series(np.arange(len(frame)), index=frame["event_id"])
    upos = pd.Series(np.arange(len(member_frame)), index=member_frame["user_id"])
    rs = pd.DataFrame(
        {
            "user": upos.loc[mapped["rsvps"]["user_id"]].to_numpy(),
            "event": pos.loc[mapped["rsvps"]["event_id"]].to_numpy(),
        }
    )
    rs["start_s"] = frame["start_s"].to_numpy()[rs["event"]]
    if cutoff is not None:
        c = int(cutoff.timestamp())
        frame = frame.assign(
            created_s=np.where(frame["created_s"] <= c, frame["created_s"], np.iinfo(np.int64).max)
        )
        rs = rs[rs["start_s"] <= c]
    e_group, e_venue = frame["group"].to_numpy(), frame["venue"].to_numpy()
    n_groups, n_venues = int(e_group.max()) + 1, int(e_venue.max()) + 1
    u, e, s = rs["user"].to_numpy(), rs["event"].to_numpy(), rs["start_s"].to_numpy()
    crawl = Crawl(
        events=frame,
        members=member_frame,
        rsvps=rs,
        group_pop=Counts(e_group[e], s),
        venue_pop=Counts(e_venue[e], s),
        own_group=Counts(u.astype(np.int64) * n_groups + e_group[e], s),
        own_venue=Counts(u.astype(np.int64) * n_venues + e_venue[e], s),
        member_total=Counts(u, s),
        by_user={
            int(str(k)): (g["event"].to_numpy(), g["start_s"].to_numpy()) for k, g in rs.groupby("user")
        },
    )
    return crawl, report


def candidates_at(crawl: Crawl, member: int, t_s: int, params: GeoParams) -> tuple[np.ndarray, np.ndarray]:
    """Event row positions the geo index retrieves for ``member``'s home at ``t_s`` (and distances)."""
    ev = crawl.events
    lat, lng = float(crawl.members["lat"].to_numpy()[member]), float(crawl.members["lng"].to_numpy()[member])
    # A box that holds the whole 40.23 km disc (at these latitudes) keeps each build small; the
    # index answers the same on it as on every event.
    live = ev[
        (ev["created_s"] <= t_s)
        & (ev["start_s"] > t_s)
        & (ev["start_s"] <= t_s + params.horizon_days * 86400)
        & (ev["lat"].sub(lat).abs() < 0.6)
        & (ev["lng"].sub(lng).abs() < 0.8)
    ]
    empty = np.array([], dtype=np.int64), np.array([], dtype=float)
    if live.empty:
        return empty
    now = datetime.fromtimestamp(t_s, UTC)
    frame = pd.DataFrame(
        {
            "event_id": live.index.astype(str),
            "start_us": live["start_s"].to_numpy() * 1_000_000,
            "lat": live["lat"],
            "lng": live["lng"],
        }
    )
    found = build_geo_index(frame, now, params).query(lat, lng, now)
    return found.event_ids.astype(np.int64), np.asarray(found.distance_km, float)


def features(
    crawl: Crawl, member: int, t_s: int, events: np.ndarray, distance_km: np.ndarray
) -> pd.DataFrame:
    """Every ranker's signal for (member, candidate) as of ``t_s``: only events started before it."""
    ev = crawl.events
    n = len(events)
    t = np.full(n, t_s, dtype=np.int64)
    g, v = ev["group"].to_numpy()[events], ev["venue"].to_numpy()[events]
    n_groups, n_venues = int(ev["group"].max()) + 1, int(ev["venue"].max()) + 1
    return pd.DataFrame(
        {
            "distance_km": distance_km,
            "lead_days": (ev["start_s"].to_numpy()[events] - t_s) / 86400,
            "local_hour": ev["local_hour"].to_numpy()[events],
            "local_weekday": ev["local_weekday"].to_numpy()[events],
            "is_recurring": ev["recurring"].to_numpy()[events].astype(float),
            "group_pop": crawl.group_pop.before(g, t),
            "venue_pop": crawl.venue_pop.before(v, t),
            "own_group": crawl.own_group.before(np.int64(member) * n_groups + g, t),
            "own_venue": crawl.own_venue.before(np.int64(member) * n_venues + v, t),
            "member_rsvps": crawl.member_total.before(np.full(n, member), t),
        }
    )


def positives(crawl: Crawl, member: int, t_s: int) -> set[int]:
    events, starts = crawl.by_user.get(member, (np.array([], np.int64), np.array([], np.int64)))
    return set(events[(starts > t_s) & (starts <= t_s + int(HORIZON.total_seconds()))].tolist())


def quarter_start(t_s: int) -> int:
    d = datetime.fromtimestamp(t_s, UTC)
    return int(datetime(d.year, 3 * ((d.month - 1) // 3) + 1, 1, tzinfo=UTC).timestamp())


def training_rows(
    crawl: Crawl, params: GeoParams, windows: int, negatives: int, seed: int, members: int | None = None
) -> pd.DataFrame:
    """Implicit exposures: each member's candidates at split - 21 d x k (k = 1..windows), labelled
    by the member's RSVPs in the 21 days after; all positives, ``negatives`` sampled others."""
    frames = []
    for member, split_s in enumerate(crawl.members["split_s"].to_numpy()[:members]):
        for k in range(1, windows + 1):
            # Seeded per (member, instant): a row's sample never depends on other members' data.
            rng = np.random.default_rng([seed, member, k])
            t_s = int(split_s - k * HORIZON.total_seconds())
            events, dist = candidates_at(crawl, member, t_s, params)
            if not len(events):
                continue
            label = np.isin(events, list(positives(crawl, member, t_s)))
            keep = label | np.isin(np.arange(len(events)), rng.permutation(len(events))[:negatives])
            f = features(crawl, member, t_s, events[keep], dist[keep])
            f["label"], f["t_s"] = label[keep].astype(int), t_s
            frames.append(f)
    return pd.concat(frames, ignore_index=True)


@dataclass(frozen=True)
class QuarterModel:
    """One quarter's model and serving's first stage distilled from it."""

    booster: Any
    first_stage: FirstStage


def fit_models(rows: pd.DataFrame, splits: np.ndarray) -> dict[int, QuarterModel | None]:
    """One LightGBM per quarter of splits, on rows whose label window closed before it began."""
    import lightgbm as lgb

    models: dict[int, QuarterModel | None] = {}
    for q in sorted({quarter_start(int(s)) for s in splits}):
        train = rows[rows["t_s"] + HORIZON.total_seconds() <= q]
        if train["label"].sum() < 20:
            models[q] = None
            continue
        data = lgb.Dataset(train[FEATURES], label=train["label"])
        booster = lgb.train(MODEL_PARAMS, data, num_boost_round=150)
        models[q] = QuarterModel(
            booster, distill_first_stage(booster, FEATURES, train, seed=7, num_threads=1)
        )
    return models


def first_stage_keep(n: int) -> int:
    """Serving's cut at this candidate count: a tenth, never fewer than 2 x 25 (as the evaluation)."""
    return max(2 * K, int(np.ceil(0.1 * n)))


def rank(name: str, f: pd.DataFrame, rng: np.random.Generator, model: QuarterModel | None) -> np.ndarray:
    """Candidate order (indices into ``f``), best first."""
    n = len(f)
    if name == "random":
        return rng.permutation(n)
    if name == "soonest":
        return np.arange(n)
    if name == "nearest":
        return np.argsort(f["distance_km"].to_numpy(), kind="stable")
    if name == "popularity":
        return np.lexsort((np.arange(n), -f["venue_pop"].to_numpy(), -f["group_pop"].to_numpy()))
    if name == "own history":
        return np.lexsort(
            (np.arange(n), -f["group_pop"].to_numpy(), -f["own_venue"].to_numpy(), -f["own_group"].to_numpy())
        )
    if name == "model":
        if model is None:
            return rank("own history", f, rng, None)
        return np.argsort(-model.booster.predict(f[FEATURES]), kind="stable")
    if name == "model behind the first-stage cut":
        if model is None:
            return rank("own history", f, rng, None)
        keep = first_stage_keep(n)
        if n <= keep:
            return rank("model", f, rng, model)
        first = np.asarray(model.first_stage.booster.predict(f[model.first_stage.columns], raw_score=True))
        kept = np.sort(np.argpartition(-first, keep - 1)[:keep])
        return kept[np.argsort(-model.booster.predict(f.iloc[kept][FEATURES]), kind="stable")]
    raise ValueError(name)


RANKERS = [
    "random",
    "soonest",
    "nearest",
    "popularity",
    "own history",
    "model behind the first-stage cut",
    "model",
]


def evaluate(
    crawl: Crawl,
    params: GeoParams,
    models: dict[int, QuarterModel | None],
    seed: int,
    members: int | None = None,
) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    hits: dict[str, list[float]] = {r: [] for r in RANKERS}
    kept, total, members_with, cut = 0, 0, 0, 0
    sizes: list[int] = []
    for member, split_s in enumerate(crawl.members["split_s"].to_numpy()[:members]):
        truth = positives(crawl, member, int(split_s))
        if not truth:
            continue
        members_with += 1
        events, dist = candidates_at(crawl, member, int(split_s), params)
        total += len(truth)
        in_candidates = truth & set(events.tolist())
        kept += len(in_candidates)
        if not len(events):
            for r in RANKERS:
                hits[r].append(0.0)
            continue
        f = features(crawl, member, int(split_s), events, dist)
        model = models.get(quarter_start(int(split_s)))
        sizes.append(len(events))
        cut += len(events) > first_stage_keep(len(events))
        for r in RANKERS:
            top = set(events[rank(r, f, rng, model)[:K]].tolist())
            hits[r].append(len(top & truth) / len(truth))
    return {
        "members": len(crawl.members["split_s"].to_numpy()[:members]),
        "members_with_positives": members_with,
        "positives": total,
        "retrieval_keeps": kept / max(total, 1),
        "candidates_p50": float(np.median(sizes)) if sizes else 0.0,
        "members_cut": cut,
        "recall_at_25": {r: float(np.mean(h)) if h else 0.0 for r, h in hits.items()},
    }


def ranking_for(
    crawl: Crawl, member: int, params: GeoParams, windows: int, negatives: int, seed: int
) -> list[str]:
    """The model's top 25 for one member at the member's split (the leak test's probe)."""
    rows = training_rows(crawl, params, windows, negatives, seed)
    split_s = int(crawl.members["split_s"].to_numpy()[member])
    model = fit_models(rows, np.array([split_s]))[quarter_start(split_s)]
    events, dist = candidates_at(crawl, member, split_s, params)
    f = features(crawl, member, split_s, events, dist)
    order = rank("model", f, np.random.default_rng(seed), model)[:K]
    return crawl.events["event_id"].to_numpy()[events[order]].tolist()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    parser.add_argument("--members", type=int, default=None, help="first N members only (default: all)")
    parser.add_argument(
        "--windows", type=int, default=4, help="training instants per member before the split"
    )
    parser.add_argument("--negatives", type=int, default=30, help="sampled non-RSVPed candidates per instant")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    params = GeoParams()
    started = time.perf_counter()
    crawl, report = load(args.source)
    t_load = time.perf_counter() - started
    rows = training_rows(crawl, params, args.windows, args.negatives, args.seed, args.members)
    t_rows = time.perf_counter() - started - t_load
    models = fit_models(rows, crawl.members["split_s"].to_numpy())
    t_fit = time.perf_counter() - started - t_load - t_rows
    result = evaluate(crawl, params, models, args.seed, args.members)
    seconds = time.perf_counter() - started
    print(
        f"meetup crawl: {len(crawl.members):,} members ({result['members']:,} evaluated), {len(crawl.events):,} events, "
        f"{len(crawl.rsvps):,} RSVPs"
    )
    print(
        f"members with an RSVP in the 21 days after their split: {result['members_with_positives']:,} "
        f"({result['positives']:,} positives); retrieval keeps {result['retrieval_keeps']:.1%} of them; "
        f"candidates p50 {result['candidates_p50']:,.0f}, the first-stage cut binds for {result['members_cut']:,}"
    )
    print(
        f"model: {len(rows):,} implicit-exposure rows ({int(rows['label'].sum()):,} positive), "
        f"{sum(m is not None for m in models.values())} quarterly models\n"
    )
    print("| ranker | recall@25 |\n| --- | ---: |")
    for r, v in result["recall_at_25"].items():
        print(f"| {r} | {v:.4f} |")
    print(
        f"\nload + map {t_load:.0f} s, training rows {t_rows:.0f} s, fits {t_fit:.0f} s, total {seconds:.0f} s"
    )


if __name__ == "__main__":
    main()
