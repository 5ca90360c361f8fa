"""Promotion gates: a pure decision on whether a challenger may replace the champion."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Gates:
    # Refuse a challenger only when it is, at ``level`` confidence, more than this much worse than
    # the champion on the head's metric (the paired interval's upper end below -tolerance).
    tolerance: float = 0.01
    max_ece: float = 0.02
    min_score_std: float = 1e-4  # a collapsed score distribution ranks nothing
    level: float = 0.95


@dataclass(frozen=True)
class CandidateReport:
    ece: float
    score_std: float
    schema_hash: str
    inputs_validated: bool
    quality_name: str = "NDCG@25"  # the head's gate metric, higher is better (e.g. NDCG@25, AUC)


@dataclass(frozen=True)
class Comparison:
    """The challenger's gate metric beside the champion's on the same test units, and a paired
    bootstrap interval of the difference (challenger - champion) at ``level``."""

    challenger: float
    champion: float
    low: float
    high: float
    units: int  # what was resampled: logged requests (NDCG@25) or test RSVPs (AUC)
    level: float = 0.95

    @property
    def difference(self) -> float:
        return self.challenger - self.champion

    def describe(self, name: str) -> str:
        return (
            f"{name} {self.challenger:.4f} vs champion {self.champion:.4f}: {self.difference:+.4f}, "
            f"{self.level:.0%} interval {self.low:+.4f} .. {self.high:+.4f} over {self.units} units"
        )


@dataclass(frozen=True)
class Decision:
    promote: bool
    reasons: list[str] = field(default_factory=list)

    @property
    def reason(self) -> str:
        return "; ".join(self.reasons) if self.reasons else "all gates passed"


def should_promote(
    candidate: CandidateReport,
    versus_champion: Comparison | None,
    gates: Gates,
    serving_schema_hash: str,
) -> Decision:
    """Every failed gate is named; any failure keeps the champion.

    The quality gate asks the paired interval, not the point difference: on ~100 test requests
    the difference's own noise is about +-0.024 NDCG, so a point rule at a 0.01 tolerance refuses
    challengers no worse than the champion (README, "Three simulated days"). A challenger is
    refused when the whole interval lies below -tolerance, or when it cannot be measured.
    """
    reasons = []
    if not candidate.inputs_validated:
        reasons.append("input data did not pass validation")
    if candidate.schema_hash != serving_schema_hash:
        reasons.append(
            f"feature schema hash {candidate.schema_hash[:12]} != the feature service's "
            f"{serving_schema_hash[:12]}"
        )
    if not candidate.ece <= gates.max_ece:
        reasons.append(f"ECE {candidate.ece:.4f} above {gates.max_ece}")
    if not candidate.score_std >= gates.min_score_std:
        reasons.append(f"score distribution collapsed (std {candidate.score_std:.2e})")
    if versus_champion is not None and not versus_champion.high >= -gates.tolerance:
        reasons.append(
            f"{versus_champion.describe(candidate.quality_name)}: worse than the champion "
            f"beyond tolerance {gates.tolerance}"
        )
    return Decision(promote=not reasons, reasons=reasons)
