"""A device made ready for a matrix, before any session on it: its facts read and stored, the
cooldown's baseline checked, models pushed, model paths checked. `orch run` and the lab's
consumers (orchestrator/lab) prepare a device the same way; run/device_session.py then
begins a session on the prepared device. Preparation writes no run and needs no session id:
`orch run` creates its session only after preparing (the session stores the device's facts,
and a device still busy with another job is refused before a session exists)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from orchestrator.config.matrix import LoadedMatrix
from orchestrator.db.store import Store
from orchestrator.engines import EngineAdapter
from orchestrator.errors import ConfigError
from orchestrator.run.agent_client import AgentClient
from orchestrator.run.model_push import ModelInfo, prepare_models
from orchestrator.run.pathcheck import check_model_paths
from orchestrator.run.progress import Progress
from orchestrator.transports.base import Transport


@dataclass
class PreparedDevice:
    """What preparation found: the open transport and its agent client, the matrix with
    every model as its path on the device, and what a session on the device starts from."""

    store: Store
    transport: Transport
    client: AgentClient
    adapter: EngineAdapter
    loaded: LoadedMatrix                     # models as device paths (model_push.py)
    device: str
    device_id: int
    progress: Progress
    facts: dict[str, Any] = field(default_factory=dict)
    model_info: dict[str, ModelInfo] = field(default_factory=dict)
    baseline: dict[str, float] | None = None   # idle temperatures (orch calibrate)
    path_warnings: list[Any] = field(default_factory=list)   # PathWarning (pathcheck.py)


def prepare_device(store: Store, transport: Transport, adapter: EngineAdapter,
                   loaded: LoadedMatrix, device: str, kind: str, device_id: int,
                   progress: Progress) -> PreparedDevice:
    """Prepare `device` (open on `transport`) for `loaded`. ConfigError when the matrix cannot
    run there (a relative cooldown without a calibrated baseline, a refused model path)."""
    client = AgentClient(transport)
    facts = dict(client.facts())
    store.upsert_device(device, kind, facts)
    baseline = store.device_by_name(device).idle_baseline  # type: ignore[union-attr]  # upserted just above
    cooldown = loaded.matrix.cooldown
    if cooldown.is_condition:
        try:
            cooldown.threshold_mC(baseline)
        except ValueError as exc:
            raise ConfigError(f"{loaded.path}: {exc}: run `orch calibrate --device "
                              f"{device}` first, or give an absolute `until: 40C`") from None
    loaded, model_info = prepare_models(transport, loaded, progress)
    path_warnings = check_model_paths(transport, loaded)  # ConfigError when refused
    for warning in path_warnings:
        progress.note(warning)
    return PreparedDevice(store, transport, client, adapter, loaded, device, device_id,
                          progress, facts, model_info, baseline, path_warnings)
