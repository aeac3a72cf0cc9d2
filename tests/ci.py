"""Whether the tests run under CI, and what a missing part means there.

One definition for every test file: `CI` set to 1, true or yes (any case) is CI. Under CI a
missing component (a Debian package, the llama.cpp build, a mount the tests need) fails the
run; elsewhere the test is skipped with the same message.
"""
from __future__ import annotations

import os
from typing import NoReturn

import pytest

IN_CI = os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def unavailable(message: str) -> NoReturn:
    """A part a test needs is missing: fail under CI, skip elsewhere."""
    if IN_CI:
        pytest.fail(f"{message} (CI: every part must be installed; this is a failure, not a skip)",
                    pytrace=False)
    pytest.skip(message)
