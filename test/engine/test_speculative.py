"""Speculative decoding on the real Qwen2.5-Coder-0.5B-Instruct (the 1.5B at the end): greedy
token ids are those of plain decoding, for the n-gram proposer and for a draft model (the 0.5B's Q4_K_M GGUF
drafting for the bf16 0.5B: same tokenizer, different weights, so drafts are rejected too),
at batch 1 and 16, in both KV layouts, with preemption forced and with prefix caching on;
no KV block (the target's or the draft's) is held afterwards (conftest's leak check).

f32 KV, as in test_real_model_engine: identity across step shapes is what f32 promises.
"""

import pytest

from llaisys.engine import EngineConfig, LLMEngine, SamplingParams
from llaisys.engine.spec import SpecDecoder, SpeculativeConfig, make_spec_decoder
from llaisys.engine.spec.draft import DraftModelProposer
from llaisys.engine.worker import Worker, WorkerConfig

pytestmark = pytest.mark.slow

BLOCK = 16
GREEDY = SamplingParams(temperature=0.0, max_tokens=20, ignore_eos=True)
CODE = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n"
CHATS = [
    [{"role": "user", "content": f"Rename add to plus in this code and print the whole code:\n{CODE}"}],
    [{"role": "user", "content": "Write a haiku about the sea."}],
    [{"role": "user", "content": f"Add type hints to this code, print it all:\n{CODE}"}],
    [{"role": "user", "content": "What is 2+2?"}],
]


@pytest.fixture(scope="module")
def worker(qwen05_dir):
    w = Worker(WorkerConfig(model=str(qwen05_dir), kv_dtype="f32", kv_cache_memory=64 << 20))
    yield w
    w.close()


@pytest.fixture(scope="module")
def draft(worker, qwen05_gguf):
    """The GGUF 0.5B as a draft model, through make_spec_decoder's checks."""
    cfg = EngineConfig(max_num_seqs=16, max_model_len=1024, block_size=BLOCK, num_blocks=worker.num_blocks(BLOCK))
    runner = worker.make_runner(cfg)
    wc = WorkerConfig(model=str(qwen05_gguf), kv_dtype="f32", kv_cache_memory=64 << 20)
    dec = make_spec_decoder(SpeculativeConfig("draft", draft_model=str(qwen05_gguf)), runner, worker, cfg, wc)
    assert isinstance(dec.proposer, DraftModelProposer)
    yield dec.proposer
    dec.close()


@pytest.fixture(scope="module")
def prompts(worker):
    tok = worker.tokenizer
    return [tok.encode(tok.apply_chat_template(c, add_generation_prompt=True)) for c in CHATS]


def make_engine(worker, proposer=None, method="ngram", k=4, **overrides):
    cfg = dict(max_num_seqs=16, max_num_batched_tokens=2048, max_model_len=1024, block_size=BLOCK,
               num_blocks=worker.num_blocks(BLOCK), enable_prefix_caching=False, seed=0)
    cfg.update(overrides)
    config = EngineConfig(**cfg)
    runner = worker.make_runner(config)
    spec = None
    if proposer is not None:
        # adaptive off: every eligible row speculates with k drafts, so verification is exercised
        spec = SpecDecoder(SpeculativeConfig(method, num_speculative_tokens=k, adaptive=False,
                                             draft_model="x" if method == "draft" else None),
                           proposer, config.max_model_len)
    return LLMEngine(config, runner, worker.tokenizer, speculative=spec)


def run(eng, prompts, sp=GREEDY, tag="r"):
    ids = [f"{tag}{i}" for i in range(len(prompts))]
    for rid, p in zip(ids, prompts):
        eng.add_request(rid, p, sp)
    done = {}
    while eng.has_unfinished_requests():
        for o in eng.step():
            if o.finished:
                done[o.request_id] = o
    kv = eng.scheduler.kv
    kv.check_invariants()
    assert kv.num_used_blocks == 0 and not kv.tables
    return [done[r].outputs[0].token_ids for r in ids]


@pytest.fixture(scope="module")
def reference(worker, prompts):
    return run(make_engine(worker), prompts)


def ngram():
    from llaisys.engine.spec import NgramProposer

    return NgramProposer(4, 1)


@pytest.mark.parametrize("layout", ["block", "slot"])
def test_ngram_greedy_identical_batch1(worker, prompts, reference, layout):
    for i, p in enumerate(prompts):
        eng = make_engine(worker, ngram(), kv_layout=layout)
        assert run(eng, [p], tag=f"b1-{i}-") == [reference[i]]
        if i == 0:  # the code-edit prompt: prompt lookup finds and keeps drafts
            st = eng.spec.stats
            assert st.num_draft_tokens > 0 and st.num_accepted_tokens > 0, st


@pytest.mark.parametrize("layout", ["block", "slot"])
def test_ngram_greedy_identical_batch16(worker, prompts, reference, layout):
    eng = make_engine(worker, ngram(), kv_layout=layout)
    assert run(eng, prompts * 4) == reference * 4
    st = eng.spec.stats
    assert st.num_accepted_tokens > 0 and st.num_draft_tokens > st.num_accepted_tokens, st


def test_ngram_with_preemption_and_prefix_cache(worker, prompts, reference):
    # about 10 blocks per request: 16 requests need ~160, the pool has 64, so requests are
    # preempted (also while speculating) and recomputed; the repeated prompts hit the cache
    eng = make_engine(worker, ngram(), num_blocks=64, enable_prefix_caching=True)
    assert run(eng, prompts * 4) == reference * 4
    assert eng.metrics.num_preemptions_total > 0
    assert eng.scheduler.kv.stats.hit_tokens > 0
    assert eng.spec.stats.num_accepted_tokens > 0


@pytest.mark.parametrize("layout", ["block", "slot"])
def test_draft_model_greedy_identical(worker, prompts, reference, draft, layout):
    eng = make_engine(worker, draft, method="draft", kv_layout=layout)
    assert run(eng, prompts, tag=f"d-{layout}-") == reference
    st = eng.spec.stats
    assert st.num_accepted_tokens > 0, st
    assert not draft.seqs and draft.kv.num_used_blocks == 0  # every request's draft KV released


def test_draft_model_batch16_preemption_prefix_cache(worker, prompts, reference, draft):
    eng = make_engine(worker, draft, method="draft", num_blocks=64, enable_prefix_caching=True)
    assert run(eng, prompts * 4, tag="d16-") == reference * 4
    assert eng.metrics.num_preemptions_total > 0
    assert not draft.seqs and draft.kv.num_used_blocks == 0


def test_abort_while_speculating_leaks_nothing(worker, prompts, draft):
    eng = make_engine(worker, draft, method="draft")
    for i, p in enumerate(prompts):
        eng.add_request(f"a{i}", p, GREEDY)
    for _ in range(4):  # prefill, then speculating steps
        eng.step()
    assert draft.seqs  # the draft holds KV for the running requests
    eng.abort_request([f"a{i}" for i in range(len(prompts))])
    while eng.has_unfinished_requests():
        eng.step()
    assert eng.scheduler.kv.num_used_blocks == 0
    assert not draft.seqs and draft.kv.num_used_blocks == 0


def test_opt_out_request_does_not_speculate(worker, prompts, reference):
    eng = make_engine(worker, ngram())
    sp = SamplingParams(temperature=0.0, max_tokens=20, ignore_eos=True, speculative=False)
    assert run(eng, prompts[:1], sp) == reference[:1]
    assert eng.spec.stats.num_draft_tokens == 0


# ---- the 1.5B, with the 0.5B drafting for it ----------------------------------------------
@pytest.fixture(scope="module")
def worker15():
    """The real Qwen2.5-Coder-1.5B-Instruct in the format `llaisys serve` runs on this CPU
    (hub.default_quant: the published Q4_K_M file where the quantized kernels are the faster
    choice, else the bf16 directory converted from it)."""
    import os

    if os.environ.get("LLAISYS_SKIP_REAL_MODEL") == "1":
        pytest.skip("LLAISYS_SKIP_REAL_MODEL=1")
    from llaisys.models import hub

    path = hub.download("qwen2.5-coder-1.5b-instruct", progress=False, keep_gguf=True, quant=hub.default_quant())
    w = Worker(WorkerConfig(model=str(path), kv_dtype="f32", kv_cache_memory=96 << 20))
    yield w
    w.close()


def test_1_5b_greedy_identical_with_both_proposers(worker15, qwen05_dir):
    """Batch 1 and 16 (the four chats four times, prefix caching on), 12 tokens each: the n-gram
    proposer and the 0.5B as draft model give the tokens of plain decoding.

    The first step's token budget holds the four chats exactly, so the twelve copies are
    admitted a step later and find their full blocks cached: each run computes ~290 prompt
    tokens instead of ~810 (with a 2,048 budget all sixteen came in one step and missed the
    cache, and the 1.5B's prefills were most of this test's 2.5 minutes of CI)."""
    tok = worker15.tokenizer
    prompts = [tok.encode(tok.apply_chat_template(c, add_generation_prompt=True)) for c in CHATS]
    sp = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
    cfg = dict(max_num_seqs=16, max_num_batched_tokens=sum(map(len, prompts)), max_model_len=1024,
               block_size=BLOCK, num_blocks=worker15.num_blocks(BLOCK), enable_prefix_caching=True, seed=0)
    plain = make_engine(worker15, **cfg)
    reference = run(plain, prompts * 4, sp, tag="p")
    assert plain.scheduler.kv.stats.hit_tokens >= 12 * min((len(p) - 1) // BLOCK * BLOCK for p in prompts)
    assert run(make_engine(worker15, ngram(), **cfg), prompts * 4, sp, tag="n") == reference
    config = EngineConfig(**cfg)
    wc = WorkerConfig(model=str(qwen05_dir), kv_dtype="f32", kv_cache_memory=64 << 20)
    dec = make_spec_decoder(SpeculativeConfig("draft", draft_model=str(qwen05_dir)),
                            worker15.make_runner(config), worker15, config, wc)
    try:
        assert run(make_engine(worker15, dec.proposer, method="draft", **cfg), prompts[:1], sp,
                   tag="d1-") == reference[:1]
        eng = make_engine(worker15, dec.proposer, method="draft", **cfg)
        assert run(eng, prompts * 4, sp, tag="d16-") == reference
        assert eng.spec.stats.num_accepted_tokens > 0, eng.spec.stats  # the 0.5B's drafts are kept
        assert not dec.proposer.seqs and dec.proposer.kv.num_used_blocks == 0
    finally:
        dec.close()
