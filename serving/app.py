"""The feed API: ``GET /v1/feed``, ``GET /healthz``, ``GET /metrics``.

``create_app(state)`` takes every dependency in one ``ServingState``, so tests hand it a synthetic
world and ``turnout serve`` hands it the published index, the registry champions and the online
store. A dependency failure never becomes a 5xx: the feed takes its fallback and names it in
``served_by``; only a request the service cannot interpret is refused, with a 4xx that says why
and is counted by reason (``turnout_feed_rejected``) and by status (``turnout_http_responses``).
A refused request writes nothing to the impression log.
"""

from __future__ import annotations

import uuid
from collections import Counter as Tally
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import asdict
from typing import Annotated, Any

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from contracts.instants import iso_z, parse_instant
from contracts.landing import ID_PATTERN
from serving.feed import FeedRequest, NoLocation, serve_feed
from serving.refresh import BackgroundRefresher
from serving.schema import FeedResult
from serving.state import ServingState

FEED_PARAMETERS = ("user_id", "lat", "lng", "now", "request_id")


class ErrorOut(BaseModel):
    """Our own refusals carry a sentence; FastAPI's parameter validation a list of problems."""

    detail: str | list[dict[str, Any]]
    reason: str


class Refused(Exception):
    """A request the service cannot interpret: a 4xx with a sentence and a counted reason."""

    def __init__(self, reason: str, detail: str, status: int = 422) -> None:
        super().__init__(detail)
        self.reason, self.detail, self.status = reason, detail, status


def requested_instant(value: str | None, state: ServingState) -> Any:
    """The instant a request asks about: the service's clock, or ``now`` within the window the
    published state can answer for (from its instant to ``max_state_age`` after it)."""
    if value is None:
        return state.clock()
    try:
        at = parse_instant(value)
    except ValueError as e:
        raise Refused("bad_time", f"now={e}") from e
    window = state.request_window()
    if window is not None and not window[0] <= at <= window[1]:
        raise Refused(
            "now_out_of_range",
            f"now={iso_z(at)} is outside what this service can answer: it serves the platform as "
            f"published for {iso_z(window[0])}, so ask for an instant in [{iso_z(window[0])}, "
            f"{iso_z(window[1])}] or leave now out",
        )
    return at


def _validation_reason(errors: list[Any]) -> str:
    """``invalid:<parameter>`` for the first parameter FastAPI could not interpret."""
    for error in errors:
        loc = [str(part) for part in error.get("loc", ()) if part not in ("query", "body", "path")]
        if loc:
            return f"invalid:{loc[0]}"
    return "invalid"


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
        "turnout_feed_rejected",
        "Requests refused with a 4xx, by reason",
        ["reason", "status"],
        registry=registry,
    )
    responses = Counter(
        "turnout_http_responses",
        "Every response, by route and status",
        ["method", "path", "status"],
        registry=registry,
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
    data_age = Gauge(
        "turnout_snapshot_data_age_seconds",
        "Age of the served event snapshot's data, on the service's clock",
        registry=registry,
    )
    dependency_up = Gauge(
        "turnout_dependency_up",
        "1 while a dependency checks out, 0 while it is down",
        ["component"],
        registry=registry,
    )
    exploration = Counter(
        "turnout_feed_exploration", "Exploration impressions by kind", ["kind"], registry=registry
    )
    app.state.serving = state
    app.state.metrics_registry = registry

    def refuse(reason: str, detail: Any, status: int, headers: dict[str, str] | None = None) -> JSONResponse:
        rejected.labels(reason, str(status)).inc()
        return JSONResponse({"detail": detail, "reason": reason}, status_code=status, headers=headers)

    @app.middleware("http")
    async def count_responses(request: Request, call_next: Callable[[Request], Any]) -> Any:
        response = await call_next(request)
        route = request.scope.get("route")
        path = getattr(route, "path", "unmatched")
        responses.labels(request.method, path, str(response.status_code)).inc()
        return response

    @app.exception_handler(Refused)
    async def on_refused(_: Request, exc: Refused) -> JSONResponse:
        return refuse(exc.reason, exc.detail, exc.status)

    @app.exception_handler(RequestValidationError)
    async def on_invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = list(exc.errors())
        detail = [{k: v for k, v in e.items() if k in ("loc", "msg", "type")} for e in errors]
        return refuse(_validation_reason(errors), detail, 422)

    @app.exception_handler(StarletteHTTPException)
    async def on_http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        reason = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, f"http_{exc.status_code}")
        return refuse(reason, exc.detail, exc.status_code, getattr(exc, "headers", None))

    @app.get(
        "/v1/feed",
        response_model=FeedResult,
        responses={422: {"model": ErrorOut, "description": "A parameter cannot be interpreted"}},
    )
    def feed(
        request: Request,
        user_id: Annotated[
            str,
            Query(pattern=ID_PATTERN, max_length=128, description="The user asking (letters, digits, ._:-)"),
        ],
        lat: Annotated[
            float | None,
            Query(ge=-90, le=90, allow_inf_nan=False, description="GPS latitude; omit to use home"),
        ] = None,
        lng: Annotated[
            float | None, Query(ge=-180, le=180, allow_inf_nan=False, description="GPS longitude")
        ] = None,
        now: Annotated[
            str | None,
            Query(max_length=64, description="The request instant, ISO-8601 with offset; default: now"),
        ] = None,
        request_id: Annotated[
            str | None,
            Query(
                pattern=ID_PATTERN,
                max_length=64,
                description="The client's id for this request (a retry sends the same one and gets the "
                "same impression ids); default: a fresh one",
            ),
        ] = None,
    ) -> FeedResult:
        repeated = [k for k, n in Tally(k for k, _ in request.query_params.multi_items()).items() if n > 1]
        if repeated:
            raise Refused(
                "repeated_parameter", f"{', '.join(sorted(repeated))} given more than once: send each once"
            )
        unknown = sorted(set(request.query_params) - set(FEED_PARAMETERS))
        if unknown:
            raise Refused(
                "unknown_parameter",
                f"unknown parameter(s) {unknown}; this endpoint takes {list(FEED_PARAMETERS)}",
            )
        if (lat is None) != (lng is None):
            raise Refused("partial_location", "send both lat and lng, or neither (to use the user's home)")
        at = requested_instant(now, state)
        req = FeedRequest(user_id=user_id, now=at, lat=lat, lng=lng, request_id=request_id or make_id())
        try:
            result = serve_feed(state, req)
        except NoLocation as e:
            raise Refused("no_location", str(e)) from e
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
        data_age.set(max(0.0, state.clock().timestamp() - state.snapshot.built_at_s))
        for name, component in state.health.items():
            dependency_up.labels(name).set(1.0 if component.ok else 0.0)
        return PlainTextResponse(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return app
