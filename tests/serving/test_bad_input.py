"""Input that cannot poison the log: every malformed request is a 4xx with a counted reason, never a
5xx, and writes no impression line.

Each case goes through HTTP (the ASGI app on a synthetic world) as raw query strings, so repeated
parameters, percent-encoded bytes and invalid UTF-8 arrive as a client would send them.
"""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from serving.app import create_app
from serving.impressions import MemoryImpressionLog
from serving.synthetic import make_state

NOW = "2026-11-05T15:00:00Z"  # the synthetic world's instant: what the service serves
GPS = "lat=40.72&lng=-74.0"
OK = f"user_id=u00001&{GPS}&now={NOW}"

# (name, method, path with query string, expected status, expected counted reason)
CASES: list[tuple[str, str, str, int, str]] = [
    # user ids that are not ids: control, invisible, bidi, non-ASCII, path, SQL and markup text
    *[
        (f"user_id {label}", "GET", f"/v1/feed?user_id={raw}&{GPS}&now={NOW}", 422, "invalid:user_id")
        for label, raw in [
            ("NUL byte", "u%00001"),
            ("newline", "u00001%0A"),
            ("carriage return", "u0%0D0001"),
            ("tab", "u%0900001"),
            ("space", "u%2000001"),
            ("leading space", "%20u00001"),
            ("bidi override", "u%E2%80%AE00001"),
            ("right-to-left mark", "%E2%80%8Fu00001"),
            ("zero-width space", "u%E2%80%8B00001"),
            ("zero-width joiner", "u00001%E2%80%8D"),
            ("byte-order mark", "%EF%BB%BFu00001"),
            ("emoji", "u%F0%9F%8E%89"),
            ("accented letter", "us%C3%A9r"),
            ("cyrillic homoglyph", "u%D1%95er"),
            ("arabic digits", "%D9%A1%D9%A2%D9%A3"),
            ("fullwidth letters", "%EF%BD%95%EF%BC%91"),
            ("invalid UTF-8 byte", "u%FF00001"),
            ("truncated UTF-8 sequence", "u%E2%80"),
            ("SQL", "1%27%20OR%20%271%27%3D%271"),
            ("SQL comment", "u1%3B--"),
            ("path traversal", "..%2F..%2Fetc%2Fpasswd"),
            ("slash", "u%2F1"),
            ("backslash", "u%5C1"),
            ("double quote", "u%221"),
            ("markup", "%3Cscript%3Ealert(1)%3C%2Fscript%3E"),
            ("leading dot", ".hidden"),
            ("leading dash", "-u1"),
            ("129 characters", "u" * 129),
            ("empty", ""),
            ("only a plus (a space)", "+"),
        ]
    ],
    ("user_id missing", "GET", f"/v1/feed?{GPS}&now={NOW}", 422, "invalid:user_id"),
    # coordinates
    *[
        (f"{label}", "GET", f"/v1/feed?user_id=u00001&{query}&now={NOW}", 422, reason)
        for label, query, reason in [
            ("lat above 90", "lat=91&lng=0", "invalid:lat"),
            ("lat below -90", "lat=-90.0001&lng=0", "invalid:lat"),
            ("lng above 180", "lat=0&lng=181", "invalid:lng"),
            ("lng below -180", "lat=0&lng=-180.5", "invalid:lng"),
            ("lat a word", "lat=north&lng=0", "invalid:lat"),
            ("lat empty", "lat=&lng=0", "invalid:lat"),
            ("lat NaN", "lat=NaN&lng=0", "invalid:lat"),
            ("lat infinity", "lat=inf&lng=0", "invalid:lat"),
            ("lng minus infinity", "lat=0&lng=-inf", "invalid:lng"),
            ("lat overflowing", "lat=1e999&lng=0", "invalid:lat"),
            ("lat hexadecimal", "lat=0x10&lng=0", "invalid:lat"),
            ("lat with a decimal comma", "lat=40,7&lng=0", "invalid:lat"),
            ("only lat", "lat=40.7", "partial_location"),
            ("only lng", "lng=-74.0", "partial_location"),
        ]
    ],
    # repeated and unknown parameters
    (
        "lat twice, last valid",
        "GET",
        f"/v1/feed?user_id=u00001&lat=91&lat=40.72&lng=-74.0&now={NOW}",
        422,
        "repeated_parameter",
    ),
    (
        "lat twice, both valid",
        "GET",
        f"/v1/feed?user_id=u00001&lat=40.7&lat=40.72&lng=-74.0&now={NOW}",
        422,
        "repeated_parameter",
    ),
    (
        "user_id twice",
        "GET",
        f"/v1/feed?user_id=u00001&user_id=u00002&{GPS}&now={NOW}",
        422,
        "repeated_parameter",
    ),
    ("now twice", "GET", f"/v1/feed?{OK}&now={NOW}", 422, "repeated_parameter"),
    (
        "lng twice",
        "GET",
        f"/v1/feed?user_id=u00001&lat=40.72&lng=-74.0&lng=-74.1&now={NOW}",
        422,
        "repeated_parameter",
    ),
    ("an unknown parameter", "GET", f"/v1/feed?{OK}&debug=1", 422, "unknown_parameter"),
    ("a misspelt parameter", "GET", f"/v1/feed?userid=u00001&user_id=u00001&{GPS}", 422, "unknown_parameter"),
    # instants
    *[
        (f"now {label}", "GET", f"/v1/feed?user_id=u00001&{GPS}&now={value}", 422, reason)
        for label, value, reason in [
            ("without an offset", "2026-11-05T15:00:00", "bad_time"),
            ("a word", "yesterday", "bad_time"),
            ("empty", "", "bad_time"),
            ("month 13", "2026-13-01T00:00Z", "bad_time"),
            ("hour 25", "2026-11-05T25:00Z", "bad_time"),
            ("offset +25:00", "2026-11-05T15:00:00%2B25:00", "bad_time"),
            ("epoch seconds", "1762354800", "bad_time"),
            ("date only", "2026-11-05", "bad_time"),
            ("too long", "2026-11-05T15:00:00Z" + "0" * 60, "invalid:now"),
            ("in 2100", "2100-01-01T00:00:00Z", "now_out_of_range"),
            ("in 1990", "1990-01-01T00:00:00Z", "now_out_of_range"),
            ("before the published state", "2026-10-20T00:00:00Z", "now_out_of_range"),
            ("a second before it", "2026-11-05T14:59:59Z", "now_out_of_range"),
            ("two days after it", "2026-11-07T15:00:01Z", "now_out_of_range"),
            ("a leap second", "2026-11-05T23:59:60Z", "bad_time"),
        ]
    ],
    # a user nobody published, without a location
    ("unknown user without a location", "GET", f"/v1/feed?user_id=never-seen&now={NOW}", 422, "no_location"),
    # paths and methods
    *[
        (f"{method} {path}", method, path, status, reason)
        for method, path, status, reason in [
            ("GET", "/v1/feeds", 404, "not_found"),
            ("GET", "/v2/feed", 404, "not_found"),
            ("GET", "/feed", 404, "not_found"),
            ("GET", "/", 404, "not_found"),
            ("GET", "/v1/feed/../healthz", 404, "not_found"),
            ("GET", "/.env", 404, "not_found"),
            ("POST", f"/v1/feed?{OK}", 405, "method_not_allowed"),
            ("PUT", f"/v1/feed?{OK}", 405, "method_not_allowed"),
            ("DELETE", f"/v1/feed?{OK}", 405, "method_not_allowed"),
            ("PATCH", f"/v1/feed?{OK}", 405, "method_not_allowed"),
            ("POST", "/healthz", 405, "method_not_allowed"),
            ("DELETE", "/metrics", 405, "method_not_allowed"),
        ]
    ],
]


def _counted(client: TestClient, reason: str, status: int) -> float:
    """``turnout_feed_rejected_total`` for one reason and status (0 when never counted)."""
    pattern = re.compile(
        rf'^turnout_feed_rejected_total\{{(?=.*reason="{re.escape(reason)}")(?=.*status="{status}").*\}} (\S+)$'
    )
    for line in client.get("/metrics").text.splitlines():
        m = pattern.match(line)
        if m:
            return float(m.group(1))
    return 0.0


@pytest.fixture(scope="module")
def served() -> tuple[TestClient, MemoryImpressionLog]:
    from serving.synthetic import make_head, make_world

    world = make_world(n_events=400, n_users=20, seed=3)
    log = MemoryImpressionLog()
    state = make_state(world, (make_head("rsvp", rounds=10), make_head("attend", rounds=10)), impressions=log)
    return TestClient(create_app(state), raise_server_exceptions=False), log


def test_there_are_at_least_75_cases() -> None:
    assert len(CASES) >= 75 and len({c[0] for c in CASES}) == len(CASES)


@pytest.mark.parametrize(("name", "method", "url", "status", "reason"), CASES, ids=[c[0] for c in CASES])
def test_refused_with_a_counted_reason_and_nothing_logged(
    served: tuple[TestClient, MemoryImpressionLog], name: str, method: str, url: str, status: int, reason: str
) -> None:
    client, log = served
    logged, counted = len(log.records), _counted(client, reason, status)
    response = client.request(method, url)
    assert response.status_code == status, (name, response.status_code, response.text)
    assert response.json()["reason"] == reason, response.text
    assert _counted(client, reason, status) == counted + 1
    assert len(log.records) == logged  # a refused request writes no impression


def test_a_good_request_still_serves_and_logs(served: tuple[TestClient, MemoryImpressionLog]) -> None:
    client, log = served
    logged = len(log.records)
    response = client.get(f"/v1/feed?{OK}")
    assert response.status_code == 200 and len(response.json()["events"]) == 25
    assert len(log.records) > logged
    text = client.get("/metrics").text
    assert 'turnout_http_responses_total{method="GET",path="/v1/feed",status="200"}' in text
    assert not re.search(r'turnout_http_responses_total\{[^}]*status="5\d\d"', text)  # never a 5xx
