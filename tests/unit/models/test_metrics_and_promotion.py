import numpy as np
import pandas as pd
import pytest

from models.metrics import bootstrap_interval, ece, grade, ndcg_at_k, recall_at_k
from models.promotion import CandidateReport, Comparison, Gates, should_promote


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


def test_the_bootstrap_interval_covers_the_mean_as_often_as_it_says() -> None:
    """Over 200 samples of 120 paired differences with a known mean, the 95% interval holds the
    mean in about 95% of them and is about 2 x 1.96 standard errors wide."""
    rng = np.random.default_rng(1)
    covered, widths = 0, []
    for trial in range(200):
        diff = rng.normal(0.01, 0.13, 120)
        low, high = bootstrap_interval(
            lambda i, d=diff: float(d[i].mean()), len(diff), resamples=500, seed=trial
        )
        covered += low <= 0.01 <= high
        widths.append(high - low)
    assert 0.89 <= covered / 200 <= 0.99
    assert np.mean(widths) == pytest.approx(2 * 1.96 * 0.13 / np.sqrt(120), rel=0.1)


def test_the_bootstrap_interval_is_seeded_and_skips_undefined_draws() -> None:
    y = np.array([0] * 95 + [1] * 5)
    p = np.linspace(0, 1, 100)
    from models.metrics import auc

    first = bootstrap_interval(lambda i: auc(y[i], p[i]), 100, resamples=300, seed=3)
    assert first == bootstrap_interval(lambda i: auc(y[i], p[i]), 100, resamples=300, seed=3)
    assert np.isfinite(first).all()  # draws without a positive give nan AUCs and are left out
    assert np.isnan(bootstrap_interval(lambda i: 0.0, 1)).all()  # one unit: no interval


GATES = Gates(tolerance=0.01, max_ece=0.02)


def _report(**kw: object) -> CandidateReport:
    base = dict(ece=0.01, score_std=0.05, schema_hash="abc", inputs_validated=True)
    return CandidateReport(**{**base, **kw})  # type: ignore[arg-type]


def _versus(difference: float, half_width: float = 0.024) -> Comparison:
    return Comparison(0.72 + difference, 0.72, difference - half_width, difference + half_width, 110)


def test_a_challenger_within_the_noise_is_promoted() -> None:
    """The loop's refused v7: -0.0183 on 123 requests, 95% interval -0.0430 .. +0.0050. The point
    rule refused it at tolerance 0.01; the interval says it may be as good, so it passes."""
    d = should_promote(_report(), Comparison(0.7146, 0.7329, -0.0430, 0.0050, 123), GATES, "abc")
    assert d.promote and d.reason == "all gates passed"
    assert should_promote(_report(), None, GATES, "abc").promote  # no champion: nothing to compare


def test_a_challenger_clearly_worse_than_the_champion_is_refused() -> None:
    d = should_promote(_report(), _versus(-0.05), GATES, "abc")
    assert not d.promote
    assert "NDCG@25 0.6700 vs champion 0.7200: -0.0500, 95% interval -0.0740 .. -0.0260 over 110" in d.reason
    # The interval's upper end against -tolerance decides: just inside passes, just outside fails.
    assert should_promote(_report(), _versus(-0.033, 0.024), GATES, "abc").promote
    assert not should_promote(_report(), _versus(-0.035, 0.024), GATES, "abc").promote


@pytest.mark.parametrize(
    ("change", "versus", "needle"),
    [
        ({"quality_name": "AUC"}, _versus(-0.1), "AUC 0.6200 vs champion 0.7200"),
        ({}, Comparison(0.7, 0.7, float("nan"), float("nan"), 1), "NDCG@25"),  # unmeasurable: refused
        ({"ece": 0.05}, None, "ECE"),
        ({"score_std": 0.0}, None, "collapsed"),
        ({"schema_hash": "xyz"}, None, "schema hash"),
        ({"inputs_validated": False}, None, "validation"),
    ],
)
def test_each_failed_gate_keeps_the_champion_and_says_why(
    change: dict, versus: Comparison | None, needle: str
) -> None:
    d = should_promote(_report(**change), versus, GATES, serving_schema_hash="abc")
    assert not d.promote and needle in d.reason


def test_nan_metrics_never_pass_a_gate() -> None:
    d = should_promote(_report(ece=float("nan")), None, GATES, serving_schema_hash="abc")
    assert not d.promote
