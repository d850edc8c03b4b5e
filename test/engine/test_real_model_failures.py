"""Failure isolation and admission on the real core (no fake runner): a tiny random
checkpoint with the real Qwen2.5 tokenizer and vocabulary (test/tiny_checkpoint.py) for the
matrix, and the real Qwen2.5-Coder-0.5B-Instruct once (slow).

- A batch of 8 concurrent greedy streams plus one poisoned request, in both KV layouts, with
  the poison reaching the core in the prefill step or in a decode step: the 8 finish with
  exactly the tokens and text of a run without it, the poisoned one finishes with
  finish_reason "error", and afterwards no KV block (BLOCK) or cell (SLOT) is held.
  The poison gets past admission the only way left: its SamplingParams are changed inside
  the engine after add_request (the engine keeps a private, validated copy of the caller's),
  so the core's own check (sampler.cpp check_params) refuses that row and the whole step call
  raises; the engine must find the row by bisection.
- A step whose first attempt wrote K/V (and, SLOT, took cells) before it raised is retried
  idempotently: the outputs equal the reference.
- Admission (LLMEngine.check_request / add_request / AsyncEngine.add_request) refuses every
  issue-16 reproducer with a SamplingParamsError naming the parameter, and admits the last
  row of the logits.
"""

import dataclasses

import pytest

from llaisys.engine import AsyncEngine, EngineConfig, LLMEngine, SamplingParams, SamplingParamsError
from llaisys.engine.config import KV_MAX_SEQS
from llaisys.engine.worker import Worker, WorkerConfig

BLOCK = 16
MAX_TOKENS = 6
GREEDY = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True)
PROMPTS = ["def fibonacci(n):", "# Sort a list in Python\n", "SELECT name FROM", "The capital of France is",
           "import numpy as np\n", "class Stack:", "1, 2, 3, 4,", "// reverse a string in C\n"]


@pytest.fixture(scope="module")
def tiny(qwen05_dir, tmp_path_factory):
    """A Worker over a tiny random checkpoint with the real tokenizer (test/tiny_checkpoint.py)."""
    from tiny_checkpoint import make_tiny_checkpoint

    w = Worker(WorkerConfig(model=str(make_tiny_checkpoint(tmp_path_factory.mktemp("tiny"), qwen05_dir)),
                            kv_cache_memory=8 << 20))
    yield w
    w.close()


@pytest.fixture(scope="module")
def qwen05(qwen05_dir):
    w = Worker(WorkerConfig(model=str(qwen05_dir), kv_cache_memory=32 << 20))
    yield w
    w.close()


@pytest.fixture(scope="module")
def prompts(qwen05_dir):
    from llaisys.models.tokenizer import Tokenizer

    tok = Tokenizer.from_dir(qwen05_dir)
    return [tok.encode(p) for p in PROMPTS]


class Spy:
    """Passes every call to the real runner; counts the calls that compute tokens, and can
    make one call raise after the real runner has done its work (K/V written, SLOT cells
    taken, tokens sampled)."""

    def __init__(self, runner):
        self.runner = runner
        self.vocab_size = getattr(runner, "vocab_size", None)
        self.calls = 0
        self.raise_after = None  # (batch) -> bool

    def execute(self, batch):
        self.calls += batch.n_tokens > 0
        res = self.runner.execute(batch)
        if self.raise_after is not None and self.raise_after(batch):
            self.raise_after = None
            raise RuntimeError("injected failure after the core computed the step")
        return res


def make_engine(worker, layout):
    cfg = EngineConfig(max_num_seqs=16, max_num_batched_tokens=1024, max_model_len=512, block_size=BLOCK,
                       num_blocks=worker.num_blocks(BLOCK), kv_layout=layout, seed=0)
    spy = Spy(worker.make_runner(cfg))
    return LLMEngine(cfg, spy, worker.tokenizer), spy


def check_idle(eng, spy):
    """No request, no block held; SLOT: after the step that applies the last frees, no cell."""
    kv = eng.scheduler.kv
    kv.check_invariants()
    assert not eng.has_unfinished_requests()
    assert kv.num_used_blocks == 0 and not kv.tables and all(b.ref_cnt == 0 for b in kv.blocks)
    if kv.layout == "slot":
        eng.step()  # nothing to compute: hands the seq ids released by the last step to seq_rm
        assert len(kv._free_seq_ids) == KV_MAX_SEQS
        assert spy.runner.cache.stats().used == 0


def run(eng, spy, prompts, poison_at=None, poison=None):
    """8 greedy streams (and, with poison_at, request "bad" whose params become `poison` in the
    engine before step `poison_at`); the finished RequestOutputs by id."""
    for i, p in enumerate(prompts):
        eng.add_request(f"r{i}", p, GREEDY)
    if poison_at is not None:
        eng.add_request("bad", prompts[3], dataclasses.replace(GREEDY))  # passes admission
    finals, step = {}, 0
    while eng.has_unfinished_requests():
        if step == poison_at:
            sp = eng.scheduler.requests["bad"].sampling_params  # the engine's own copy
            for name, value in poison.items():
                setattr(sp, name, value)
        finals.update({o.request_id: o for o in eng.step() if o.finished})
        step += 1
    check_idle(eng, spy)
    return finals


def streams(finals):
    return {rid: (o.outputs[0].token_ids, o.outputs[0].text, o.outputs[0].finish_reason)
            for rid, o in sorted(finals.items()) if rid != "bad"}


def reference_run(worker, prompts, layout):
    eng, spy = make_engine(worker, layout)
    ref = run(eng, spy, prompts)
    assert len(ref) == 8 and all(o.outputs[0].finish_reason == "length" for o in ref.values())
    assert spy.calls == MAX_TOKENS  # one prefill step (all 8), then one decode step per token
    return streams(ref)


def poisoned_run(worker, prompts, layout, poison_at, reference):
    eng, spy = make_engine(worker, layout)
    width = worker.model.config.vocab_size
    finals = run(eng, spy, prompts, poison_at, {"logit_bias": {width + 7: 1.0}})
    bad = finals["bad"]
    assert bad.finished and bad.outputs[0].finish_reason == "error"
    assert "outside the vocabulary" in bad.error, bad.error
    assert len(bad.outputs[0].token_ids) == poison_at  # the tokens of the steps before the poison
    assert streams(finals) == reference
    # the failed step: 1 call for 9 rows, then 2 per halving (9 -> 5 -> 3 -> 2 -> 1): 9 calls
    assert spy.calls == MAX_TOKENS + 8
    assert eng.metrics.finished_total == {"length": 8, "error": 1}


@pytest.fixture(scope="module", params=["block", "slot"])
def layout(request):
    return request.param


@pytest.fixture(scope="module")
def reference(tiny, prompts, layout):
    return reference_run(tiny, prompts, layout)


@pytest.mark.parametrize("poison_at", [0, 3])  # the prefill step / a decode step
def test_a_poisoned_request_fails_alone(tiny, prompts, layout, reference, poison_at):
    poisoned_run(tiny, prompts, layout, poison_at, reference)


@pytest.mark.slow
def test_a_poisoned_request_fails_alone_on_the_05b_model(qwen05, prompts):
    ref = reference_run(qwen05, prompts, "block")
    assert len({text for _, text, _ in ref.values()}) == 8  # 8 different real answers
    poisoned_run(qwen05, prompts, "block", 2, ref)


def test_a_retry_after_the_core_wrote_kv_is_idempotent(tiny, prompts, layout, reference):
    """Each attempt of a step re-writes the same K/V (BLOCK) or re-takes cells after dropping
    the failed attempt's (SLOT, StepInput.rewind), and samples with the same (seed, step)."""
    for step_to_fail in (0, 4):
        eng, spy = make_engine(tiny, layout)
        seen = {"n": 0}

        def nth_step(batch, n=step_to_fail):
            seen["n"] += 1
            return seen["n"] == n + 1

        spy.raise_after = nth_step
        finals = run(eng, spy, prompts)
        assert streams(finals) == reference
        assert spy.calls == MAX_TOKENS + 2  # the failed call, then the two halves, which succeed


def test_the_last_row_of_the_logits_is_admitted(tiny, prompts):
    """The bound is the lm_head's rows (151936), not the tokenizer's own count; ids the
    tokenizer cannot decode give no text (test_step_failure.py checks that with a narrower
    tokenizer; the converted Qwen2.5 tokenizer names every row)."""
    last = tiny.model.config.vocab_size - 1
    eng, spy = make_engine(tiny, "block")
    eng.add_request("last", prompts[0], SamplingParams(max_tokens=3, ignore_eos=True, logit_bias={str(last): 100},
                                                      stop_token_ids=[last - 1]))
    eng.add_request("plain", prompts[0], SamplingParams(max_tokens=3, ignore_eos=True))
    finals = {}
    while eng.has_unfinished_requests():
        finals.update({o.request_id: o for o in eng.step() if o.finished})
    assert finals["last"].outputs[0].token_ids == [last] * 3 and finals["last"].outputs[0].finish_reason == "length"
    assert finals["plain"].outputs[0].finish_reason == "length"
    check_idle(eng, spy)


REPRODUCERS = [  # issue 16: each must be a 400 naming the parameter, never a failed step
    (dict(logit_bias={"999999999": 5}), "logit_bias"),  # a valid int32, past the logits
    (dict(logit_bias={str(2 ** 70): 5}), "logit_bias"),
    (dict(logit_bias={151936: 5}), "logit_bias"),  # exactly the logits width
    (dict(stop_token_ids=[2 ** 70]), "stop_token_ids"),
    (dict(stop_token_ids=[151936]), "stop_token_ids"),
    (dict(seed=-1), "seed"),
    (dict(seed=2 ** 64), "seed"),
    (dict(seed=10 ** 30), "seed"),
]


@pytest.mark.parametrize("params,param", REPRODUCERS)
def test_admission_refuses_the_reproducers(tiny, prompts, params, param):
    eng, spy = make_engine(tiny, "block")
    assert eng.vocab_size == tiny.model.config.vocab_size == 151936
    # built directly (SamplingParams refuses what no model could take) ...
    try:
        sp = SamplingParams(max_tokens=4, **params)
    except SamplingParamsError as e:
        assert e.param == param and isinstance(e, ValueError)
        sp = SamplingParams(max_tokens=4)
        for name, value in params.items():  # ... or changed after it was built
            setattr(sp, name, value)
    for check in (eng.check_request, lambda ids, sp: eng.add_request("x", ids, sp)):
        with pytest.raises(SamplingParamsError) as e:
            check(prompts[0], sp)
        assert e.value.param == param and param in str(e.value)
    aeng = AsyncEngine(eng)
    try:
        with pytest.raises(SamplingParamsError) as e:
            aeng.add_request("x", prompts[0], sp)
        assert e.value.param == param
    finally:
        aeng.shutdown()
    assert spy.calls == 0 and not eng.has_unfinished_requests()
