"""Fixtures for the core tests (tensors, runtime, C ABI)."""

from __future__ import annotations

import gc

import pytest


@pytest.fixture
def quiet_gc():
    """Collect garbage now and keep the collector off during the test, so byte counters move
    only by what the test itself allocates and frees (a tensor of an earlier test that is
    collected mid-test would otherwise change them)."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
