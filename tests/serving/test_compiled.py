"""Heads compiled to native code (lleaves) score exactly as LightGBM does, through the whole feed;
object code from another model or another CPU is never loaded."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from models.compiled import FIRST_STAGE_TREES, MANIFEST_FILE
from models.heads import Head
from serving.feed import FeedRequest, serve_feed
from serving.synthetic import make_head, make_state
from tests.serving.test_rank import _frame


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> tuple[tuple[Head, Head], tuple[Head, Head]]:
    plain = (make_head("rsvp", rounds=60, seed=3), make_head("attend", rounds=40, seed=4))
    out = []
    for head in plain:
        manifest = head.compile_to(tmp_path_factory.mktemp(head.name))
        loaded, why = head.with_compiled(manifest)
        assert why is None, why
        out.append(loaded)
    return plain, (out[0], out[1])


def test_compiled_trees_equal_lightgbms_predictions(compiled, heads) -> None:
    plain, native = compiled
    assert set(native[0].compiled) == {"full", "first"} and set(native[1].compiled) == {"full"}
    x = _frame(heads, n=3000)
    for p, c in zip(plain, native, strict=True):
        np.testing.assert_allclose(c.raw(x, 1), p.booster.predict(x[p.columns]), rtol=0, atol=1e-12)
        np.testing.assert_allclose(c.predict(x, 1), p.predict(x, 1), rtol=0, atol=1e-12)
    stage = plain[0].first_stage
    assert stage is not None and native[0].compiled["first"].n_features == len(stage.columns)
    first = stage.booster.predict(x[stage.columns], raw_score=True)
    np.testing.assert_allclose(native[0].first_stage_raw(x, 1), first, rtol=0, atol=1e-12)


def test_a_head_from_before_the_distilled_first_stage_ranks_by_its_first_trees(
    compiled, heads, tmp_path
) -> None:
    """A p_rsvp version registered before it had a first stage compiles and serves its own
    first FIRST_STAGE_TREES trees, as it did then."""
    old = replace(compiled[0][0], first_stage=None)
    native, why = old.with_compiled(old.compile_to(tmp_path))
    assert why is None and native.first_stage_columns() == old.columns
    x = _frame(heads, n=2000)
    first = old.booster.predict(x[old.columns], num_iteration=FIRST_STAGE_TREES, raw_score=True)
    np.testing.assert_allclose(native.first_stage_raw(x, 1), first, rtol=0, atol=1e-12)
    np.testing.assert_allclose(old.first_stage_raw(x, 1), first, rtol=0, atol=1e-12)


def test_a_feed_scored_by_compiled_heads_is_the_same_feed(compiled, world) -> None:
    plain, native = compiled
    req = FeedRequest("u00001", world.now, 40.72, -74.0, "parity")
    a = serve_feed(make_state(world, plain), req)
    b = serve_feed(make_state(world, native), req)
    assert [e.event_id for e in a.events] == [e.event_id for e in b.events]
    np.testing.assert_allclose([e.score for e in a.events], [e.score for e in b.events], rtol=0, atol=1e-12)
    assert make_state(world, native).models.current.scorer.backend() == "compiled"


@pytest.mark.parametrize(
    "field,value", [("target", "x86_64-other/cpu/000000000000"), ("model_sha256", "0" * 64)]
)
def test_object_code_for_another_cpu_or_model_is_not_loaded(compiled, tmp_path: Path, field, value) -> None:
    plain, _ = compiled
    manifest = plain[1].compile_to(tmp_path)
    meta = json.loads(manifest.read_text())
    manifest.write_text(json.dumps({**meta, field: value}))
    head, why = plain[1].with_compiled(tmp_path / MANIFEST_FILE)
    assert head.compiled == {} and why is not None
    assert ("this host is" in why) if field == "target" else ("another model" in why)
