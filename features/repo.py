"""Every object of the repository, listed once: what ``apply`` registers and what it hashes."""

from __future__ import annotations

from typing import Final

from feast import Entity, FeatureService, FeatureView, OnDemandFeatureView, RequestSource
from feast.infra.offline_stores.contrib.spark_offline_store.spark_source import SparkSource

from features import crosses, entities, services, sources, views

ENTITIES: Final[tuple[Entity, ...]] = (
    entities.user,
    entities.event,
    entities.organizer,
    entities.venue,
    entities.series,
    entities.market,
)
GOLD_SOURCES: Final[tuple[SparkSource, ...]] = sources.GOLD_SOURCES
REQUEST_SOURCES: Final[tuple[RequestSource, ...]] = (sources.request_context,)
FEATURE_VIEWS: Final[tuple[FeatureView, ...]] = views.FEATURE_VIEWS
ON_DEMAND_VIEWS: Final[tuple[OnDemandFeatureView, ...]] = crosses.ON_DEMAND_VIEWS
FEATURE_SERVICES: Final[tuple[FeatureService, ...]] = services.FEATURE_SERVICES
