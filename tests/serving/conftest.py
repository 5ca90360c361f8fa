"""Serving fixtures: a synthetic world and two small heads, built once per session in-process."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest

from models.heads import Head
from serving.synthetic import World, make_head, make_world


@pytest.fixture(scope="session")
def heads() -> tuple[Head, Head]:
    return make_head("rsvp"), make_head("attend")


@pytest.fixture
def world() -> World:
    """A fresh world per test: its counters are mutable."""
    return make_world(n_events=600, n_users=40)


@pytest.fixture
def request_ids() -> Callable[[], str]:
    counter = itertools.count()
    return lambda: f"req{next(counter):05d}"
