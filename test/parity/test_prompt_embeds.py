"""Prompts given as input embeddings (LLM.generate([{"prompt_embeds": array}])), through the
whole engine, on tiny random checkpoints written by transformers: a dense Qwen2 (q/k/v bias,
sliding-window layers) and two mixture-of-experts families (Qwen3-MoE, Qwen2-MoE with its shared
expert and a dense layer).

The rows of a prompt's ids in the model's embed_tokens weight, given as prompt_embeds, must give
the same 32 greedy tokens as the ids: batched with id prompts (which do not change), on BLOCK
and SLOT, with the prefix cache on and off, in prefill chunks of a few tokens, and through
preemption (recomputed from the kept rows). The prefix cache keys embedded rows by their bytes:
an id prompt never hits an embeddings prompt's blocks, the same rows again do. Then every bad
array is a ValueError naming prompt_embeds and the shape, and nothing is left held."""

from pathlib import Path

import numpy as np
import pytest
import torch

from llaisys import LLM, SamplingParams
from llaisys.engine import EngineConfig, LLMEngine, PoolingParams, SamplingParamsError
from llaisys.engine.worker import Worker, WorkerConfig

from .conftest import make_tiny_arch
from .test_archs import N_GEN, PROMPTS
from .test_moe import make_tiny_moe

GREEDY = SamplingParams(temperature=0.0, max_tokens=N_GEN, ignore_eos=True)
FAMILIES = ["qwen2", "qwen3_moe", "qwen2_moe"]


@pytest.fixture(scope="module", params=FAMILIES)
def ckpt(request, tmp_path_factory):
    """(path, embed_tokens weight [vocab, hidden] f32) of a tiny f32 checkpoint."""
    path = tmp_path_factory.mktemp(f"embeds_{request.param}")
    make = make_tiny_moe if request.param.endswith("_moe") else make_tiny_arch
    hf = make(path, request.param)
    return path, hf.model.embed_tokens.weight.detach().to(torch.float32).numpy().copy()


def llm(path, **kw):
    args = dict(kv_dtype="f32", block_size=4, kv_cache_memory=4 << 20, max_num_seqs=8)
    return LLM(str(path), **{**args, **kw})


def tokens(outs) -> list:
    return [list(o.outputs[0].token_ids) for o in outs]


def as_embeds(table, ids) -> dict:
    return {"prompt_embeds": table[np.asarray(ids)]}


@pytest.fixture(scope="module")
def want(ckpt):
    """The id prompts' greedy tokens, each alone (BLOCK, no prefix cache)."""
    with llm(ckpt[0], enable_prefix_caching=False) as e:
        return [tokens(e.generate(p, GREEDY))[0] for p in PROMPTS]


@pytest.mark.parametrize("layout,prefix", [("block", True), ("block", False), ("slot", False)])
def test_embeds_give_the_ids_tokens_mixed_in_one_batch(ckpt, want, layout, prefix):
    path, table = ckpt
    mixed = [as_embeds(table, p) for p in PROMPTS] + PROMPTS  # one batch: embedded rows and id rows
    with llm(path, kv_layout=layout, enable_prefix_caching=prefix) as e:
        outs = e.generate(mixed, GREEDY)
        assert tokens(outs) == want + want
        assert [o.usage.prompt_tokens for o in outs[:3]] == [len(p) for p in PROMPTS]
        assert all(o.prompt_token_ids == [] for o in outs[:3])
        assert outs[0].outputs[0].text == e.tokenizer.decode(want[0])
        kv = e.engine.scheduler.kv
        kv.check_invariants()
        assert kv.num_used_blocks == 0 and not kv.tables


def test_chunked_prefill(ckpt, want):
    """A budget of 5 tokens a step: every prompt is computed in chunks, embedded rows included."""
    path, table = ckpt
    with llm(path, max_num_batched_tokens=5, max_num_seqs=2) as e:
        assert tokens(e.generate([as_embeds(table, p) for p in PROMPTS], GREEDY)) == want


def test_prefix_cache_keys_embedded_rows_by_their_bytes(ckpt, want):
    path, table = ckpt
    with llm(path, enable_prefix_caching=True) as e:
        first = e.generate(as_embeds(table, PROMPTS[0]), GREEDY)[0]
        assert first.usage.cached_tokens == 0
        by_ids = e.generate(PROMPTS[0], GREEDY)[0]  # the same ids: no hit on the embedded blocks
        assert by_ids.usage.cached_tokens == 0 and tokens([by_ids]) == [want[0]]
        again = e.generate(as_embeds(table, PROMPTS[0]), GREEDY)[0]
        assert again.usage.cached_tokens > 0 and tokens([again]) == [want[0]]
        # PROMPTS[2] shares PROMPTS[0]'s first rows: a hit on their blocks
        shared = e.generate(as_embeds(table, PROMPTS[2]), GREEDY)[0]
        assert shared.usage.cached_tokens > 0 and tokens([shared]) == [want[2]]
        other = table[np.asarray(PROMPTS[0])] + np.float32(1e-3)  # other values, same placeholder ids
        assert e.generate({"prompt_embeds": other}, GREEDY)[0].usage.cached_tokens == 0


def drain(eng) -> dict:
    finals = {}
    while eng.has_unfinished_requests():
        finals.update({o.request_id: o for o in eng.step() if o.finished})
    return finals


def test_a_failing_embedded_row_fails_alone(ckpt, want):
    """Rows poisoned inside the engine, past admission (a NaN): the core refuses the whole step
    and bisection ends only that request; the sub-batches carry the other rows' embeddings
    (select_rows), so every other request, embedded or not, gets its tokens."""
    path, table = ckpt
    with llm(path) as e:
        eng = e.engine
        for i, p in enumerate(PROMPTS):
            eng.add_request(f"e{i}", None, GREEDY, prompt_embeds=table[np.asarray(p)])
            eng.add_request(f"i{i}", list(p), GREEDY)
        eng.add_request("bad", None, GREEDY, prompt_embeds=table[np.asarray(PROMPTS[1])])
        bad = eng.scheduler.requests["bad"]
        poisoned = bad.prompt_embeds.copy()
        poisoned[3, 7] = np.nan
        bad.prompt_embeds = poisoned
        finals = drain(eng)
        assert finals["bad"].outputs[0].finish_reason == "error" and "not finite" in finals["bad"].error
        assert [list(finals[f"{k}{i}"].outputs[0].token_ids) for k in "ei" for i in range(3)] == want + want
        assert eng.scheduler.kv.num_used_blocks == 0


def test_n_siblings_share_the_rows(ckpt, want):
    path, table = ckpt
    with llm(path, enable_prefix_caching=True) as e:
        out = e.generate(as_embeds(table, PROMPTS[2]), SamplingParams(n=3, temperature=0.0, max_tokens=N_GEN,
                                                                       ignore_eos=True))[0]
        assert [list(c.token_ids) for c in out.outputs] == [want[2]] * 3


@pytest.mark.parametrize("layout", ["block", "slot"])
def test_preemption_recomputes_from_the_kept_rows(ckpt, want, layout):
    """A pool of 14 blocks of 4 for three requests that grow to ~45 tokens each: the newest are
    preempted and recomputed, embedded prompt included."""
    path, table = ckpt
    w = Worker(WorkerConfig(model=str(path), kv_dtype="f32", kv_cache_memory=4 << 20, kv_layout=layout))
    try:
        cfg = EngineConfig(max_num_seqs=3, max_num_batched_tokens=64, max_model_len=128, block_size=4, num_blocks=14,
                           kv_layout=layout, seed=0)
        eng = LLMEngine(cfg, w.make_runner(cfg), w.tokenizer)
        for i, p in enumerate(PROMPTS):
            eng.add_request(f"r{i}", None, GREEDY, prompt_embeds=table[np.asarray(p)])
        finals = drain(eng)
        assert eng.scheduler.num_preemptions > 0
        assert [list(finals[f"r{i}"].outputs[0].token_ids) for i in range(3)] == want
        assert eng.scheduler.kv.num_used_blocks == 0
    finally:
        w.close()


def test_converted_dtypes_and_pooling(ckpt, want):
    """float64 rows are converted to float32 (the same values here); an embed() request of
    embedded rows pools as its ids do."""
    path, table = ckpt
    with llm(path) as e:
        f64 = {"prompt_embeds": table[np.asarray(PROMPTS[1])].astype(np.float64)}
        assert tokens(e.generate([f64], GREEDY)) == [want[1]]
        f16 = {"prompt_embeds": table[np.asarray(PROMPTS[1])].astype(np.float16)}
        assert len(tokens(e.generate([f16], GREEDY))[0]) == N_GEN  # rounded values: runs, tokens may differ
        by_ids, by_rows = e.embed([PROMPTS[1], as_embeds(table, PROMPTS[1])], PoolingParams())
        np.testing.assert_allclose(by_rows.outputs.data, by_ids.outputs.data, rtol=0, atol=1e-6)


def test_speculative_engine_runs_embeds_without_drafts(ckpt, want):
    path, table = ckpt
    with llm(path, speculative="ngram", num_speculative_tokens=3) as e:
        assert tokens(e.generate([as_embeds(table, PROMPTS[0]), PROMPTS[0]], GREEDY)) == [want[0]] * 2
        with pytest.raises(SamplingParamsError, match="prompt_embeds does not speculate"):
            e.generate(as_embeds(table, PROMPTS[0]), SamplingParams(max_tokens=4, speculative=True))


BAD = [
    (lambda t: t[:3, :-1], r"shape \(3, \d+\): its rows must be the model's hidden_size"),
    (lambda t: t[:3].astype(np.int32), "must be a floating array .* got dtype int32"),
    (lambda t: t[:3] > 0, "got dtype bool"),
    (lambda t: t[0], r"must have shape \[n, \d+\] \(2-D\), got shape \(\d+,\)"),
    (lambda t: t[None, :3], r"\(2-D\), got shape \(1, 3, \d+\)"),
    (lambda t: t[:0], r"prompt_embeds is empty \(shape \(0, \d+\)\)"),
    (lambda t: np.where(np.arange(t.shape[1]) == 5, np.nan, t[:3]).astype(np.float32), r"prompt_embeds\[0, 5\] is nan"),
    (lambda t: np.where(np.arange(t.shape[1]) == 2, np.inf, t[:2]).astype(np.float32), r"prompt_embeds\[0, 2\] is inf"),
    (lambda t: t[:2].astype(np.float64) * 1e300, "every value must be finite in float32"),
    (lambda t: np.zeros((200, t.shape[1]), np.float32), r"200 rows exceed max_model_len \(64\)"),
    (lambda t: "not an array", "got dtype <U"),
    (lambda t: [[1.0, 2.0], [3.0]], "prompt_embeds must be a float array"),
]


@pytest.mark.parametrize("make,message", BAD)
def test_bad_arrays_are_value_errors_naming_the_shape(ckpt, make, message):
    path, table = ckpt
    with llm(path, max_model_len=64) as e:
        with pytest.raises(ValueError, match=message):
            e.generate([PROMPTS[0], {"prompt_embeds": make(table)}], GREEDY)
        with pytest.raises(ValueError, match="unknown key"):
            e.generate({"prompt_embeds": table[:2], "prompt": "x"}, GREEDY)
        with pytest.raises(ValueError, match="not both"):
            e.engine.add_request("both", [1, 2], GREEDY, prompt_embeds=table[:2])
        assert not e.engine.has_unfinished_requests() and e.engine.scheduler.kv.num_used_blocks == 0
        assert tokens(e.generate(PROMPTS[:1], GREEDY))[0]  # the engine still serves


@pytest.mark.slow
def test_real_qwen05_embeds_give_the_ids_tokens(qwen05_dir):
    """Qwen2.5-Coder-0.5B (bf16, tied embeddings): its embed_tokens rows of two prompts as
    prompt_embeds, mixed with the ids in one batch and in prefill chunks of 16, give the ids' 24
    greedy tokens."""
    from safetensors import safe_open

    sp = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
    with LLM(str(qwen05_dir), kv_cache_memory=64 << 20, max_num_seqs=4, max_num_batched_tokens=16) as e:
        ids = [e.tokenizer.encode(t) for t in ("def quicksort(arr):", "The three laws of robotics are")]
        with safe_open(str(Path(qwen05_dir) / "model.safetensors"), framework="pt") as f:
            weight = f.get_tensor("model.embed_tokens.weight")
        rows = [{"prompt_embeds": weight[torch.tensor(p)].to(torch.float32).numpy()} for p in ids]
        del weight
        want = tokens(e.generate(ids, sp))
        assert tokens(e.generate(rows + ids, sp)) == want + want
