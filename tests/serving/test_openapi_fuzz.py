"""Schemathesis fuzzes the feed's OpenAPI schema: no input makes it answer 5xx or off-schema."""

from __future__ import annotations

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

from serving.app import create_app
from serving.synthetic import make_head, make_state, make_world

WORLD = make_world(n_events=300, n_users=10, seed=5)
APP = create_app(make_state(WORLD, (make_head("rsvp", rounds=5), make_head("attend", rounds=5))))
schema = schemathesis.openapi.from_asgi("/openapi.json", APP)


@schema.parametrize()
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
def test_api(case) -> None:
    # A schema-valid request may still be refused on meaning (an unknown user sends no location,
    # a well-formed instant names no real date): those are clear 422s, not schema violations.
    case.call_and_validate(excluded_checks=[positive_data_acceptance])
