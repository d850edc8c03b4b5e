"""Fixtures for the op tests: the dtypes to run, a seeded generator per test case, and the
bridge between torch (the reference) and llaisys with identical bits (op_bridge.py).

Every op test builds its inputs in torch *in the target dtype*, hands llaisys the very same
bits, computes the reference in float64 from those rounded inputs, and compares in float32.
So the only error measured is the op's own (accumulation order and the final rounding).
"""

from __future__ import annotations

import zlib

import pytest
import torch

from op_bridge import FLOAT_DTYPES, Bridge


@pytest.fixture(params=FLOAT_DTYPES)
def dtype(request) -> str:
    """Each test that takes `dtype` runs once per float dtype."""
    return request.param


@pytest.fixture(params=FLOAT_DTYPES)
def weight_dtype(request) -> str:
    """For ops whose weights may have another dtype than the activations."""
    return request.param


@pytest.fixture
def gen(request) -> torch.Generator:
    """A torch generator seeded from the test's id: reproducible, different per test case."""
    g = torch.Generator()
    g.manual_seed(zlib.crc32(request.node.nodeid.encode()))
    return g


@pytest.fixture
def bridge(gen) -> Bridge:
    return Bridge(gen)
