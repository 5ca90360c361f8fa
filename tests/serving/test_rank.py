"""MMR and the organizer cap; the first-stage cut; parity of the serving path with LightGBM."""

from __future__ import annotations

import numpy as np
import pandas as pd

from serving.features import assemble, zone_offsets_min
from serving.feed import FeedRequest, serve_feed
from serving.rank import mmr_select, prefilter
from serving.synthetic import make_catalog, make_head, make_snapshot, make_state, make_world


def test_mmr_caps_organizers_and_spreads_categories() -> None:
    score = np.array([0.9, 0.89, 0.88, 0.87, 0.5, 0.49])
    org = np.array([1, 1, 1, 1, 2, 3])
    cat = np.array([0, 0, 0, 0, 0, 1])
    picks = mmr_select(score, org, cat, k=4, lam=0.5, max_per_organizer=2, pool=10)
    assert np.bincount(org[picks]).max() <= 2
    assert picks.tolist()[:2] == [0, 5]  # the second slot goes to a new organizer and category
    assert mmr_select(score, org, cat, k=4, lam=1.0, max_per_organizer=2, pool=10).tolist() == [0, 1, 4, 5]


def _frame(heads, n: int = 6000):
    world = make_world(n_events=n, n_users=5, seed=11)
    snap = world.snapshot
    rows = np.arange(len(snap), dtype=np.int64)
    columns = sorted({*heads[0].columns, *heads[1].columns, "is_free", "history_depth"})
    offsets = zone_offsets_min(snap.zones, world.now.timestamp())
    user = world.users["u00001"]
    x = assemble(snap, rows, columns, user, 40.72, -74.0, world.now.timestamp(), np.zeros(n), offsets)
    return pd.DataFrame(x, columns=columns)


def test_the_first_stage_keeps_the_full_models_top_25(heads) -> None:
    rsvp = make_head("rsvp", rounds=120, seed=5)
    x = _frame(heads)
    full = rsvp.predict(x) * heads[1].predict(x)
    kept = prefilter(x, rsvp, keep=600)
    assert len(kept) == 600
    best = np.argsort(-full)[:25]
    cut_best = kept[np.argsort(-full[kept])[:25]]
    # expected attendance of the top 25, by the full model, with and without the cut
    assert full[cut_best].sum() >= 0.99 * full[best].sum()
    # A cut by anything else loses attendance: the same share picked at random keeps far less.
    lucky = np.random.default_rng(0).choice(len(x), 600, replace=False)
    assert full[lucky[np.argsort(-full[lucky])[:25]]].sum() < 0.9 * full[best].sum()


def test_the_cut_keeps_the_best_of_a_modules_own_candidates_too(heads) -> None:
    """The weekend module ranks only its own candidates: its best by the first stage survive the
    cut even where the whole metro's best would not include them."""
    x = _frame(heads)
    raw = heads[0].first_stage_raw(x)
    weekend = raw < np.quantile(raw, 0.3)  # candidates the plain cut would all drop
    kept = prefilter(x, heads[0], keep=600, also=weekend, also_keep=40)
    plain = prefilter(x, heads[0], keep=600)
    assert not np.isin(np.flatnonzero(weekend), plain).any()
    extra = np.setdiff1d(kept, plain)
    assert len(extra) == 40 and weekend[extra].all()
    assert raw[extra].min() >= raw[weekend & ~np.isin(np.arange(len(x)), extra)].max()


def test_serving_scores_equal_lightgbms_own_predictions(world, heads) -> None:
    state = make_state(world, heads)
    result = serve_feed(state, FeedRequest("u00001", world.now, 40.72, -74.0, "parity"))
    x = _assembled(world, heads, [e.event_id for e in result.events[:24]])
    raw = heads[0].booster.predict(x[heads[0].columns].to_numpy())
    expected = heads[0].calibrators(heads[0].correction.apply(raw), _segments(x))
    np.testing.assert_allclose([e.p_rsvp for e in result.events[:24]], expected, rtol=0, atol=1e-12)


def _assembled(world, heads, event_ids) -> pd.DataFrame:
    snap = world.snapshot
    rows = snap.rows_for(np.asarray(event_ids))
    user = world.users["u00001"]
    going = world.availability.friends_going(list(user.friends))
    friends = np.array([going.get(e, 0) for e in event_ids], dtype=float)
    columns = sorted({*heads[0].columns, *heads[1].columns, "is_free", "history_depth"})
    offsets = zone_offsets_min(snap.zones, world.now.timestamp())
    x = assemble(snap, rows, columns, user, 40.72, -74.0, world.now.timestamp(), friends, offsets)
    return pd.DataFrame(x, columns=columns)


def _segments(x: pd.DataFrame) -> np.ndarray:
    from models.heads import segments

    return segments(x)


def test_snapshot_lookup_is_exact() -> None:
    catalog = make_catalog(50, pd.Timestamp("2026-11-05T15:00Z").to_pydatetime())
    snap = make_snapshot(catalog, pd.Timestamp("2026-11-05T15:00Z").to_pydatetime())
    ids = np.array(["e000007", "nope", "e000049"])
    assert snap.rows_for(ids).tolist() == [7, -1, 49]
