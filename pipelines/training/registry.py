"""The MLflow registry side of training: register from a run, gate, move aliases, load heads.

Aliases, not stages (MLflow 3): a new version gets ``challenger``; if every gate passes it
becomes ``champion`` and the version it replaces becomes ``previous``; a failed gate leaves
``champion`` where it was and records why on the version. Setting an alias is last-writer-wins,
so the gate decides first and the aliases move after, each move logged.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path
from typing import Any

from conf import Settings
from models.compiled import MANIFEST_FILE
from models.heads import SIDECAR_FILE, Head

log = logging.getLogger(__name__)

CHAMPION, CHALLENGER, PREVIOUS = "champion", "challenger", "previous"


def configure(settings: Settings) -> Any:
    """Point MLflow at the settings' tracking server / SQLite file; returns a client."""
    import mlflow
    from mlflow import MlflowClient

    if settings.mlflow.tracking_uri.startswith("sqlite:///"):
        Path(settings.mlflow.tracking_uri.removeprefix("sqlite:///")).parent.mkdir(
            parents=True, exist_ok=True
        )
    mlflow.set_tracking_uri(settings.mlflow.tracking_uri)
    mlflow.set_registry_uri(settings.mlflow.tracking_uri)
    return MlflowClient(tracking_uri=settings.mlflow.tracking_uri, registry_uri=settings.mlflow.tracking_uri)


def experiment_name(settings: Settings, head: str) -> str:
    return f"{settings.training.experiment_prefix}-p_{head}"


def ensure_experiment(settings: Settings, name: str) -> str:
    """The experiment's id, creating it with artifacts under the settings' artifact root."""
    client = configure(settings)
    found = client.get_experiment_by_name(name)
    if found is not None:
        return str(found.experiment_id)
    return str(client.create_experiment(name, artifact_location=f"{settings.mlflow.artifact_root}/{name}"))


def model_name(settings: Settings, head: str) -> str:
    return f"{settings.training.experiment_prefix}-p_{head}"


def alias_version(client: Any, name: str, alias: str) -> Any | None:
    """The model version holding ``alias``, or None."""
    from mlflow.exceptions import MlflowException

    try:
        return client.get_model_version_by_alias(name, alias)
    except MlflowException:
        return None


def register(settings: Settings, run_id: str, head: str, artifact_path: str = "model") -> Any:
    """Register the model logged by ``run_id`` (never "the latest") and mark it ``challenger``."""
    import mlflow

    client = configure(settings)
    name = model_name(settings, head)
    version = mlflow.register_model(f"runs:/{run_id}/{artifact_path}", name)
    if version.run_id != run_id:
        raise RuntimeError(
            f"registered version {version.version} belongs to run {version.run_id}, not {run_id}"
        )
    client.set_registered_model_alias(name, CHALLENGER, version.version)
    log.info("%s v%s registered from run %s as %s", name, version.version, run_id, CHALLENGER)
    return version


def promote(settings: Settings, head: str, version: str, promote_it: bool, reason: str) -> dict[str, Any]:
    """Move ``champion`` to ``version`` (old champion -> ``previous``) or leave it, recording why."""
    client = configure(settings)
    name = model_name(settings, head)
    client.set_model_version_tag(
        name, version, "promotion.decision", "promoted" if promote_it else "rejected"
    )
    client.set_model_version_tag(name, version, "promotion.reason", reason)
    old = alias_version(client, name, CHAMPION)
    if not promote_it:
        log.info(
            "%s v%s not promoted: %s (champion stays %s)", name, version, reason, old.version if old else None
        )
        return {"promoted": False, "champion": old.version if old else None, "reason": reason}
    if old is not None and old.version != version:
        client.set_registered_model_alias(name, PREVIOUS, old.version)
    client.set_registered_model_alias(name, CHAMPION, version)
    client.delete_registered_model_alias(name, CHALLENGER)
    log.info(
        "%s champion %s -> %s (previous %s)",
        name,
        old.version if old else None,
        version,
        old.version if old else None,
    )
    return {"promoted": True, "champion": version, "previous": old.version if old else None, "reason": reason}


def rollback(settings: Settings, head: str) -> dict[str, Any]:
    """Put ``previous`` back as ``champion``; the rolled-back version becomes ``previous``."""
    client = configure(settings)
    name = model_name(settings, head)
    prev, champ = alias_version(client, name, PREVIOUS), alias_version(client, name, CHAMPION)
    if prev is None:
        raise LookupError(f"{name} has no '{PREVIOUS}' version to roll back to")
    client.set_registered_model_alias(name, CHAMPION, prev.version)
    if champ is not None:
        client.set_registered_model_alias(name, PREVIOUS, champ.version)
        client.set_model_version_tag(name, champ.version, "promotion.decision", "rolled back")
    log.info("%s rolled back: champion %s -> %s", name, champ.version if champ else None, prev.version)
    return {"champion": prev.version, "previous": champ.version if champ else None}


def load_head(settings: Settings, head: str, alias: str = CHAMPION) -> tuple[Head, Any] | None:
    """The head holding ``alias`` (files only, no pickle) and its model version; None if unset."""
    import mlflow

    client = configure(settings)
    version = alias_version(client, model_name(settings, head), alias)
    if version is None:
        return None
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
            log.warning("%s v%s: %s", model_name(settings, head), version.version, why)
    else:
        log.info(
            "%s v%s has no compiled trees: scoring with LightGBM", model_name(settings, head), version.version
        )
    return loaded, version
