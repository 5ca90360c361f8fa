"""Request-time crosses: numbers that only exist once a user asks, computed by Feast on read.

A tree splits one feature at a time, so relationships between two entities are computed
before the model sees them (design: "Raw latitude and longitude is a bad feature"). The same
code runs in training (on the point-in-time frame) and in serving (on the online rows), so
the crosses cannot drift apart. Python mode: online reads skip the pandas round trip.

The UDFs are serialized into the registry (dill), so each imports what it uses inside its body;
the geometry is ``contracts.geo``'s, the same code serving runs on whole arrays.
"""

from __future__ import annotations

from typing import Any

from feast import Field
from feast.on_demand_feature_view import on_demand_feature_view
from feast.types import Float64, Int64

from features import sources, views


# Distance, its bucket, lead time and local hour-of-week: the request-time context of a candidate.
@on_demand_feature_view(
    sources=[sources.request_context, views.event_features[["venue_lat", "venue_lng", "start_ts"]]],
    schema=[
        Field(name="distance_km", dtype=Float64),
        Field(name="distance_bucket", dtype=Int64),
        Field(name="lead_time_hours", dtype=Float64),
        Field(name="request_hour_of_week", dtype=Int64),
    ],
    mode="python",
    description="Haversine km request<->venue and its 2/5/10/20/40-mile bucket (0..5), hours until "
    "the start, and the request's local hour of week (Monday 00:00 = 0).",
)
def request_crosses(inputs: dict[str, list[Any]]) -> dict[str, list[Any]]:
    import numpy as np

    from contracts.geo import distance_band, haversine_km

    def column(name: str) -> Any:
        return np.array([np.nan if v is None else v for v in inputs[name]], dtype=np.float64)

    distance_km = haversine_km(
        column("request_lat"), column("request_lng"), column("venue_lat"), column("venue_lng")
    )
    bucket = distance_band(distance_km)

    request_ts = column("request_ts")
    lead_time_hours = (column("start_ts") - request_ts) / 3600.0
    local_s = request_ts + column("request_utc_offset_min") * 60.0
    # 1970-01-01 was a Thursday: day index 3 when Monday is 0.
    hour_of_week = ((np.floor(local_s / 86400.0) + 3) % 7) * 24 + np.floor((local_s % 86400.0) / 3600.0)

    def floats(values: Any) -> list[float | None]:
        return [None if np.isnan(v) else float(v) for v in values]

    def ints(values: Any, defined: Any) -> list[int | None]:
        return [int(v) if ok else None for v, ok in zip(values, defined, strict=True)]

    return {
        "distance_km": floats(distance_km),
        "distance_bucket": ints(bucket, ~np.isnan(distance_km)),
        "lead_time_hours": floats(lead_time_hours),
        "request_hour_of_week": ints(hour_of_week, ~np.isnan(hour_of_week)),
    }


# The user's shrunken affinity for this event's category: the cross a tree cannot build from
# 16 affinity columns and a category id without one split per category.
@on_demand_feature_view(
    sources=[views.user_features[list(views.AFFINITY_FEATURES)], views.event_features[["category"]]],
    schema=[Field(name="category_affinity", dtype=Float64)],
    mode="python",
    description="user_features.aff_<c> for the event's category c.",
)
def category_affinity(inputs: dict[str, list[Any]]) -> dict[str, list[Any]]:
    values: list[Any] = []
    for i, category in enumerate(inputs["category"]):
        if category is None:
            values.append(None)  # event unknown: missing, like any feature of a missing row
        elif f"aff_{category}" in inputs:
            values.append(inputs[f"aff_{category}"][i])
        else:
            # A category outside the contract (validation rejects it in gold); NaN rather than None
            # also lets Feast infer the output type from its random-input dry run at apply.
            values.append(float("nan"))
    return {"category_affinity": values}


ON_DEMAND_VIEWS = (request_crosses, category_affinity)
