"""The gold contract judges alike on both great-expectations engines.

``validate_gold`` collects a small table to the driver and validates it with pandas, and leaves a
large one on Spark (``features.validate_on_driver_max_rows``). The same broken tables must fail
the same expectations, on the same rows, whichever engine ran the suite.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import TYPE_CHECKING

import pytest

from conf import Settings
from contracts.errors import DataContractError
from pipelines.features.validation import validate_gold
from tests.conftest import make_settings
from tests.integration import gold_tables as G

if TYPE_CHECKING:
    from pathlib import Path

    from pyspark.sql import SparkSession

pytestmark = pytest.mark.integration

END = G.T0 + timedelta(days=6)
# table -> the expectations its breakage below must fail, with how many rows each.
BROKEN = {
    "event_dynamics": {("expect_column_values_to_be_between", "fill_rate"): 1},
    "user_features": {("expect_column_values_to_not_be_null", "home_lat"): 1},
    "market_rates": {("expect_column_values_to_match_regex", "market_key"): 1},
    "social": {("expect_column_pair_values_a_to_be_greater_than_b", "created>=event_timestamp"): 1},
    "series_stats": {("expect_compound_columns_to_be_unique", "['series_id', 'event_timestamp']"): 2},
}


def _failures(message: str) -> dict[str, dict[tuple[str, str], int]]:
    """``DataContractError``'s lines -> table -> (expectation, target) -> unexpected rows."""
    out: dict[str, dict[tuple[str, str], int]] = {}
    for line in message.splitlines():
        table = re.match(r"\s*gold\.(\w+): \d+ rows \((?:spark|pandas)\), (.*)$", line)
        if table is None:
            continue
        for failure in table.group(2).split("; "):
            found = re.match(r"(\w+)\((.*?)\) failed: (\d+) rows", failure)
            assert found is not None, failure
            out.setdefault(table.group(1), {})[(found.group(1), found.group(2))] = int(found.group(3))
    return out


def _engines(message: str) -> set[str]:
    return set(re.findall(r"rows \((spark|pandas)\)", message))


def test_both_engines_fail_the_same_expectations_on_the_same_rows(
    spark: SparkSession, tmp_path: Path
) -> None:
    tables = G.history(seed=3)
    tables["event_dynamics"][0]["fill_rate"] = 1.7  # not a rate
    tables["user_features"][1]["home_lat"] = None
    market_key = tables["market_rates"][0]["market_key"]
    tables["market_rates"][0]["market_key"] = "no pipes"
    leak = tables["social"][2]
    leak["created"] = leak["event_timestamp"] - timedelta(hours=1)  # written before it was known
    tables["series_stats"].append(dict(tables["series_stats"][0]))  # one key and instant twice
    home = tmp_path / "home"
    G.write_history(spark, make_settings(home), tables)

    judged: dict[str, dict[str, dict[tuple[str, str], int]]] = {}
    for engine, max_rows in (("pandas", "1000000"), ("spark", "0")):
        settings: Settings = make_settings(home, features__validate_on_driver_max_rows=max_rows)
        with pytest.raises(DataContractError) as err:
            validate_gold(settings, END)
        assert _engines(str(err.value)) == {engine}
        judged[engine] = _failures(str(err.value))
    assert judged["pandas"] == judged["spark"] == BROKEN

    # Repaired, every table passes on Spark too (the driver's pass is every features run's).
    tables["event_dynamics"][0]["fill_rate"] = 0.5
    tables["user_features"][1]["home_lat"] = 40.7
    tables["market_rates"][0]["market_key"] = market_key
    leak["created"] = leak["event_timestamp"]
    tables["series_stats"].pop()
    G.write_history(spark, make_settings(home), tables)
    report = validate_gold(make_settings(home, features__validate_on_driver_max_rows="0"), END)
    assert {t: (r["success"], r["engine"]) for t, r in report["tables"].items()} == {
        t: (True, "spark") for t in G.GOLD_TABLES
    }


def test_an_interval_judges_the_rows_it_may_have_written(spark: SparkSession, tmp_path: Path) -> None:
    """With ``since`` (an hourly run's MERGE window), rows before it and before the freshness
    horizon are not judged again; a broken row inside it still fails the run."""
    tables = G.history(seed=5)
    users = sorted(tables["user_features"], key=lambda r: r["event_timestamp"])
    since, horizon = END - timedelta(hours=1), END - timedelta(days=2)  # user_features' max_age
    old = users[0]
    assert old["event_timestamp"] < horizon <= users[-1]["event_timestamp"]
    old["home_lat"] = None  # written days ago, and judged by the run that wrote it
    settings = make_settings(tmp_path / "home")
    G.write_history(spark, settings, tables)

    with pytest.raises(DataContractError, match=r"gold\.user_features: \d+ rows .*home_lat"):
        validate_gold(settings, END)  # every row: the old one fails
    report = validate_gold(settings, END, since=since)
    judged = report["tables"]["user_features"]
    recent = sum(horizon <= r["event_timestamp"] <= END for r in users)
    assert (judged["success"], judged["rows"], report["since"]) == (True, recent, since.isoformat())

    users[-1]["home_lat"] = None  # the newest row: inside the freshness horizon
    G.write_history(spark, settings, tables)
    with pytest.raises(DataContractError) as err:
        validate_gold(settings, END, since=since)
    assert _failures(str(err.value)) == {
        "user_features": {("expect_column_values_to_not_be_null", "home_lat"): 1}
    }
