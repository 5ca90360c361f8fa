"""The Meetup import's mapping and the offline evaluation's no-future rule, on a tiny crawl."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bench.bench_meetup import load, positives, ranking_for
from importers.meetup import import_meetup, series_code
from published.geo_index import GeoParams
from tests.meetup_crawl import write_crawl


@pytest.fixture(scope="module")
def crawl_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_crawl(tmp_path_factory.mktemp("crawl"))


def test_recurring_ids_name_their_series_and_numeric_ids_are_one_offs() -> None:
    assert series_code("bbjxpynqbgb") == "bbjx"
    assert series_code("qxwfgnynfbbc") == "qxwfg"
    assert series_code("5105312") is None


def test_import_writes_every_entity_and_counts_what_it_filled(crawl_dir: Path, tmp_path: Path) -> None:
    report = import_meetup(crawl_dir, tmp_path / "landing").to_dict()
    assert report["written"]["events"] == 16 * 40 + 120
    assert report["written"]["series"] == 16
    # One in ten one-off events had no creation time: imputed and counted, not dropped.
    assert report["filled"]["events.created_at (start - median lead time)"] == 12
    events = [json.loads(line) for line in next((tmp_path / "landing" / "events").glob("*/*.jsonl")).open()]
    zones = {e["timezone"] for e in events}
    assert zones == {"America/Chicago", "America/Los_Angeles"}
    recurring = [e for e in events if "series_id" in e]
    assert len(recurring) == 16 * 40 and all(
        e["organizer_id"] == "mu-o-" + e["series_id"][5:] for e in recurring
    )
    with pytest.raises(FileExistsError):  # landing files are append-only
        import_meetup(crawl_dir, tmp_path / "landing")


def test_a_members_ranking_is_the_same_when_everything_after_the_split_is_removed(crawl_dir: Path) -> None:
    full, _ = load(crawl_dir)
    params = GeoParams()
    splits = full.members["split_s"].to_numpy()
    # A member with RSVPs in the 21 days after the split: there is future to hide.
    member = next(m for m, s in enumerate(splits) if positives(full, m, int(s)))
    cutoff = datetime.fromtimestamp(int(splits[member]), UTC)
    truncated, _ = load(crawl_dir, cutoff=cutoff)
    assert not positives(truncated, member, int(splits[member]))  # the future is really gone

    ranked = ranking_for(full, member, params, windows=4, negatives=10, seed=0)
    assert len(ranked) > 0
    assert ranking_for(truncated, member, params, windows=4, negatives=10, seed=0) == ranked
