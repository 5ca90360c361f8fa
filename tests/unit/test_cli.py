import pytest
from typer.testing import CliRunner

from cli.main import app

runner = CliRunner()


@pytest.mark.parametrize(
    "command",
    [
        [],
        ["simulate"],
        ["ingest"],
        ["features"],
        ["materialize"],
        ["tower"],
        ["index"],
        ["schema"],
        ["demo"],
        ["loop"],
    ],
)
def test_every_command_has_help(command: list[str]) -> None:
    result = runner.invoke(app, [*command, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage" in result.output


def test_a_bare_local_time_is_refused_as_an_interval() -> None:
    result = runner.invoke(app, ["ingest", "--start", "2026-11-01T13:00"])
    assert result.exit_code != 0
    assert "UTC offset" in result.output


def test_the_demo_without_a_deployment_says_how_to_start_one() -> None:
    result = runner.invoke(
        app,
        [
            "demo",
            "--now",
            "2026-11-09T00:00Z",
            "--tower-at",
            "2026-10-19T00:00Z",
            "--airflow-url",
            "http://127.0.0.1:9",
        ],
    )
    assert result.exit_code == 2
    assert "make up" in result.output
