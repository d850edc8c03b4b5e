"""embed(): mean-pooled, L2-normalised final hidden states from the core, against
transformers (Qwen2Model.last_hidden_state is after the final RMSNorm, as ours is).

Each input is a pooling request of the engine's scheduler. A small random checkpoint checks
the core path closely (several inputs in one step, an input chunked across steps, steps
shared with generation, timeouts and a client that leaves aborting and freeing the blocks);
the real Qwen2.5-Coder-0.5B checks real text (slow)."""

import threading
import time

import numpy as np
import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from llaisys.engine import AsyncEngine, EngineConfig, EngineDeadError, LLMEngine, SamplingParams
from llaisys.engine.model_runner import CoreModelRunner
from llaisys.models.qwen2 import Qwen2Model
from llaisys.server.openai.embeddings import embed

VOCAB = 512


def hf_embedding(hf_base, ids) -> np.ndarray:
    """transformers' reference: mean of last_hidden_state over the tokens, L2-normalised."""
    with torch.no_grad():
        h = hf_base(torch.tensor([ids])).last_hidden_state[0].double().numpy()  # [n, hidden]
    v = h.mean(axis=0)
    return v / np.linalg.norm(v)


class IdTokenizer:
    """The engine needs a tokenizer; embed() reads only vocab_size."""

    vocab_size = VOCAB
    eos_token_ids = [0]

    def decode(self, ids, skip_special_tokens=False):
        return " ".join(map(str, ids))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(Qwen2Model in the core, HF Qwen2Model) of one random 3-layer checkpoint."""
    path = tmp_path_factory.mktemp("tiny_embed")
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=VOCAB, hidden_size=64, intermediate_size=160, num_hidden_layers=3,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=True, torch_dtype="float32")
    hf = Qwen2ForCausalLM(cfg).eval()
    with torch.no_grad():
        for layer in hf.model.layers:
            layer.self_attn.q_proj.bias.normal_(0, 0.5)
            layer.self_attn.k_proj.bias.normal_(0, 0.5)
    hf.save_pretrained(path, safe_serialization=True)
    with Qwen2Model.from_path(path) as model:
        yield model, hf.model


@pytest.fixture
def tiny_engine(tiny):
    """make(**config) -> an AsyncEngine over the tiny model (BLOCK pool of its own)."""
    model, _ = tiny
    made = []

    def make(gate=None, **config):
        cfg = EngineConfig(**{**dict(max_num_seqs=4, max_num_batched_tokens=64, max_model_len=256, block_size=4,
                                     num_blocks=128), **config})
        cache = model.create_kv_cache("block", n_slots=cfg.num_kv_slots, block_size=cfg.block_size)
        runner = CoreModelRunner(model, cache) if gate is None else GatedRunner(CoreModelRunner(model, cache), gate)
        eng = AsyncEngine(LLMEngine(cfg, runner, IdTokenizer()))
        made.append((eng, cache))
        return eng

    yield make
    for eng, cache in made:
        eng.shutdown()
        cache.close()


class GatedRunner:
    """The real runner, but each step first waits for `gate` (holds requests mid-flight)."""

    def __init__(self, runner, gate: threading.Event):
        self.runner, self.gate = runner, gate
        self.vocab_size = runner.vocab_size

    def execute(self, batch):
        assert self.gate.wait(30), "the test never opened the gate"
        return self.runner.execute(batch)


def assert_pool_empty(eng, timeout=10.0):
    """Every block of the engine's pool is back (aborts are applied by the loop)."""
    deadline = time.monotonic() + timeout
    while eng.num_unfinished and time.monotonic() < deadline:
        time.sleep(0.01)
    m = eng.snapshot()
    assert eng.num_unfinished == 0 and m.num_running == m.num_waiting == 0 and m.kv_usage == 0


INPUTS = [[5, 17, 300, 2, 9], [44], list(range(1, 200, 3)), [7, 7, 7, 7, 7, 7, 7, 7, 7, 511]]


@pytest.mark.parametrize("budget", [64, 7])  # 64: inputs packed per step; 7: the long one in 10 chunks
def test_matches_transformers_on_a_tiny_model(tiny, tiny_engine, budget):
    _, hf_base = tiny
    eng = tiny_engine(max_num_batched_tokens=budget, max_num_seqs=min(4, budget))
    vecs = embed(eng, INPUTS, timeout=60)
    assert len(vecs) == len(INPUTS)
    for ids, v in zip(INPUTS, vecs):
        assert v.dtype == np.float32 and v.shape == (64,)
        assert np.linalg.norm(v) == pytest.approx(1.0, abs=1e-5)
        np.testing.assert_allclose(v, hf_embedding(hf_base, ids), atol=2e-5)


def test_inputs_do_not_see_each_other(tiny_engine):
    """Packed into one step, each input attends only to itself: same vectors alone or together."""
    eng = tiny_engine()
    together = embed(eng, INPUTS, timeout=60)
    for ids, v in zip(INPUTS, together):
        (alone,) = embed(eng, [ids], timeout=60)
        np.testing.assert_allclose(alone, v, atol=1e-6)


def test_generation_is_untouched_and_interleaves(tiny_engine):
    """Embeddings are pooling requests in the same steps as generation: greedy generation gives
    the same tokens before, during (the embedding spans many steps) and after, the vectors
    are those of the inputs alone, and the pool ends empty."""
    eng = tiny_engine(max_num_batched_tokens=8, max_num_seqs=4)
    sp = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
    prompt = [3, 1, 4, 1, 5, 9, 2, 6]
    before = list(eng.add_request("before", prompt, sp))[-1].outputs[0].token_ids
    stream = eng.add_request("during", prompt, sp)
    vecs = embed(eng, INPUTS * 3, timeout=60)  # ~250 tokens: > 30 submits of <= 8 tokens
    during = list(stream)[-1].outputs[0].token_ids
    after = list(eng.add_request("after", prompt, sp))[-1].outputs[0].token_ids
    assert before == during == after and len(before) == 24
    assert len(vecs) == 12
    for ids, v in zip(INPUTS * 3, vecs):
        (alone,) = embed(eng, [ids], timeout=60)
        np.testing.assert_allclose(v, alone, atol=1e-6)
    m = eng.snapshot()
    assert m.num_running == m.num_waiting == 0 and m.kv_usage == 0


def test_bad_inputs(tiny_engine):
    eng = tiny_engine(max_model_len=32)
    with pytest.raises(ValueError, match="at least one input"):
        embed(eng, [], timeout=5)
    with pytest.raises(ValueError, match="input 1 is empty"):
        embed(eng, [[1], []], timeout=5)
    with pytest.raises(ValueError, match=r"token id 512 is outside the vocabulary \[0, 512\)"):
        embed(eng, [[1, 512]], timeout=5)
    with pytest.raises(ValueError, match="token id -1"):
        embed(eng, [[-1]], timeout=5)
    with pytest.raises(ValueError, match="integer token ids"):
        embed(eng, [[1, "2"]], timeout=5)
    with pytest.raises(ValueError, match="33 tokens, more than the model's context of 32"):
        embed(eng, [[1] * 33], timeout=5)


def test_timeout_client_gone_and_dead_engine(tiny_engine):
    """A timeout or a client that leaves aborts the inputs still in the engine (their blocks
    come back); a dead engine is EngineDeadError."""
    from llaisys.server.state.limits import ClientGone

    gate = threading.Event()
    eng = tiny_engine(gate=gate)
    with pytest.raises(TimeoutError, match="within 0.2 s"):
        embed(eng, INPUTS, timeout=0.2)
    with pytest.raises(ClientGone):
        embed(eng, INPUTS, timeout=60, client_gone=lambda: True)
    gate.set()
    assert_pool_empty(eng)
    ended = eng.snapshot().pooling_finished_total  # inputs done by the step in flight when aborted "stop"
    assert sum(ended.values()) == 8 and ended.get("abort", 0) >= 4
    assert len(embed(eng, INPUTS, timeout=60)) == 4  # the engine is fine afterwards
    assert eng.snapshot().pooling_finished_total.get("stop", 0) == ended.get("stop", 0) + 4
    eng.shutdown()
    with pytest.raises(EngineDeadError):
        embed(eng, INPUTS, timeout=5)


TEXTS = ["def fibonacci(n):\n    return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)",
         "The capital of France is Paris.",
         "用中文解释一下什么是递归。",
         "a"]


@pytest.mark.slow
def test_matches_transformers_on_qwen05(qwen05_dir):
    from transformers import AutoModel

    from llaisys import LLM

    with LLM(qwen05_dir, kv_cache_memory=32 << 20, max_num_batched_tokens=16, max_num_seqs=4) as llm:
        eng = AsyncEngine(llm.engine)
        try:
            ids = [llm.tokenizer.encode(t) for t in TEXTS]
            vecs = embed(eng, ids, timeout=300)
        finally:
            eng.shutdown()
    hf_base = AutoModel.from_pretrained(qwen05_dir, dtype=torch.float32).eval()
    cosines = [float(np.dot(v.astype(np.float64), hf_embedding(hf_base, i))) for v, i in zip(vecs, ids)]
    assert min(cosines) >= 0.999, cosines
    assert len(ids[0]) > 16  # the first text spans several steps of 16 tokens
