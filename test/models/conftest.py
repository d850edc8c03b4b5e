"""Fixtures for the model-file tests: a tiny synthetic Qwen2 GGUF (fast, no download)."""

import pytest

from tiny_gguf import write_tiny_gguf


@pytest.fixture(scope="session")
def tiny_gguf(tmp_path_factory):
    """Path to a tiny untied Qwen2 GGUF."""
    path = tmp_path_factory.mktemp("tiny_gguf") / "tiny-qwen2.gguf"
    write_tiny_gguf(path, tied=False)
    return path


@pytest.fixture(scope="session")
def tiny_gguf_tied(tmp_path_factory):
    """Path to a tiny Qwen2 GGUF without output.weight (tied embeddings)."""
    path = tmp_path_factory.mktemp("tiny_gguf_tied") / "tiny-qwen2-tied.gguf"
    write_tiny_gguf(path, tied=True, seed=1)
    return path
