"""The evaluation table: the champion beside baselines, on the same requests (design: "Metrics").

Two views of the newest p_rsvp training set's temporal test slice:

* **Logged**: the impressions each test request actually showed, graded 3/2/1/0 from what
  happened (rated well / attended / RSVPed but no-show / nothing) -> NDCG@25; and ECE against
  the ground truth's probabilities (P(RSVP and attend) for the champion, P(RSVP) for rsvp_only).
* **Catalog**: for a sample of those requests, every event live in the user's metro at that
  instant (what retrieval would hand the ranker), features joined point-in-time through Feast.
  Each model picks its top 25; the simulator's ground truth prices each pick, giving expected
  RSVPs and expected attendances per 25-slot feed, and Recall@25 of the RSVPs that came from the
  uniformly random half of slot 25 (the only unbiased labels).

Models: ``champion`` (p_rsvp x p_attend, both registry champions), ``champion_first_stage``
(the same, ranking only what serving's first stage keeps: per request the best tenth of the
candidates, at least 2 x 25, by the p_rsvp head's first trees, as 1,500 of 15,000 at full
density), ``rsvp_only`` (the same p_rsvp head alone), ``popularity`` (RSVPs the event had so far,
point in time), ``random``, and ``oracle`` (the ground truth's own P(attend), the ceiling). Two
diagnostics put one head beside the other's true probability (``rsvp_head_x_true_attend``,
``true_rsvp_x_attend_head``): how much of the gap to the oracle each head accounts for.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import pandas as pd

from conf import Settings
from models import metrics
from models.compiled import FIRST_STAGE_KEEP
from models.heads import Scorer, to_model_frame
from pipelines.training.examples import KEY_COLUMNS
from pipelines.training.report import logged_grades
from pipelines.training.sets import read_training_set, split_training_set, training_set_description
from published.registry import load_head

log = logging.getLogger(__name__)

MODELS = (
    "champion",
    "champion_first_stage",
    "rsvp_only",
    "popularity",
    "random",
    "rsvp_head_x_true_attend",
    "true_rsvp_x_attend_head",
    "oracle",
)
Progress = Callable[[str, int, int], None]


class Oracle(Protocol):
    """The true probabilities behind a history: the simulator's hidden ground truth
    (``simulator.truth.GroundTruth``). Real traffic has none; it is graded by the online experiment."""

    def p_rsvp(
        self,
        user_ids: npt.ArrayLike,
        event_ids: npt.ArrayLike,
        at: Any,
        friends_going: npt.ArrayLike,
        lat: npt.ArrayLike | None = None,
        lng: npt.ArrayLike | None = None,
    ) -> np.ndarray: ...

    def p_attend_given_rsvp(
        self,
        user_ids: npt.ArrayLike,
        event_ids: npt.ArrayLike,
        lat: npt.ArrayLike | None = None,
        lng: npt.ArrayLike | None = None,
    ) -> np.ndarray: ...


def _oracle(truth: Oracle, frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """True P(RSVP | shown) and P(attend | RSVP) at each row's instant, from the request position."""
    friends = pd.to_numeric(frame["friends_going"], errors="coerce").fillna(0).to_numpy()
    at = pd.to_datetime(frame["event_timestamp"], utc=True)
    p_r = truth.p_rsvp(
        frame["user_id"], frame["event_id"], at, friends, lat=frame["request_lat"], lng=frame["request_lng"]
    )
    p_a = truth.p_attend_given_rsvp(
        frame["user_id"], frame["event_id"], lat=frame["request_lat"], lng=frame["request_lng"]
    )
    return np.asarray(p_r), np.asarray(p_a)


def model_scores(
    frame: pd.DataFrame, scorer: Scorer, truth: Oracle, seed: int, first_stage_share: float
) -> dict[str, np.ndarray]:
    """Each model's ranking score for each row of a model frame that also carries keys and context;
    ``first_stage_share`` is serving's cut: the share of the candidates its first stage keeps."""
    s = scorer.score(frame)
    p_r, p_a = _oracle(truth, frame)
    rng = np.random.default_rng(seed)
    popularity = pd.to_numeric(frame["rsvp_count"], errors="coerce").fillna(0).to_numpy()
    return {
        "champion": s["score"],
        "champion_first_stage": first_stage_cut(frame, scorer, s["score"], first_stage_share),
        "rsvp_only": s["p_rsvp"],
        # Ties (most events have few RSVPs) broken at random, not by row order.
        "popularity": popularity + 0.01 * rng.random(len(frame)),
        "random": rng.random(len(frame)),
        # Which head holds the champion back: each head beside the other's true probability.
        "rsvp_head_x_true_attend": s["p_rsvp"] * p_a,
        "true_rsvp_x_attend_head": p_r * s["p_attend"],
        "oracle": p_r * p_a,
        "_p_rsvp_true": p_r,
        "_p_attend_true": p_a,
    }


def first_stage_cut(
    frame: pd.DataFrame, scorer: Scorer, score: np.ndarray, share: float, k: int = 25
) -> np.ndarray:
    """``score`` where serving's first stage would keep the row, -inf where it cuts it: per
    request, the best ``max(2k, share x candidates)`` by the p_rsvp head's first stage."""
    if scorer.rsvp is None:
        return score
    first = scorer.rsvp.first_stage_raw(frame)
    by_request = pd.Series(first).groupby(frame["request_id"].to_numpy())
    rank = by_request.rank(method="first", ascending=False).to_numpy()
    keep = np.maximum(2 * k, np.ceil(share * by_request.transform("size").to_numpy()))
    return np.where(rank <= keep, score, -np.inf)


def _candidates(settings: Settings, requests: pd.DataFrame, horizon: timedelta) -> pd.DataFrame:
    """Every event live in the request user's metro at the request instant, within the horizon."""
    from pipelines.spark import get_spark
    from pipelines.training.examples import event_context

    as_of = requests["event_timestamp"].max().to_pydatetime() + timedelta(seconds=1)
    events = event_context(get_spark(settings), settings, as_of).toPandas()
    t = requests[["request_id", "user_id", "user_metro", "event_timestamp", *REQUEST]].rename(
        columns={"user_metro": "metro"}
    )
    pairs = t.merge(events, on="metro", how="inner")
    ts = pairs["event_timestamp"].map(lambda v: v.timestamp()).to_numpy()
    live = (
        (pairs["event_created_ts"].to_numpy() <= ts)
        & (pairs["start_ts"].to_numpy() > ts)
        & (pairs["start_ts"].to_numpy() <= ts + horizon.total_seconds())
        & ~(pairs["cancelled_ts"].to_numpy(dtype=float, na_value=np.inf) <= ts)
    )
    return pairs[live].reset_index(drop=True)


REQUEST = ("request_lat", "request_lng", "request_ts", "request_utc_offset_min")


def _top_k(frame: pd.DataFrame, score: np.ndarray, k: int) -> np.ndarray:
    ranks = pd.Series(score).groupby(frame["request_id"].to_numpy()).rank(method="first", ascending=False)
    return ranks.to_numpy() <= k


def evaluate(
    settings: Settings,
    truth: Oracle,
    requests: int = 150,
    k: int = 25,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """The table ``turnout evaluate`` prints: per model NDCG@25, expected attendance/RSVPs, ECE."""
    from pipelines.feast_store import get_store
    from pipelines.training.retrieval import historical_features
    from published.feature_store import service_feature_names

    def step(label: str, i: int) -> None:
        if progress:
            progress(label, i, 4)

    cfg = settings.training
    rsvp_head, attend_head = load_head(settings, "rsvp"), load_head(settings, "attend")
    if rsvp_head is None or attend_head is None:
        missing = [h for h, v in (("rsvp", rsvp_head), ("attend", attend_head)) if v is None]
        raise LookupError(f"no champion for head(s) {missing}: train them first (`turnout train --head ...`)")
    champion = Scorer(rsvp_head[0], attend_head[0])

    step("logged test slice", 0)
    frame, version = read_training_set(settings, "rsvp")
    split = split_training_set(settings, frame, training_set_description(settings, "rsvp", version))
    test = frame[split.test].reset_index(drop=True)
    # Serving's funnel: its first stage keeps prefilter_keep of up to max_candidates (a tenth).
    first_stage = FIRST_STAGE_KEEP / settings.index.max_candidates
    logged = model_scores(test, champion, truth, cfg.seed, first_stage)
    grades = logged_grades(test)
    table: dict[str, dict[str, Any]] = {}
    for name in MODELS:
        df = pd.DataFrame({"request_id": test["request_id"], "s": logged[name], "grade": grades})
        table[name] = {"ndcg_at_25": metrics.ndcg_at_k(df, "s", k=k), "ece": None}
    # Against the true probabilities, not the logged outcomes: the test slice is the newest
    # impressions, whose attendance is not observed yet (it lands days after the event), so
    # ``attended`` there is all zeros and an ECE against it would only restate the mean score.
    table["champion"]["ece"] = metrics.ece(logged["oracle"], logged["champion"])
    table["rsvp_only"]["ece"] = metrics.ece(logged["_p_rsvp_true"], logged["rsvp_only"])

    step("catalog candidates", 1)
    reqs = _sample_requests(test, requests, cfg.seed)
    cands = _candidates(settings, reqs, timedelta(days=settings.index.horizon_days))
    step("point-in-time features", 2)
    store = get_store(settings)
    features = service_feature_names(store.get_feature_service("p_rsvp_v1"))
    entity = cands[["request_id", *KEY_COLUMNS[1:], *REQUEST]]
    joined = historical_features(settings, entity.drop(columns="request_id"), "p_rsvp_v1")
    model_frame = pd.concat(
        [
            entity.reset_index(drop=True),
            to_model_frame(joined, features, settings.index.embedding_dim).reset_index(drop=True),
        ],
        axis=1,
    )

    step("ranking", 3)
    scores = model_scores(model_frame, champion, truth, cfg.seed + 1, first_stage)
    p_r, p_a = scores["_p_rsvp_true"], scores["_p_attend_true"]
    explored = _random_slot_rsvps(test, reqs)
    n_req = model_frame["request_id"].nunique()
    for name in MODELS:
        top = _top_k(model_frame, scores[name], k)
        table[name]["expected_rsvps_at_25"] = float(p_r[top].sum() / n_req)
        table[name]["expected_attendance_at_25"] = float((p_r * p_a)[top].sum() / n_req)
        hit = model_frame.loc[top, ["request_id", "event_id"]]
        found = explored.merge(hit, on=["request_id", "event_id"], how="left", indicator=True)
        table[name]["recall_at_25_random_slot"] = (
            float((found["_merge"] == "both").mean()) if len(found) else None
        )
    summary = {
        "models": table,
        "requests": int(n_req),
        "candidates_per_request": float(len(model_frame) / max(n_req, 1)),
        "logged_test_impressions": len(test),
        "random_slot_rsvps": len(explored),
        "training_set_version": version,
        "champion_versions": {"rsvp": str(rsvp_head[1].version), "attend": str(attend_head[1].version)},
        "evaluated_at": datetime.now(UTC).isoformat(),
    }
    log.info("evaluation: %s", summary)
    return summary


def _sample_requests(test: pd.DataFrame, n: int, seed: int) -> pd.DataFrame:
    """Test requests to rank the whole catalog for: every one with a random-slot RSVP, then random."""
    from pipelines.training.examples import REQUEST_COLUMNS

    first = test.sort_values("event_timestamp").groupby("request_id", as_index=False).first()
    with_explore = set(test.loc[(test["exploration_kind"] == "random") & (test["rsvped"] == 1), "request_id"])
    rng = np.random.default_rng(seed)
    rest = first[~first["request_id"].isin(with_explore)]
    chosen = pd.concat(
        [
            first[first["request_id"].isin(with_explore)],
            rest.iloc[rng.permutation(len(rest))[: max(n - len(with_explore), 0)]],
        ]
    )
    return chosen[["request_id", "user_id", "user_metro", "event_timestamp", *REQUEST_COLUMNS]]


def _random_slot_rsvps(test: pd.DataFrame, requests: pd.DataFrame) -> pd.DataFrame:
    mask = (
        (test["exploration_kind"] == "random")
        & (test["rsvped"] == 1)
        & test["request_id"].isin(requests["request_id"])
    )
    return test.loc[mask, ["request_id", "event_id"]].drop_duplicates()
