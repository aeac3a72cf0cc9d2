"""Whether the tests run under CI, and what a missing part means there.

One definition for every test file: `CI` set to 1, true or yes (any case) is CI. Under CI a
missing component (a Debian package, the llama.cpp build, a mount the tests need, an optional
extra of orch) fails the run; elsewhere the test is skipped with the same message.

Optional extras (pyproject.toml [project.optional-dependencies]: plots, parquet, llama, lab,
...): the `test` extra holds what every test needs; a test that needs more says which extra,
either with the marker `@pytest.mark.extra("plots")` (tests/conftest.py checks it before the
test runs) or, in a fixture or helper, with `require_extra("lab")`. Both read the extra's
requirements from pyproject.toml, so the list of packages lives in one place.
"""
from __future__ import annotations

import functools
import os
import tomllib
from importlib import metadata
from pathlib import Path
from typing import NoReturn

import pytest
from packaging.requirements import Requirement

IN_CI = os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")
PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def unavailable(message: str) -> NoReturn:
    """A part a test needs is missing: fail under CI, skip elsewhere."""
    if IN_CI:
        pytest.fail(f"{message} (CI: every part must be installed; this is a failure, not a skip)",
                    pytrace=False)
    pytest.skip(message)


def _unmet(req: Requirement, extra: str = "") -> list[str]:
    """What of `req` is not installed: the distribution, its version, or what its own extras
    (`celery[redis]`: redis) require."""
    if req.marker is not None and not req.marker.evaluate({"extra": extra}):
        return []
    try:
        version = metadata.version(req.name)
    except metadata.PackageNotFoundError:
        return [str(req)]
    if not req.specifier.contains(version, prereleases=True):
        return [f"{req} (found {version})"]
    unmet = []
    for wanted in sorted(req.extras):
        for line in metadata.requires(req.name) or []:
            sub = Requirement(line)
            if sub.marker is not None and sub.marker.evaluate({"extra": wanted}) \
                    and not sub.marker.evaluate({"extra": ""}):
                sub.marker = None           # wanted: the extra asked for it
                unmet += _unmet(sub)
    return unmet


@functools.cache
def missing_from_extra(extra: str) -> tuple[str, ...]:
    """The requirements of orch's optional `extra` that this environment does not satisfy."""
    extras = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]
    if extra not in extras:
        raise ValueError(f"orch has no extra {extra!r} (pyproject.toml: {', '.join(extras)})")
    return tuple(dict.fromkeys(item for line in extras[extra] for item in _unmet(Requirement(line))))


def require_extra(extra: str) -> None:
    """This test needs orch's `extra`: skip without it, or fail under CI."""
    missing = missing_from_extra(extra)
    if missing:
        unavailable(f"needs orch's `{extra}` extra (pip install -e '.[{extra}]'; "
                    f"missing: {', '.join(missing)})")
