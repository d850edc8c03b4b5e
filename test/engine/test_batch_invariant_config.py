"""Batch invariance is configuration: LLM(batch_invariant=...), WorkerConfig.batch_invariant,
`llaisys serve --batch-invariant` and `llaisys generate --batch-invariant` reach the process's
switch (llaisys.runtime.set_batch_invariant; what it does to the linear is test/ops/
test_batch_invariant.py's). None keeps the process's setting; a GPU refuses it before any load."""

import argparse

import pytest

from llaisys import runtime
from llaisys.engine import LLM
from llaisys.engine import worker as worker_mod
from llaisys.engine.worker import Worker, WorkerConfig


@pytest.fixture
def restore():
    yield
    runtime.set_batch_invariant(False)


def test_llm_sets_it_for_the_process(tiny, restore):
    kw = dict(kv_cache_memory="4MiB", max_model_len=128, threads=1)
    assert runtime.batch_invariant() is False
    with LLM(tiny, batch_invariant=True, **kw):
        assert runtime.batch_invariant() is True
    with LLM(tiny, **kw):  # None: the setting stays
        assert runtime.batch_invariant() is True
    with LLM(tiny, batch_invariant=False, **kw):
        assert runtime.batch_invariant() is False


def test_a_gpu_refuses_it_before_the_load(tiny, monkeypatch, restore):
    monkeypatch.setattr(worker_mod.runtime, "device_count", lambda d: 1)  # a GPU, said to be there
    monkeypatch.setattr(worker_mod, "load_checkpoint", lambda *a, **k: pytest.fail("loaded"))
    with pytest.raises(ValueError, match="batch_invariant governs the CPU"):
        Worker(WorkerConfig(model=tiny, device="nvidia", batch_invariant=True))
    assert runtime.batch_invariant() is False


def test_the_commands_take_the_flag():
    from llaisys.cli import build_parser

    parser = build_parser()
    assert parser.parse_args(["serve", "--batch-invariant"]).batch_invariant is True
    assert parser.parse_args(["serve"]).batch_invariant is None
    assert parser.parse_args(["generate", "hi", "--batch-invariant"]).batch_invariant is True
    assert parser.parse_args(["generate", "hi"]).batch_invariant is None


def test_serve_passes_it_to_the_engine(monkeypatch):
    from llaisys.server import serve

    seen = {}

    class Stop(Exception):
        pass

    def registry(specs, kwargs, *a, **k):
        seen.update(kwargs)
        raise Stop

    parser = argparse.ArgumentParser()
    serve.add_serve_parser(parser.add_subparsers(dest="cmd"))
    monkeypatch.setattr("llaisys.server.state.registry.Registry", registry)
    with pytest.raises(Stop):
        serve.build_state(parser.parse_args(["serve", "/nonexistent/model", "--batch-invariant"]))
    assert seen["batch_invariant"] is True
