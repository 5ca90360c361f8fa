"""The imported Meetup crawl goes through the ordinary ingest and gold jobs unchanged."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from conf import Settings
from importers.meetup import DELIVERED, import_meetup
from pipelines.ingest.run import ingest_interval
from tests.conftest import make_settings
from tests.meetup_crawl import write_crawl

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def crawl(spark, tmp_path_factory: pytest.TempPathFactory) -> tuple[Settings, dict[str, Any], dict[str, Any]]:  # type: ignore[no-untyped-def]
    """A small crawl of the real one's shape, imported and ingested: (settings, import, ingest)."""
    tmp = tmp_path_factory.mktemp("meetup")
    settings = make_settings(tmp / "home")
    imported = import_meetup(write_crawl(tmp / "crawl"), Path(settings.landing.root)).to_dict()
    return settings, imported, ingest_interval(settings, None, None, run_id="meetup")


def test_an_imported_crawl_ingests_to_silver_with_nothing_quarantined(spark, crawl) -> None:  # type: ignore[no-untyped-def]
    settings, imported, report = crawl

    assert {name: c["read"] for name, c in report["tables"].items()} == imported["written"]
    assert {name: c["quarantined"] for name, c in report["tables"].items()} == dict.fromkeys(
        imported["written"], 0
    )
    assert {name: t["rows"] for name, t in report["silver"].items()} == imported["written"]
    events = spark.read.format("delta").load(settings.lake.table_path("silver", "events"))
    zones = {r["timezone"] for r in events.select("timezone").distinct().collect()}
    assert zones == {"America/Chicago", "America/Los_Angeles"}


def test_gold_builds_from_a_crawl_without_impressions_or_outcomes(spark, crawl) -> None:  # type: ignore[no-untyped-def]
    """The crawl has no impressions, cancellations, friendships, check-ins or ratings; gold builds
    anyway, what it has adds up, and nothing shows before the crawl was delivered: events created
    in 2011 and their RSVPs became known to turnout in 2013, with the one export."""
    from pyspark.sql import functions as F

    from pipelines.features.jobs import build_gold

    settings, imported, _ = crawl
    end = DELIVERED + timedelta(hours=1)

    report = build_gold(settings, None, end, run_id="meetup-gold")

    def gold(name: str):  # type: ignore[no-untyped-def]
        return spark.read.format("delta").load(settings.lake.table_path("gold", name))

    assert report["tables"]["event_features"]["inserted"] == imported["written"]["events"]
    latest = gold("event_dynamics").groupBy("event_id").agg(F.max_by("rsvp_count", "event_timestamp"))
    assert latest.agg(F.sum(latest.columns[1])).first()[0] == imported["written"]["rsvps"]
    assert gold("user_features").select("user_id").distinct().count() == imported["written"]["users"]
    for name in ("market_rates", "social", "organizer_stats", "series_stats"):
        assert gold(name).count() == 0, name  # built from impressions, friendships and outcomes
    first_created = {
        name: gold(name).agg(F.min("created")).first()[0]
        for name in ("user_features", "event_features", "event_dynamics")
    }
    assert first_created == dict.fromkeys(first_created, end.replace(tzinfo=None))
