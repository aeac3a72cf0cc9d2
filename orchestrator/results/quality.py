"""A session's stored probe answers -> per-config accuracy with its Wilson interval, the
largest drop against the baseline the sample rules out, and the questions whose graded answers
differ between configs. Pure reading: the store's `quality` table (written by running.py)."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.config.stored_matrix import stored_matrix
from orchestrator.db.runs import Sessions
from orchestrator.db.quality import probe_rows
from orchestrator.db.store import Store
from orchestrator.stats.proportions import DropBound, paired_drop_bound, wilson
from orchestrator.stats.status import Status



@dataclass
class ConfigQuality:
    model: str
    config: str
    correct: int
    total: int                 # probes answered (the engine ended ok); failed ones are apart
    failed: int
    interval: tuple[float, float] | None   # Wilson 95%, proportions
    drop: DropBound | None = None          # against the baseline (None: the baseline itself)

    @property
    def accuracy(self) -> float | None:
        return self.correct / self.total if self.total else None


@dataclass
class Differ:
    model: str
    id: str
    expected: str | None
    answers: dict[str, str | None]    # config -> graded answer (None: nothing readable)


@dataclass
class ModelQuality:
    model: str
    baseline: str
    configs: list[ConfigQuality] = field(default_factory=list)
    differ: list[Differ] = field(default_factory=list)


def _baseline(store: Store, session_id: int, model: str, configs: Sequence[str]) -> str:
    """The matrix's baseline for the model when it is among the probed configs, else the
    first probed config (the same choice the A/B table makes)."""
    matrix = stored_matrix(Sessions(store).one(session_id).matrix_text)
    if matrix is not None:
        try:
            chosen = matrix.baseline_for(model)
        except (IndexError, KeyError):
            return configs[0]
        if chosen in configs:
            return chosen
    return configs[0]


def summarise(store: Store, session_id: int, model: str | None = None) -> list[ModelQuality]:
    """One ModelQuality per model with probe rows in the session, configs in run order."""
    by_model: dict[str, list[Any]] = {}
    for row in probe_rows(store, session_id, model):
        by_model.setdefault(row.model, []).append(row)
    return [_model(store, session_id, name, members) for name, members in by_model.items()]


def _model(store: Store, session_id: int, model: str, members: list[Any]) -> ModelQuality:
    configs = list(dict.fromkeys(r.config for r in members))
    probes = list(dict.fromkeys(r.probe_id for r in members))
    cell = {(r.config, r.probe_id): r for r in members}
    out = ModelQuality(model, _baseline(store, session_id, model, configs))
    outcome = {c: {p: bool(r.correct) for (c2, p), r in cell.items()
                   if c2 == c and r.status == Status.OK} for c in configs}
    for config in configs:
        answered = outcome[config]
        correct = sum(answered.values())
        failed = sum(1 for (c, _), r in cell.items() if c == config and r.status != Status.OK)
        quality = ConfigQuality(model, config, correct, len(answered), failed,
                                wilson(correct, len(answered)))
        if config != out.baseline:
            common = [p for p in probes if p in answered and p in outcome[out.baseline]]
            quality.drop = paired_drop_bound([outcome[out.baseline][p] for p in common],
                                             [answered[p] for p in common])
        out.configs.append(quality)
    for probe in probes:
        answers = {c: (cell[(c, probe)].answer if cell[(c, probe)].status == Status.OK else None)
                   for c in configs if (c, probe) in cell}
        if len(set(answers.values())) > 1:
            first = next(r for (c, p), r in cell.items() if p == probe)
            out.differ.append(Differ(model, probe, first.expected, answers))
    return out
