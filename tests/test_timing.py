"""The suite's limits scale with the machine's slowness (tests/timing.py)."""

from __future__ import annotations

import time

import pytest

from tests import timing
from tests.conftest import wait_for


def test_the_factor_is_measured_once_and_never_below_one():
    factor = timing.slowness()
    assert 1.0 <= factor <= timing.LARGEST
    assert float(__import__("os").environ[timing.VARIABLE]) == factor  # the workers read the controller's
    assert 1.0 <= timing.measure() <= timing.LARGEST


def test_wait_for_and_the_test_limit_are_scaled(request, monkeypatch):
    assert request.node.get_closest_marker("timeout").args[0] == pytest.approx(300 * timing.slowness())
    monkeypatch.setenv(timing.VARIABLE, "3")
    start = time.monotonic()
    with pytest.raises(AssertionError, match="timed out after 1 s waiting for nothing"):
        wait_for(lambda: False, timeout=0.3, what="nothing")
    assert time.monotonic() - start >= 0.9


@pytest.mark.timeout(50)
def test_a_tests_own_limit_is_scaled_too(request):
    assert request.node.get_closest_marker("timeout").args[0] == pytest.approx(50 * timing.slowness())


def test_a_factor_that_is_not_a_number_is_named(monkeypatch):
    monkeypatch.setenv(timing.VARIABLE, "fast")
    with pytest.raises(SystemExit, match="EMBER_TEST_SLOWNESS='fast' is not a number"):
        timing.slowness()
