"""Ask a running feed service (``turnout serve``) for a feed: wait for it, then GET /v1/feed."""

from __future__ import annotations

import time
from typing import Any

from serving.schema import FeedResult


class ServiceError(RuntimeError):
    """The service did not answer in time, or refused the request (the message says which)."""


def wait_until_up(base: str, wait_s: float) -> None:
    """Poll ``/healthz`` until it answers (any status) or ``wait_s`` passes."""
    import httpx

    deadline = time.monotonic() + wait_s
    while True:
        try:
            httpx.get(f"{base}/healthz", timeout=5).raise_for_status()
            return
        except httpx.HTTPError as e:
            if time.monotonic() >= deadline:
                raise ServiceError(f"no service at {base}: {e}") from e
            time.sleep(0.5)


def fetch_feed(server: str, wait_s: float, params: dict[str, Any]) -> FeedResult:
    """One feed from the service at ``server`` (after waiting up to ``wait_s`` for it)."""
    import httpx
    from pydantic import TypeAdapter

    base = server.rstrip("/")
    wait_until_up(base, wait_s)
    response = httpx.get(
        f"{base}/v1/feed", params={k: v for k, v in params.items() if v is not None}, timeout=30
    )
    if response.status_code != 200:
        raise ServiceError(f"no feed ({response.status_code}): {response.text}")
    return TypeAdapter(FeedResult).validate_python(response.json())
