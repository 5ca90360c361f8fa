"""The feed API: ``GET /v1/feed``, ``GET /healthz``, ``GET /metrics``.

``create_app(state)`` takes every dependency in one ``ServingState``, so tests hand it a synthetic
world and ``turnout serve`` hands it the published index, the registry champions and the online
store. A dependency failure never becomes a 5xx: the feed takes its fallback and names it in
``served_by``; only a request the service cannot interpret is refused, with a 4xx that says why.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import FastAPI, HTTPException, Query
from fastapi.responses import PlainTextResponse
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from pydantic import BaseModel

from contracts.instants import parse_instant
from serving.feed import FeedRequest, FeedResult, NoLocation, serve_feed
from serving.refresh import BackgroundRefresher
from serving.state import ServingState

# An ISO-8601 instant with an explicit offset: a bare local time is ambiguous (DST) and refused.
INSTANT_PATTERN = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?([Zz]|[+-]\d{2}:\d{2})$"


class ErrorOut(BaseModel):
    """Our own refusals carry a sentence; FastAPI's parameter validation a list of problems."""

    detail: str | list[dict[str, Any]]


def parse_now(value: str | None, clock: Callable[[], datetime]) -> datetime:
    """An ISO-8601 instant with an offset (``Z`` or ``+hh:mm``); a bare local time is refused."""
    if value is None:
        return clock()
    try:
        t = parse_instant(value)
    except ValueError as e:
        raise HTTPException(422, f"now={e}") from e
    if not 1970 < t.year < 2200:
        raise HTTPException(422, f"now={value!r} is out of the supported range")
    return t


def create_app(
    state: ServingState,
    new_request_id: Callable[[], str] | None = None,
    refresher: BackgroundRefresher | None = None,
) -> FastAPI:
    """The app over ``state``; ``new_request_id`` lets tests make request ids (and so the
    exploration coin flips, seeded by them) deterministic. A ``refresher`` runs while the app
    does (started and stopped by its lifespan)."""
    make_id = new_request_id or (lambda: uuid.uuid4().hex)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if refresher is not None:
            refresher.start()
        try:
            yield
        finally:
            if refresher is not None:
                refresher.stop()

    app = FastAPI(title="turnout feed", version="1", lifespan=lifespan)
    registry = CollectorRegistry()
    requests = Counter(
        "turnout_feed_requests", "Feed responses by serving path", ["served_by"], registry=registry
    )
    rejected = Counter(
        "turnout_feed_rejected", "Feed requests refused with a 4xx", ["reason"], registry=registry
    )
    latency = Histogram(
        "turnout_feed_latency_seconds",
        "Feed latency inside the service",
        buckets=(0.01, 0.025, 0.05, 0.06, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5),
        registry=registry,
    )
    stage_latency = Histogram(
        "turnout_feed_stage_seconds",
        "Feed latency per stage",
        ["stage"],
        buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
        registry=registry,
    )
    candidates = Histogram(
        "turnout_feed_candidates",
        "Candidates retrieved per request (an under-fetching ring shows here first)",
        buckets=(0, 25, 100, 500, 1000, 2500, 5000, 10000, 15000),
        registry=registry,
    )
    snapshot_age = Gauge(
        "turnout_snapshot_age_seconds", "Age of the event feature snapshot", registry=registry
    )
    exploration = Counter(
        "turnout_feed_exploration", "Exploration impressions by kind", ["kind"], registry=registry
    )
    app.state.serving = state
    app.state.metrics_registry = registry

    @app.get(
        "/v1/feed",
        response_model=FeedResult,
        responses={422: {"model": ErrorOut, "description": "A parameter cannot be interpreted"}},
    )
    def feed(
        user_id: Annotated[str, Query(min_length=1, max_length=128, description="The user asking")],
        lat: Annotated[
            float | None, Query(ge=-90, le=90, description="GPS latitude; omit to use home")
        ] = None,
        lng: Annotated[float | None, Query(ge=-180, le=180, description="GPS longitude")] = None,
        now: Annotated[
            str | None,
            Query(max_length=64, description="The request instant, ISO-8601 with offset; default: now"),
        ] = None,
    ) -> FeedResult:
        if (lat is None) != (lng is None):
            rejected.labels("partial_location").inc()
            raise HTTPException(422, "send both lat and lng, or neither (to use the user's home)")
        try:
            at = parse_now(now, state.clock)
        except HTTPException:
            rejected.labels("bad_time").inc()
            raise
        req = FeedRequest(user_id=user_id, now=at, lat=lat, lng=lng, request_id=make_id())
        try:
            result = serve_feed(state, req)
        except NoLocation as e:
            rejected.labels("no_location").inc()
            raise HTTPException(422, str(e)) from e
        requests.labels(result.served_by).inc()
        latency.observe(result.stages_ms["total"] / 1000)
        for stage, ms in result.stages_ms.items():
            if stage != "total":
                stage_latency.labels(stage).observe(ms / 1000)
        candidates.observe(result.candidates)
        for item in result.events:
            if item.exploration_kind:
                exploration.labels(item.exploration_kind).inc()
        return result

    @app.get("/healthz")
    def healthz() -> dict[str, object]:
        report = state.health_report()
        if refresher is not None:
            report["refresh"] = asdict(refresher.stats)
        return report

    @app.get(
        "/metrics",
        response_class=PlainTextResponse,
        responses={200: {"content": {"text/plain": {}}, "description": "Prometheus text format"}},
    )
    def metrics() -> PlainTextResponse:
        snapshot_age.set(max(0.0, datetime.now(UTC).timestamp() - state.snapshot.built_at_s))
        return PlainTextResponse(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return app
