import numpy as np
import pytest

from models.calibration import SamplingCorrection, SegmentCalibrators, fit_segment_calibrators, logit, sigmoid
from models.metrics import ece


def test_twenty_percent_injection_turns_030_into_0255_and_back() -> None:
    # Design: injecting 20% of the negatives at random, a true 0.30 comes out as 0.255.
    injected = SamplingCorrection(keep_rate=1.0, injected_per_negative=0.25)
    trained = sigmoid(logit(0.30) - np.log(injected.odds_factor))
    assert trained == pytest.approx(0.255, abs=5e-4)
    assert injected.apply(trained) == pytest.approx(0.30)


def test_downsampling_is_the_same_identity_with_the_sign_flipped() -> None:
    down = SamplingCorrection(keep_rate=0.1)
    trained = sigmoid(logit(0.01) - np.log(down.odds_factor))  # training saw 10x fewer negatives
    assert trained > 0.01
    assert down.apply(trained) == pytest.approx(0.01)


def test_correction_is_exact_on_simulated_sampling() -> None:
    rng = np.random.default_rng(0)
    true_p = rng.uniform(0.01, 0.5, size=400_000)
    y = rng.random(len(true_p)) < true_p
    keep = (y | (rng.random(len(y)) < 0.3)).astype(bool)  # keep 30% of negatives
    # The empirical rate among kept rows at a given true p is what a perfect model would learn.
    bins = np.digitize(true_p, np.linspace(0.01, 0.5, 20))
    learned = np.array([y[keep & (bins == b)].mean() for b in np.unique(bins)])
    truth = np.array([true_p[bins == b].mean() for b in np.unique(bins)])
    corrected = SamplingCorrection(keep_rate=0.3).apply(learned)
    assert np.max(np.abs(corrected - truth)) < 0.01
    assert np.max(np.abs(learned - truth)) > 0.1  # uncorrected it is badly off


def test_segment_calibrators_fix_a_miscalibrated_segment_and_round_trip_as_data() -> None:
    rng = np.random.default_rng(1)
    n = 20_000
    seg = np.where(rng.random(n) < 0.5, "free", "paid")
    true_p = rng.uniform(0.05, 0.6, n)
    y = rng.random(n) < true_p
    raw = np.where(seg == "free", true_p * 1.6, true_p * 0.7).clip(0, 1)  # over- and under-confident
    cal = fit_segment_calibrators(raw, y, seg)
    assert set(cal.maps) == {"free", "paid"}
    assert ece(y, raw) > 0.05
    assert ece(y, cal(raw, seg)) < 0.02
    back = SegmentCalibrators.from_dict(cal.to_dict())
    assert np.allclose(back(raw, seg), cal(raw, seg))


def test_thin_segments_fall_back_to_the_global_map() -> None:
    rng = np.random.default_rng(2)
    p = rng.uniform(size=1000)
    y = rng.random(1000) < p
    seg = np.array(["big"] * 990 + ["tiny"] * 10)
    cal = fit_segment_calibrators(p, y, seg, min_rows=200)
    assert "tiny" not in cal.maps
    assert np.allclose(cal(p[-10:], seg[-10:]), cal.fallback(p[-10:]))


def test_isotonic_maps_keep_the_ranking_between_their_blocks() -> None:
    """A staircase would tie every score in a block; the centered map keeps them apart and still
    averages each block to its observed rate (what isotonic calibration is for)."""
    rng = np.random.default_rng(3)
    raw = rng.uniform(0, 0.2, 50_000)
    y = rng.random(50_000) < np.sqrt(raw)  # monotone, badly miscalibrated
    cal = fit_segment_calibrators(raw, y, np.full(raw.shape, "all"))
    p = cal(raw, np.full(raw.shape, "all"))
    assert len(np.unique(p)) > 0.9 * len(raw)
    assert np.all(np.diff(p[np.argsort(raw)]) >= 0)
    assert ece(y, p) < 0.01 < ece(y, raw)
