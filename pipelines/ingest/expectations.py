"""great-expectations suites that gate a landing batch before anything is written.

Row-level problems are quarantined one row at a time (``transforms.parse_landing``). These suites
judge the *delivery*: when more than ``max_quarantine_fraction`` of a batch is unusable, or a
key column is broken across the batch, the export itself is broken and publishing the survivors
would silently shrink silver. The suite is derived from the landing schema, so a new field is
gated the day it is declared.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from contracts.landing import LandingEntity

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GateResult:
    table: str
    success: bool
    failures: list[str]

    def report(self) -> str:
        if self.success:
            return f"{self.table}: all expectations met"
        return f"{self.table}: " + "; ".join(self.failures)


def allowed_bad_share(rows: int, max_bad_fraction: float, min_bad_rows: int) -> float:
    """The share of unusable rows a batch of ``rows`` may carry before the delivery is rejected."""
    if rows <= 0:
        return 1.0
    return min(1.0, max(max_bad_fraction, min_bad_rows / rows))


def build_suite(entity: LandingEntity, max_bad_share: float) -> Any:
    """The batch-level expectation suite for one landing entity."""
    import great_expectations as gx
    import great_expectations.expectations as gxe

    mostly = 1.0 - max_bad_share
    suite = gx.ExpectationSuite(name=f"landing_{entity.name}")
    suite.add_expectation(gxe.ExpectColumnValuesToBeNull(column="_reason", mostly=mostly))
    for name in entity.key:
        suite.add_expectation(gxe.ExpectColumnValuesToNotBeNull(column=name, mostly=mostly))
    return suite


def validate_batch(parsed: DataFrame, entity: LandingEntity, max_bad_share: float) -> GateResult:
    """Run the entity's suite on a parsed batch (before the quarantine split)."""
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    source = context.data_sources.add_spark(name="landing")
    batch_definition = source.add_dataframe_asset(name=entity.name).add_batch_definition_whole_dataframe(
        "batch"
    )
    suite = context.suites.add(build_suite(entity, max_bad_share))
    result = batch_definition.get_batch(batch_parameters={"dataframe": parsed}).validate(suite)
    failures = []
    for r in result.results:
        if not r.success:
            cfg = r.expectation_config
            column = cfg.kwargs.get("column") if cfg is not None else None
            pct = r.result.get("unexpected_percent")
            failures.append(
                f"{cfg.type if cfg else '?'}({column}) failed: "
                f"{r.result.get('unexpected_count')} rows ({pct:.1f}%) unexpected"
                if pct is not None
                else f"{cfg.type if cfg else '?'}({column}) failed"
            )
    gate = GateResult(table=entity.name, success=bool(result.success), failures=failures)
    log.info("gate %s", gate.report())
    return gate
