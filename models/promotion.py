"""Promotion gates: a pure decision on whether a challenger may replace the champion."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Gates:
    tolerance: float = 0.01  # the challenger may be at most this much worse on the head's metric
    max_ece: float = 0.02
    min_score_std: float = 1e-4  # a collapsed score distribution ranks nothing


@dataclass(frozen=True)
class CandidateReport:
    quality: float  # the head's gate metric, higher is better (e.g. NDCG@25, AUC)
    ece: float
    score_std: float
    schema_hash: str
    inputs_validated: bool
    quality_name: str = "NDCG@25"


@dataclass(frozen=True)
class Decision:
    promote: bool
    reasons: list[str] = field(default_factory=list)

    @property
    def reason(self) -> str:
        return "; ".join(self.reasons) if self.reasons else "all gates passed"


def should_promote(
    candidate: CandidateReport,
    champion: CandidateReport | None,
    gates: Gates,
    serving_schema_hash: str,
) -> Decision:
    """Every failed gate is named; any failure keeps the champion."""
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
    if champion is not None and not candidate.quality >= champion.quality - gates.tolerance:
        reasons.append(
            f"{candidate.quality_name} {candidate.quality:.4f} worse than champion {champion.quality:.4f} "
            f"beyond tolerance {gates.tolerance}"
        )
    return Decision(promote=not reasons, reasons=reasons)
