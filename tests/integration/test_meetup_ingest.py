"""The imported Meetup crawl goes through the ordinary ingest unchanged: nothing quarantined."""

from __future__ import annotations

from pathlib import Path

import pytest

from importers.meetup import import_meetup
from pipelines.ingest.run import ingest_interval
from tests.conftest import make_settings
from tests.meetup_crawl import write_crawl

pytestmark = pytest.mark.integration


def test_an_imported_crawl_ingests_to_silver_with_nothing_quarantined(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    settings = make_settings(tmp_path / "home")
    imported = import_meetup(write_crawl(tmp_path / "crawl"), Path(settings.landing.root)).to_dict()

    report = ingest_interval(settings, None, None, run_id="meetup")

    assert {name: c["read"] for name, c in report["tables"].items()} == imported["written"]
    assert {name: c["quarantined"] for name, c in report["tables"].items()} == dict.fromkeys(
        imported["written"], 0
    )
    assert {name: t["rows"] for name, t in report["silver"].items()} == imported["written"]
    events = spark.read.format("delta").load(settings.lake.table_path("silver", "events"))
    zones = {r["timezone"] for r in events.select("timezone").distinct().collect()}
    assert zones == {"America/Chicago", "America/Los_Angeles"}
