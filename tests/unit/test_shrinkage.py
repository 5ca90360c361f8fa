import numpy as np

from pipelines.features.shrinkage import MAX_PSEUDOCOUNT, fit_pseudocount, shrink


def _beta_binomial(m: float, p: float, groups: int, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    rates = rng.beta(p * m, (1 - p) * m, size=groups)
    trials = np.full(groups, n)
    return rng.binomial(trials, rates), trials


def test_fit_recovers_the_pseudocount_of_a_beta_binomial() -> None:
    for true_m in (5.0, 20.0, 200.0):
        k, n = _beta_binomial(true_m, 0.1, groups=4000, n=50, seed=1)
        fitted = fit_pseudocount(k, n)
        assert 0.7 * true_m < fitted < 1.4 * true_m, (true_m, fitted)


def test_no_between_group_variance_means_full_shrinkage() -> None:
    rng = np.random.default_rng(2)
    n = np.full(2000, 40)
    k = rng.binomial(n, 0.2)  # every group has the same true rate
    assert fit_pseudocount(k, n) > 500
    assert fit_pseudocount([3], [10]) == MAX_PSEUDOCOUNT


def test_shrink_keeps_n_over_n_plus_m_of_its_own_estimate() -> None:
    # 200 observations at m=20 keep ~91%; 3 observations keep 3/23 = 13% (the design's numbers).
    rich = shrink(100, 200, prior=0.0, m=20)
    assert np.isclose(rich, 0.5 * 200 / 220)
    sparse = shrink(3, 3, prior=0.0, m=20)
    assert np.isclose(sparse, 3 / 23)


def test_the_fit_does_not_depend_on_the_order_the_groups_arrive_in() -> None:
    # Spark hands the groups over in a different order on a cluster than in local mode; a float
    # sum in that order changed the fit in the last bit, and gold (and the model) with it.
    rng = np.random.default_rng(0)
    n = rng.integers(1, 500, 5000).astype(float)
    k = rng.binomial(n.astype(int), rng.beta(2, 30, 5000)).astype(float)
    fits = {fit_pseudocount(k[order], n[order]) for order in (rng.permutation(5000) for _ in range(30))}
    assert len(fits) == 1
