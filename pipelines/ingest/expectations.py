"""The great-expectations gate that judges a landing delivery before anything is written.

Row-level problems are quarantined one row at a time (``transforms.parse_landing``). The gate
judges the *delivery*: when more than ``max_quarantine_fraction`` of an entity's batch is unusable,
or a key column is missing on more than that share of it, the export itself is broken and
publishing the survivors would silently shrink silver.

One pass for the whole batch: ``batch_summary`` counts, in a single Spark job over every entity's
parsed lines, the rows of each (entity, check) and the rows that fail it; the expectation suite
then runs once on that summary (``ExpectColumnPairValuesAToBeGreaterThanB``: the allowed share is
at least the failing share, on every row). The checks are derived from the landing schema, so a
new entity or key is gated the day it is declared.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import reduce
from typing import TYPE_CHECKING, Any

from contracts.landing import LandingEntity

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)

USABLE = "_reason is null"  # the check every row must pass to be written


@dataclass(frozen=True)
class GateResult:
    success: bool
    failures: list[str]
    summary: pd.DataFrame  # entity, check, rows, failing, share, allowed_share

    def report(self) -> str:
        return "all expectations met" if self.success else "; ".join(self.failures)


def allowed_bad_share(rows: int, max_bad_fraction: float, min_bad_rows: int) -> float:
    """The share of unusable rows a batch of ``rows`` may carry before the delivery is rejected."""
    if rows <= 0:
        return 1.0
    return min(1.0, max(max_bad_fraction, min_bad_rows / rows))


def batch_summary(parsed: dict[str, DataFrame], entities: dict[str, LandingEntity]) -> pd.DataFrame:
    """Per (entity, check): the batch's rows and how many fail the check. One Spark job."""
    from pyspark.sql import functions as F

    flagged = [
        frame.select(
            F.lit(name).alias("entity"),
            F.col("_reason").isNotNull().cast("long").alias(USABLE),
            *(F.col(k).isNull().cast("long").alias(f"{k} is not null") for k in entities[name].key),
        )
        for name, frame in parsed.items()
    ]
    union = reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), flagged)
    checks = [c for c in union.columns if c != "entity"]
    totals = union.groupBy("entity").agg(F.count("*").alias("rows"), *(F.sum(c).alias(c) for c in checks))
    wide = totals.toPandas()
    summary = wide.melt(id_vars=["entity", "rows"], value_vars=checks, var_name="check", value_name="failing")
    summary = summary.dropna(subset=["failing"]).astype({"failing": "int64", "rows": "int64"})
    summary["share"] = summary["failing"] / summary["rows"]
    return summary.sort_values(["entity", "check"], ignore_index=True)


def validate_summary(summary: pd.DataFrame, max_bad_fraction: float, min_bad_rows: int) -> GateResult:
    """Run the gate's expectation suite on the batch summary; name every failing (entity, check)."""
    import great_expectations as gx
    import great_expectations.expectations as gxe
    from great_expectations.data_context.types.base import ProgressBarsConfig

    frame = summary.assign(
        allowed_share=[allowed_bad_share(int(r), max_bad_fraction, min_bad_rows) for r in summary["rows"]]
    )
    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    batch = (
        context.data_sources.add_pandas(name="landing")
        .add_dataframe_asset(name="delivery")
        .add_batch_definition_whole_dataframe("batch")
        .get_batch(batch_parameters={"dataframe": frame})
    )
    suite = context.suites.add(gx.ExpectationSuite(name="landing_delivery"))
    suite.add_expectation(
        gxe.ExpectColumnPairValuesAToBeGreaterThanB(column_A="allowed_share", column_B="share", or_equal=True)
    )
    result: Any = batch.validate(suite, result_format="COMPLETE")
    failing = frame[frame["share"] > frame["allowed_share"]]
    failures = [
        f"{r.entity}: expect {r.check} failed on {r.failing} of {r.rows} rows ({r.share:.1%}; "
        f"at most {r.allowed_share:.1%} allowed)"
        for r in failing.itertuples()
    ]
    if bool(result.success) != failing.empty:
        raise AssertionError(f"the gate's suite and its summary disagree: {result}")
    gate = GateResult(success=bool(result.success), failures=failures, summary=frame)
    log.info("landing gate: %s", gate.report())
    return gate
