"""The MLflow model registry as its readers see it: which version holds an alias, and the head it
carries (plain files, never unpickled).

Aliases, not stages (MLflow 3): ``champion`` serves, ``challenger`` is the newest candidate,
``previous`` is what ``champion`` replaced. Writing them (register, gate, promote, roll back) is
the training stage's job (``pipelines.training.registry``).
"""

from __future__ import annotations

import logging
import os
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

from conf import Settings
from models.compiled import MANIFEST_FILE
from models.heads import SIDECAR_FILE, Head

log = logging.getLogger(__name__)

CHAMPION, CHALLENGER, PREVIOUS = "champion", "challenger", "previous"
SQLITE_PREFIX = "sqlite:///"


class RegistryMissing(FileNotFoundError):
    """The tracking store the settings name is not there (a reader never creates an empty one)."""


def model_name(settings: Settings, head: str) -> str:
    return f"{settings.training.experiment_prefix}-p_{head}"


def client(settings: Settings, create: bool = False) -> Any:
    """An ``MlflowClient`` on the settings' tracking store (SQLite file or server).

    ``create=False`` (readers) refuses a SQLite store that does not exist: MLflow would create an
    empty database there and every read would then find nothing, silently.
    """
    import mlflow
    from mlflow import MlflowClient

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # logs, not progress bars
    uri = settings.mlflow.tracking_uri
    if uri.startswith(SQLITE_PREFIX):
        path = Path(uri.removeprefix(SQLITE_PREFIX))
        if create:
            path.parent.mkdir(parents=True, exist_ok=True)
        elif not path.is_file() or path.stat().st_size == 0:
            raise RegistryMissing(f"no MLflow tracking store at {path} (train a head first)")
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    return MlflowClient(tracking_uri=uri, registry_uri=uri)


def alias_version(mlflow_client: Any, name: str, alias: str) -> Any | None:
    """The model version holding ``alias``, or None."""
    from mlflow.exceptions import MlflowException

    try:
        return mlflow_client.get_model_version_by_alias(name, alias)
    except MlflowException:
        return None


def alias_versions(settings: Settings, heads: tuple[str, ...], alias: str = CHAMPION) -> dict[str, str]:
    """``{head: version}`` for every head whose model has ``alias``: one cheap lookup per head,
    no artifact downloaded (a poller compares these before loading anything)."""
    c = client(settings)
    out: dict[str, str] = {}
    for head in heads:
        version = alias_version(c, model_name(settings, head), alias)
        if version is not None:
            out[head] = str(version.version)
    return out


def load_head(settings: Settings, head: str, alias: str = CHAMPION) -> tuple[Head, Any] | None:
    """The head holding ``alias`` (files only, no pickle) and its model version; None if unset."""
    version = alias_version(client(settings), model_name(settings, head), alias)
    return None if version is None else load_version(settings, head, str(version.version))


def load_version(settings: Settings, head: str, version_number: str) -> tuple[Head, Any]:
    """One registered version's head (files only, no pickle) and the version itself."""
    import mlflow

    name = model_name(settings, head)
    version = client(settings).get_model_version(name, version_number)
    target = Path(tempfile.mkdtemp(prefix=f"turnout-{head}-"))
    local = Path(mlflow.artifacts.download_artifacts(artifact_uri=version.source, dst_path=str(target)))
    sidecars = list(local.rglob(SIDECAR_FILE))
    if len(sidecars) != 1:
        raise FileNotFoundError(f"{version.source}: expected one {SIDECAR_FILE}, found {len(sidecars)}")
    loaded = Head.load(local, sidecar=sidecars[0])
    manifests = list(local.rglob(MANIFEST_FILE))
    if manifests:
        loaded, why = loaded.with_compiled(manifests[0])
        if why:
            log.warning("%s v%s: %s", name, version.version, why)
    else:
        log.info("%s v%s has no compiled trees: scoring with LightGBM", name, version.version)
    return loaded, version


AS_OF_TAG = "data.as_of"  # the instant a version's training data reaches (its data time)
DECISION_TAG = "promotion.decision"


def data_time(version: Any) -> datetime | None:
    """A model version's data time (``AS_OF_TAG``), None for one registered without it."""
    raw = (version.tags or {}).get(AS_OF_TAG)
    return datetime.fromisoformat(raw) if raw else None


def champion_at(settings: Settings, head: str, as_of: datetime) -> tuple[Head, Any] | None:
    """The head that was champion for data before ``as_of``: of the versions promoted (and not
    rolled back), the one with the newest data time strictly before ``as_of``.

    A challenger trained as of ``as_of`` is gated against this one, so training the same instant
    again compares with the same champion and decides the same way, whatever was promoted since.
    Registries whose versions carry no data time fall back to the current ``champion`` alias.
    """
    c = client(settings)
    name = model_name(settings, head)
    promoted = [
        (t, v)
        for v in c.search_model_versions(f"name='{name}'")
        if (v.tags or {}).get(DECISION_TAG) == "promoted" and (t := data_time(v)) is not None and t < as_of
    ]
    if not promoted:
        has_data_times = any(data_time(v) is not None for v in c.search_model_versions(f"name='{name}'"))
        return None if has_data_times else load_head(settings, head)
    _, version = max(promoted, key=lambda tv: (tv[0], int(tv[1].version)))
    return load_version(settings, head, str(version.version))
