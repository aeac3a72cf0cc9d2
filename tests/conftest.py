"""Shared test fixtures. Real parts only: a private sshd, the real adb server with an emulated
phone, mksh + toybox. Under CI=true a missing part is a failure, never a skip."""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest


def _own_cache_home() -> None:
    """The built-in `local` device's workdir is $XDG_CACHE_HOME/orch/devices/local: each test
    process (each pytest-xdist worker) gets a cache home of its own, so two workers' runs on
    `local` never meet (a device whose job is still busy refuses the next `start`), and no test
    writes into the user's cache. orch's build caches (llama.cpp, probes) stay where they are,
    pinned by their own variables before XDG_CACHE_HOME moves."""
    import atexit
    import tempfile

    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    os.environ.setdefault("ORCH_LLAMA_CACHE", os.path.join(base, "orch", "llama.cpp"))
    os.environ.setdefault("ORCH_PROBE_CACHE", os.path.join(base, "orch", "probes"))
    home = tempfile.mkdtemp(prefix="orch-test-cache-")
    os.environ["XDG_CACHE_HOME"] = home
    atexit.register(shutil.rmtree, home, True)


_own_cache_home()    # before anything imports orchestrator

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
FIXTURES = TESTS / "fixtures"
sys.path.insert(0, str(TESTS))

from agent_helpers import SHELL_NAMES, make_shell, missing_tools  # noqa: E402
from ci import IN_CI, missing_from_extra, require_extra, unavailable  # noqa: E402,F401
from conftest_adb import adb_device, adb_server, phone  # noqa: E402,F401
from pg_fixture import pg_url  # noqa: F401
from redis_fixture import redis_db, redis_url  # noqa: F401
from sshd_fixture import sshd, sshd_factory  # noqa: E402,F401
import unit_tier  # noqa: E402


def require_tool(name: str) -> str:
    """Path of a needed executable; fail under CI=true, skip elsewhere, when missing."""
    path = shutil.which(name) or (f"/usr/sbin/{name}" if os.path.exists(f"/usr/sbin/{name}") else None)
    if path is None:
        message = f"{name} is not installed (scripts/install --test installs it)"
        unavailable(message)
    return path


def _extras(item: pytest.Item) -> list[str]:
    return [extra for mark in item.iter_markers("extra") for extra in mark.args]


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """`pytest -m unit` (that expression alone) collects only the files that hold unit tests
    (tests/unit_tier.py): importing the other seventy test modules cost more than the tier's
    tests."""
    if config.getoption("markexpr") == "unit" and collection_path.suffix == ".py" \
            and collection_path.name.startswith("test_") \
            and collection_path.name not in unit_tier.UNIT:
        return True
    return None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The unit tier: the tests tests/unit_tier.py lists are marked `unit` (`pytest -m unit`).

    `@pytest.mark.extra("plots")`: the test needs that optional extra of orch (tests/ci.py).
    Without it the test is skipped here, so the skip is reported at the test's line; under
    CI=true it is not skipped but fails (pytest_runtest_setup)."""
    unit_tier.mark(items)
    for item in items:
        missing = [extra for extra in _extras(item) if missing_from_extra(extra)]
        if missing and not IN_CI:
            item.add_marker(pytest.mark.skip(
                reason=f"needs orch's `{'`, `'.join(missing)}` extra "
                       f"(pip install -e '.[{','.join(missing)}]')"))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test's extras are installed, or it fails under CI=true (tests/ci.py require_extra).
    A unit test (tests/unit_tier.py) that starts a process, connects a socket or opens a
    database fails, in every run, from the setup of its fixtures on: the tier stays what its
    name says."""
    for extra in _extras(item):
        require_extra(extra)
    unit_tier.guard_on(item)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None):
    """The guard ends after the test's own teardown, or before it when that teardown also stops
    fixtures shared with other tests (the last test of a module or of the worker: an sshd, the
    adb server, PostgreSQL): stopping those is their owner's doing, not the unit test's."""
    if unit_tier.tears_down_shared(item, nextitem):
        unit_tier.guard_off(item)
    try:
        return (yield)
    finally:
        unit_tier.guard_off(item)


@pytest.fixture
def workspace(tmp_path, monkeypatch):
    """The current directory for an `orch` test: an inventory with two local devices (`local`,
    `other`) whose workdirs live under tmp_path, no ORCH_DB, and the fake bmoe engine."""
    import textwrap

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ORCH_DB", raising=False)
    (tmp_path / "devices.yaml").write_text(textwrap.dedent(f"""\
        devices:
          local:
            kind: local
            workdir: {tmp_path}/dev-local
          other:
            kind: local
            workdir: {tmp_path}/dev-other
        """))
    (tmp_path / "fake_bmoe.sh").write_bytes((TESTS / "engines" / "fake_bmoe.sh").read_bytes())
    return tmp_path


@pytest.fixture
def store(tmp_path):
    from orchestrator.db.store import Store

    return Store.open(str(tmp_path / "orch.db"))


@pytest.fixture(autouse=True)
def _close_figures():
    """Tests that look at matplotlib figures directly leave them open; close them after each
    test, so the suite never holds more than one test's figures."""
    yield
    if "matplotlib.pyplot" in sys.modules:
        sys.modules["matplotlib.pyplot"].close("all")


@pytest.fixture(params=SHELL_NAMES)
def shell(request, tmp_path):
    """The device shells the agent must run under (mksh + a toybox-only PATH, dash, bash), one
    test per shell; a missing one is a skip, under CI a failure."""
    missing = missing_tools(request.param)
    if missing:
        unavailable(f"{request.param}: missing {', '.join(missing)}")
    return make_shell(request.param, tmp_path)
