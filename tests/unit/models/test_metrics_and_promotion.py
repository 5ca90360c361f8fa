import numpy as np
import pandas as pd
import pytest

from models.metrics import ece, grade, ndcg_at_k, recall_at_k
from models.promotion import CandidateReport, Gates, should_promote


def test_grades_follow_the_design_scale() -> None:
    g = grade(rsvped=[0, 1, 1, 1], attended=[0, 0, 1, 1], rating=[np.nan, np.nan, np.nan, 5])
    assert list(g) == [0, 1, 2, 3]


def test_ndcg_is_one_for_the_ideal_order_and_lower_for_the_reverse() -> None:
    df = pd.DataFrame(
        {"request_id": ["r"] * 4, "grade": [3, 2, 1, 0], "good": [4, 3, 2, 1], "bad": [1, 2, 3, 4]}
    )
    assert ndcg_at_k(df, "good") == pytest.approx(1.0)
    bad = ndcg_at_k(df, "bad")
    # Hand computed: DCG = 0/1 + 1/log2(3) + 3/2 + 7/log2(5); IDCG = 7 + 3/log2(3) + 1/2.
    dcg = 1 / np.log2(3) + 3 / 2 + 7 / np.log2(5)
    idcg = 7 + 3 / np.log2(3) + 0.5
    assert bad == pytest.approx(dcg / idcg)


def test_recall_at_k_counts_positives_in_the_top_k() -> None:
    df = pd.DataFrame({"request_id": ["r"] * 30, "s": np.arange(30)[::-1], "y": [0] * 29 + [1]})
    assert recall_at_k(df, "s", "y", k=25) == 0.0
    df.loc[0, "y"] = 1
    assert recall_at_k(df, "s", "y", k=25) == 0.5


def test_ece_is_small_when_calibrated_and_large_when_not() -> None:
    rng = np.random.default_rng(0)
    p = rng.uniform(0, 0.5, 50_000)
    y = rng.random(len(p)) < p
    assert ece(y, p) < 0.01
    assert ece(y, p * 1.5) > 0.05


GATES = Gates(tolerance=0.01, max_ece=0.02)


def _report(**kw: object) -> CandidateReport:
    base = dict(quality=0.30, ece=0.01, score_std=0.05, schema_hash="abc", inputs_validated=True)
    return CandidateReport(**{**base, **kw})  # type: ignore[arg-type]


def test_a_good_challenger_is_promoted() -> None:
    d = should_promote(_report(quality=0.295), _report(), GATES, serving_schema_hash="abc")
    assert d.promote and d.reason == "all gates passed"


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"quality": 0.28}, "NDCG@25"),
        ({"quality": 0.28, "quality_name": "AUC"}, "AUC 0.2800 worse than champion"),
        ({"ece": 0.05}, "ECE"),
        ({"score_std": 0.0}, "collapsed"),
        ({"schema_hash": "xyz"}, "schema hash"),
        ({"inputs_validated": False}, "validation"),
    ],
)
def test_each_failed_gate_keeps_the_champion_and_says_why(change: dict, needle: str) -> None:
    d = should_promote(_report(**change), _report(), GATES, serving_schema_hash="abc")
    assert not d.promote and needle in d.reason


def test_nan_metrics_never_pass_a_gate() -> None:
    d = should_promote(_report(ece=float("nan")), None, GATES, serving_schema_hash="abc")
    assert not d.promote
