"""Pooling (embedding) requests on the real core, scheduled with generation: a tiny random
checkpoint with the real Qwen2.5 tokenizer and vocabulary (test/tiny_checkpoint.py), both KV
layouts.

- Pooling and generation rows in the same steps (one core call each) give the same greedy
  tokens and the same vectors as each run alone, and the vectors match transformers.
- An input longer than the step's token budget is chunked; a preempted pooling request is
  recomputed to the same vector.
- A pooling row that makes the core refuse the step ends only its own request (bisection).
- Nothing is left held afterwards (blocks; SLOT cells).
"""

import numpy as np
import pytest
import torch

from llaisys.engine import EngineConfig, LLMEngine, PoolingParams, SamplingParams
from llaisys.engine.config import KV_MAX_SEQS
from llaisys.engine.worker import Worker, WorkerConfig

BLOCK = 16
GREEDY = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)
GEN_TEXTS = ["def fibonacci(n):", "SELECT name FROM", "The capital of France is", "class Stack:"]
EMB_TEXTS = ["The capital of France is Paris.", "用中文解释一下什么是递归。", "a",
             "import numpy as np\n" * 12]  # the last: 49..64 tokens, longer than a 32-token budget


@pytest.fixture(scope="module")
def tiny(qwen05_dir, tmp_path_factory):
    from tiny_checkpoint import make_tiny_checkpoint

    path = make_tiny_checkpoint(tmp_path_factory.mktemp("tiny_pool"), qwen05_dir)
    # f32 KV: the vectors are checked against transformers' within 2e-5
    w = Worker(WorkerConfig(model=str(path), kv_dtype="f32", kv_cache_memory=8 << 20))
    yield w, path
    w.close()


@pytest.fixture(scope="module")
def texts(tiny):
    tok = tiny[0].tokenizer
    return [tok.encode(t) for t in GEN_TEXTS], [tok.encode(t) for t in EMB_TEXTS]


class Spy:
    """The real runner; records (generation rows, pooling rows) of each call that computes."""

    def __init__(self, runner):
        self.runner = runner
        self.vocab_size = runner.vocab_size
        self.calls = []

    def execute(self, batch):
        if batch.n_tokens:
            self.calls.append((batch.n_sample, int(batch.pooling.sum())))
        return self.runner.execute(batch)


def make_engine(worker, layout, budget=32, num_blocks=None, max_num_seqs=8):
    cfg = EngineConfig(max_num_seqs=max_num_seqs, max_num_batched_tokens=budget, max_model_len=512,
                       block_size=BLOCK, num_blocks=num_blocks or worker.num_blocks(BLOCK), kv_layout=layout, seed=0)
    spy = Spy(worker.make_runner(cfg))
    return LLMEngine(cfg, spy, worker.tokenizer), spy


def run(eng, gen=(), emb=()):
    for i, ids in enumerate(gen):
        eng.add_request(f"g{i}", ids, GREEDY)
    for i, ids in enumerate(emb):
        eng.add_request(f"e{i}", ids, pooling_params=PoolingParams())
    finals = {}
    while eng.has_unfinished_requests():
        finals.update({o.request_id: o for o in eng.step() if o.finished})
    return finals


def check_idle(eng, spy):
    kv = eng.scheduler.kv
    kv.check_invariants()
    assert kv.num_used_blocks == 0 and not kv.tables
    if kv.layout == "slot":
        eng.step()  # hands the seq ids released by the last step to seq_rm
        assert len(kv._free_seq_ids) == KV_MAX_SEQS
        assert spy.runner.cache.stats().used == 0


def tokens(finals):
    return {k: o.outputs[0].token_ids for k, o in finals.items() if k.startswith("g")}


def vectors(finals):
    return {k: o.outputs.data for k, o in finals.items() if k.startswith("e")}


@pytest.fixture(scope="module", params=["block", "slot"])
def layout(request):
    return request.param


def test_mixed_steps_match_each_kind_alone(tiny, texts, layout):
    worker, path = tiny
    gen, emb = texts
    assert len(emb[3]) > 32
    eng, spy = make_engine(worker, layout)
    gen_alone = tokens(run(eng, gen=gen))
    emb_alone = vectors(run(eng, emb=emb))
    check_idle(eng, spy)
    eng, spy = make_engine(worker, layout)
    finals = run(eng, gen=gen, emb=emb)
    check_idle(eng, spy)
    assert any(n_gen and n_pool for n_gen, n_pool in spy.calls), "no step mixed the two kinds"
    assert tokens(finals) == gen_alone
    for k, v in vectors(finals).items():
        np.testing.assert_allclose(v, emb_alone[k], atol=1e-6)
        assert v.dtype == np.float32 and v.shape == (worker.model.config.hidden_size,)
    assert sum(1 for _, n_pool in spy.calls if n_pool) >= 3  # the long input took several steps
    assert finals["e3"].usage.prompt_tokens == len(emb[3])
    m = eng.metrics
    assert m.pooling_finished_total == {"stop": 4} and m.pooled_tokens_total == sum(map(len, emb))
    # the reference: transformers' last_hidden_state (after the final norm), mean, L2-normalised
    from transformers import AutoModel

    hf = AutoModel.from_pretrained(path, dtype=torch.float32).eval()
    for i, ids in enumerate(emb):
        with torch.no_grad():
            h = hf(torch.tensor([ids])).last_hidden_state[0].double().numpy()
        want = h.mean(0) / np.linalg.norm(h.mean(0))
        np.testing.assert_allclose(finals[f"e{i}"].outputs.data, want, atol=2e-5)


def test_preempted_pooling_request_gets_the_same_vector(tiny, texts, layout):
    worker, _ = tiny
    gen, emb = texts
    eng, spy = make_engine(worker, layout)
    want = vectors(run(eng, emb=emb[3:]))["e0"]
    # 7 blocks of 16: the input (4 blocks) and a generation of 47 + 53 tokens (7) cannot both fit
    # once the generation passes 64 tokens while the input is chunked at 15 a step; the pooling
    # request, admitted last, is the one preempted
    assert 48 < len(emb[3]) <= 64
    eng, spy = make_engine(worker, layout, budget=16, num_blocks=7, max_num_seqs=2)
    eng.add_request("g", (gen[0] * 12)[:47], SamplingParams(temperature=0.0, max_tokens=53, ignore_eos=True))
    eng.add_request("e", emb[3], pooling_params=PoolingParams())
    req = eng.scheduler.requests["e"]
    finals = {}
    while eng.has_unfinished_requests():
        finals.update({o.request_id: o for o in eng.step() if o.finished})
    check_idle(eng, spy)
    assert req.num_preemptions > 0 and finals["e"].finish_reason == "stop"
    np.testing.assert_allclose(finals["e"].outputs.data, want, atol=1e-6)
    assert finals["g"].outputs[0].finish_reason == "length"


def test_a_failing_pooling_row_fails_alone(tiny, texts, layout):
    """The poisoned input gets past admission the only way left (its ids are changed inside
    the engine); the core refuses the whole step, and bisection ends only that request."""
    worker, _ = tiny
    gen, emb = texts
    eng, spy = make_engine(worker, layout, budget=256)
    ref = run(eng, gen=gen, emb=emb)
    eng, spy = make_engine(worker, layout, budget=256)
    eng.add_request("bad", emb[0], pooling_params=PoolingParams())
    bad = eng.scheduler.requests["bad"]
    bad.all_token_ids[2] = worker.model.config.vocab_size + 5  # the engine's own copy
    finals = run(eng, gen=gen, emb=emb)
    check_idle(eng, spy)
    assert finals["bad"].finish_reason == "error" and finals["bad"].outputs is None and finals["bad"].error
    assert tokens(finals) == tokens(ref)
    for k, v in vectors(finals).items():
        np.testing.assert_allclose(v, ref[k].outputs.data, atol=1e-6)
    assert eng.metrics.pooling_finished_total == {"stop": 4, "error": 1}


def test_llm_embed_is_the_same_request_kind(tiny, texts):
    """The offline API: LLM.embed gives the engine's vectors, in order, one output per prompt."""
    from llaisys import LLM

    worker, path = tiny
    _, emb = texts
    eng, spy = make_engine(worker, "block")
    want = vectors(run(eng, emb=emb))
    with LLM(str(path), kv_dtype="f32", kv_cache_memory=8 << 20, max_num_batched_tokens=32, max_num_seqs=8) as llm:
        outs = llm.embed(EMB_TEXTS)
        raw = llm.embed(EMB_TEXTS[0], PoolingParams(normalize=False))[0].outputs.data
    assert [o.finish_reason for o in outs] == ["stop"] * 4
    for i, o in enumerate(outs):
        np.testing.assert_allclose(o.outputs.data, want[f"e{i}"], atol=1e-6)
    np.testing.assert_allclose(raw / np.linalg.norm(raw), want["e0"], atol=1e-6)


def test_pooling_steps_size_no_logits(tiny, texts):
    """A step that only wants hidden states (pooling alone) reserves no [rows, vocab] logits:
    a fresh model's workspace after pooling-only steps of 256 tokens stays far below the
    256 x 151,936 floats (~156 MB) that sizing logits for every hidden row would take."""
    _, path = tiny
    _, emb = texts
    w = Worker(WorkerConfig(model=str(path), kv_cache_memory=8 << 20))
    try:
        eng, _ = make_engine(w, "block", budget=256)
        finals = run(eng, emb=emb)
        assert len(vectors(finals)) == len(emb)
        stats = w.model.stats()
        vocab = w.model.config.vocab_size
        assert stats.workspace_tokens >= max(len(x) for x in emb)  # the steps did run through it
        assert stats.workspace_bytes < 16 * vocab * 4
    finally:
        w.close()
