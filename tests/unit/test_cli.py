import pytest
from typer.testing import CliRunner

from cli.main import app

runner = CliRunner()


@pytest.mark.parametrize(
    "command", [[], ["simulate"], ["ingest"], ["features"], ["materialize"], ["tower"], ["index"], ["schema"]]
)
def test_every_command_has_help(command: list[str]) -> None:
    result = runner.invoke(app, [*command, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage" in result.output


def test_a_bare_local_time_is_refused_as_an_interval() -> None:
    result = runner.invoke(app, ["ingest", "--start", "2026-11-01T13:00"])
    assert result.exit_code != 0
    assert "UTC offset" in result.output
