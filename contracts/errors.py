"""Failures that cross stage boundaries; each says what a caller should do about it."""

from __future__ import annotations


class DataContractError(RuntimeError):
    """Data broke its contract (a validation gate failed); retrying the same input cannot fix it."""
