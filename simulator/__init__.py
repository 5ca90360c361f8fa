"""A seeded simulator of the event platform: landing files plus the hidden ground truth.

``simulate(SimulationConfig(), landing_root, truth_root)`` writes the landing contract of
``contracts.landing`` (with duplicates, late and malformed lines) and a parquet ground
truth that ``GroundTruth.load`` reads back for evaluation.
"""

from simulator.config import METROS, SimulationConfig
from simulator.run import EntitySummary, SimulationSummary, read_manifest, simulate
from simulator.truth import GroundTruth

__all__ = [
    "METROS",
    "EntitySummary",
    "GroundTruth",
    "SimulationConfig",
    "SimulationSummary",
    "read_manifest",
    "simulate",
]
