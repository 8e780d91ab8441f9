"""Fixtures and the test session's settings; shared functions and constants are in helpers.py."""
from __future__ import annotations

import pytest

import helpers  # noqa: F401  (sets the session's compile cache before any test runs)


@pytest.fixture(scope="session")
def tools():
    from iree_dispatch_profiler.iree.tools import IreeTools
    return IreeTools.locate()
