"""The content tower: deterministic, plain-format, and it learns taste from co-RSVPs alone."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from models.content_tower import (
    TowerArtifact,
    TowerConfig,
    Vocabulary,
    co_rsvp_pairs,
    embed_events,
    group_similarity,
    load_tower,
    save_tower,
    train_content_tower,
)
from tests.index_synthetic import World, make_world

GROUPS = ("series_id", "organizer_id", "category")


@pytest.fixture(scope="module")
def world() -> World:
    return make_world(seed=0)


@pytest.fixture(scope="module")
def trained(world: World) -> TowerArtifact:
    artifact, report = train_content_tower(world.events, co_rsvp_pairs(world.rsvps), TowerConfig())
    assert report.last_epoch_loss < report.first_epoch_loss
    return artifact


def margins(artifact: TowerArtifact, events: pd.DataFrame) -> dict[str, tuple[float, float]]:
    vectors = embed_events(artifact, events)
    return {g: group_similarity(vectors, events[g]) for g in GROUPS}


def test_vectors_are_64_dim_unit_length(trained: TowerArtifact, world: World) -> None:
    v = embed_events(trained, world.events.head(50))
    assert v.shape == (50, 64) and v.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    # An event with words the tower has never seen still gets a vector (hashed buckets).
    unseen = pd.DataFrame({"title": ["Zyxx qwolp"], "description": [None], "category": ["no-such"]})
    assert np.isfinite(embed_events(trained, unseen)).all()


def test_same_series_organizer_and_category_sit_closer_than_random_pairs(
    trained: TowerArtifact, world: World
) -> None:
    """The numbers in the closing note come from this test (seed 0, 1,500 events, 10 epochs)."""
    got = margins(trained, world.events)
    series, organizer, category = (got[g][0] - got[g][1] for g in GROUPS)
    print({g: (round(s, 3), round(r, 3), round(s - r, 3)) for g, (s, r) in got.items()})
    assert series > 0.5
    assert organizer > 0.4
    assert category > 0.03


def test_the_signal_comes_from_co_rsvps_not_from_shared_words(world: World, trained: TowerArtifact) -> None:
    """Same architecture, same words, partners shuffled: the organizer margin collapses."""
    pairs = co_rsvp_pairs(world.rsvps)
    shuffled = pairs.assign(event_b=np.random.default_rng(0).permutation(pairs["event_b"].to_numpy()))
    control, _ = train_content_tower(world.events, shuffled, TowerConfig(epochs=4))
    real = margins(trained, world.events)["organizer_id"]
    fake = margins(control, world.events)["organizer_id"]
    assert (real[0] - real[1]) - (fake[0] - fake[1]) > 0.3


def test_training_is_deterministic_and_the_version_names_the_weights(world: World) -> None:
    small = world.events.head(400)
    pairs = co_rsvp_pairs(world.rsvps[world.rsvps["event_id"].isin(small["event_id"])])
    config = TowerConfig(epochs=2)
    a, _ = train_content_tower(small, pairs, config)
    b, _ = train_content_tower(small, pairs, config)
    assert a.version == b.version and a.version.startswith("ct-")
    np.testing.assert_array_equal(embed_events(a, small), embed_events(b, small))
    c, _ = train_content_tower(small, pairs, dataclasses.replace(config, seed=8))
    assert c.version != a.version


def test_save_and_load_round_trip_in_plain_formats(
    trained: TowerArtifact, world: World, tmp_path: Path
) -> None:
    save_tower(trained, tmp_path)
    meta = json.loads((tmp_path / "vocab.json").read_text())
    assert meta["version"] == trained.version and meta["config"]["dim"] == 64
    state = torch.load(tmp_path / "weights.pt", weights_only=True)
    assert all(isinstance(t, torch.Tensor) for t in state.values())
    loaded = load_tower(tmp_path)
    assert loaded.version == trained.version
    np.testing.assert_array_equal(embed_events(loaded, world.events), embed_events(trained, world.events))

    state["mlp.2.bias"] = state["mlp.2.bias"] + 1e-3
    torch.save(state, tmp_path / "weights.pt")
    with pytest.raises(ValueError, match="hash to"):
        load_tower(tmp_path)


def test_co_rsvp_pairs_window_dedup_and_cap() -> None:
    t0 = datetime(2026, 10, 1, tzinfo=UTC)
    rsvps = pd.DataFrame(
        [
            ("u1", "a", t0),
            ("u1", "a", t0 + timedelta(days=1)),  # repeat RSVP: counts once
            ("u1", "b", t0 + timedelta(days=10)),
            ("u1", "c", t0 + timedelta(days=45)),  # 35 days after b: outside the 30-day window
            ("u2", "a", t0),
            ("u2", "d", t0 + timedelta(days=30)),  # exactly 30 days: inside
        ],
        columns=["user_id", "event_id", "rsvp_at"],
    )
    pairs = co_rsvp_pairs(rsvps)
    assert sorted(zip(pairs["event_a"], pairs["event_b"], strict=True)) == [("a", "b"), ("a", "d")]
    many = pd.DataFrame(
        {
            "user_id": "u",
            "event_id": [f"e{i}" for i in range(20)],
            "rsvp_at": [t0 + timedelta(hours=i) for i in range(20)],
        }
    )
    assert len(co_rsvp_pairs(many, max_pairs_per_user=7)) == 7
    assert co_rsvp_pairs(many, max_pairs_per_user=7).equals(co_rsvp_pairs(many, max_pairs_per_user=7))


def test_vocabulary_is_ours_and_unknown_words_hash_stably() -> None:
    config = TowerConfig(min_count=2)
    vocab = Vocabulary.build(
        ["run club", "run club weekly", "jazz"], [None, "club"], ["fitness", "music"], config
    )
    assert "run" in vocab.tokens and "run_club" in vocab.tokens and "jazz" not in vocab.tokens
    assert vocab.token_id("jazz") == vocab.token_id("jazz") > len(vocab.tokens)
    assert vocab.category_id("fitness") > 0 and vocab.category_id("séance") == 0
