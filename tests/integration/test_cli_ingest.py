import json

import pytest
from typer.testing import CliRunner

from cli.main import app
from tests.integration.landing_lines import event, write_lines

pytestmark = pytest.mark.integration


def test_ingest_json_summary_is_the_last_line(spark, settings, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("TURNOUT_HOME", str(settings.home))
    write_lines(settings.landing.root, "events", "2026-11-01T06", [event("a"), event("a"), event("b")])
    result = CliRunner().invoke(app, ["ingest", "--json", "--run-id", "cli-test"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["tables"]["events"] == {"read": 3, "written": 2, "deduplicated": 1, "quarantined": 0}
    assert summary["silver"]["events"]["rows"] == 2
