"""A device made ready for a session's cells: its facts read and stored, the cooldown's
baseline checked, models pushed, model paths checked. `orch run` and the lab's consumers
(orchestrator/lab) prepare a device the same way."""
from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from orchestrator.config.matrix import LoadedMatrix
from orchestrator.db.store import Store
from orchestrator.errors import ConfigError
from orchestrator.run.model_push import prepare_models
from orchestrator.run.pathcheck import check_model_paths
from orchestrator.run.progress import Progress
from orchestrator.run.runner import DeviceRunner
from orchestrator.transports.base import LinkPolicy, Transport


@dataclass
class PreparedDevice:
    runner: DeviceRunner
    baseline: dict[str, float] | None               # idle temperatures (orch calibrate)
    path_warnings: list[Any] = field(default_factory=list)


def prepare_device(store: Store, transport: Transport, adapter: Any, loaded: LoadedMatrix,
                   device: str, kind: str, device_id: int, progress: Progress,
                   link: LinkPolicy, sleep: Callable[[float], None] | None = None,
                   stop: threading.Event | None = None, force: bool = False) -> PreparedDevice:
    """A runner for `loaded` on an open transport (its session id is set by the caller).
    ConfigError when the matrix cannot run there (a relative cooldown without a calibrated
    baseline, a refused model path)."""
    runner = DeviceRunner(store, transport, adapter, loaded, 0, device_id, progress,
                          link=link, stop=stop, force=force,
                          **({"sleep": sleep} if sleep else {}))
    facts = runner.client.facts()
    store.upsert_device(device, kind, facts)
    runner.facts = dict(facts)
    if str(facts.get("mem_total_kb", "")).isdigit():
        runner.mem_total_kb = int(facts["mem_total_kb"])
    baseline = store.device_by_name(device).idle_baseline
    matrix = loaded.matrix
    if matrix.cooldown.is_condition:
        try:
            matrix.cooldown.threshold_mC(baseline)
        except ValueError as exc:
            raise ConfigError(f"{loaded.path}: {exc}: run `orch calibrate --device "
                              f"{device}` first, or give an absolute `until: 40C`") from None
    runner.loaded, runner.model_info = prepare_models(transport, runner.loaded, progress)
    path_warnings = check_model_paths(transport, runner.loaded)  # ConfigError when refused
    for warning in path_warnings:
        progress.note(warning)
    return PreparedDevice(runner, baseline, path_warnings)
