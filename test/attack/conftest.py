"""Fixtures of the attack suite (the helpers are in crafted.py)."""

import os

import pytest

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # cases run in forked children: no Rust thread pool

from .crafted import write_tiny_dir  # noqa: E402


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    """A valid tiny model directory; tests copy it before changing anything."""
    return write_tiny_dir(tmp_path_factory.mktemp("attack_base") / "tiny")
