"""Model files of a matrix on a device: push the local ones, and know each one's size and
sha256 for provenance (device-path models too: hashed on the device). A 20 GB model is pushed
and hashed once: transports skip a file whose size and sha256 match, and cache the device-side
sha256 next to it. A lost link is ridden out (run/link_retry.py): the push resumes from what
arrived (transports), the device-side stat and hash are asked again."""
from __future__ import annotations

import functools

import time
from dataclasses import dataclass
from pathlib import Path

from orchestrator.config.local_files import not_regular
from orchestrator.config.matrix import LoadedMatrix, ModelFile
from orchestrator.errors import ConfigError
from orchestrator.run.agent_client import file_sha256
from orchestrator.run.link_retry import LinkRetry, retry_link
from orchestrator.run.progress import Progress
from orchestrator.transports.base import Transport, TransportError


@dataclass
class ModelInfo:
    device_path: str
    size: int | None = None
    sha256: str | None = None


def _model_info(transport: Transport, path: str) -> ModelInfo:
    return ModelInfo(path, transport.remote_size(path), transport.remote_sha256(path))


def prepare_models(transport: Transport, loaded: LoadedMatrix,
                   progress: Progress) -> tuple[LoadedMatrix, dict[str, ModelInfo]]:
    """Push `{local: FILE}` models to `<workdir>/models/`; return the matrix with every model
    as a device path, and what is known of each file."""
    matrix = loaded.matrix
    infos: dict[str, ModelInfo] = {}
    paths: dict[str, str] = {}
    for name, spec in matrix.models.items():
        if isinstance(spec, ModelFile):
            local = Path(loaded.path).parent / spec.local
            kind = not_regular(local)   # checked at load too, again now (it may have changed)
            if kind is not None:
                raise ConfigError(f"models.{name}.local: {local} is not a regular file ({kind})")
            if not local.is_file():
                raise TransportError(f"models.{name}: {local} does not exist")
            remote = f"{transport.workdir}/models/{local.name}"
            size = local.stat().st_size
            shown = [0.0]
            retry = LinkRetry(transport, f"the push of {local.name}", progress.note)

            def report(done: int, total: int, label: str = local.name,
                       retry: LinkRetry = retry, shown: list[float] = shown) -> None:
                retry.alive()   # bytes moved: a later cut is a new outage, with its own grace
                # at most one line every 2 s: a 20 GB push takes minutes
                if time.monotonic() - shown[0] >= 2 or done >= total:
                    shown[0] = time.monotonic()
                    progress.note(f"pushing {label}: {done / 1048576:,.0f} of "
                                  f"{total / 1048576:,.0f} MiB")

            pushed = retry.call(functools.partial(transport.push_if_changed, local, remote,
                                                  0o644, report))
            if not pushed:
                progress.note(f"model {local.name}: unchanged on the device, not pushed")
            infos[name] = ModelInfo(remote, size, file_sha256(local))
            paths[name] = remote
        else:
            path = transport.expand_home(spec)
            paths[name] = path
            # hashed on the device, once: the transport caches the sha256 next to the file
            # (`<file>.orch-sha256`, keyed by size and mtime), so a 20 GB model costs one
            # read per device, not one per session; None when the file or sha256sum is missing
            progress.note(f"model {name}: sha256 on the device (cached after the first time)")
            infos[name] = retry_link(
                transport, f"the sha256 of {path}",
                functools.partial(_model_info, transport, path),
                progress.note)
    if not matrix.models:
        return loaded, infos
    resolved = matrix.model_copy(update={"models": paths})
    return loaded.model_copy(update={"matrix": resolved}), infos
