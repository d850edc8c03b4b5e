"""The KV cache dtype: one default (config.DEFAULT_KV_DTYPE, chosen by measurement in
doc/benchmarks.md) for LLM, WorkerConfig, `llaisys generate` and `llaisys serve`; bad values
are a ValueError naming kv_dtype before anything loads; each dtype sizes the pool by its own
bytes; and on the real 0.5B the default KV dtype's greedy tokens on the parity prompts, in
both layouts, are f32 KV's choice wherever f32 KV's top-2 margin exceeds a small tie margin
(teacher-forced f32 KV logits on the default's own continuation)."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from llaisys.engine import LLM, EngineConfig, LLMEngine, SamplingParams
from llaisys.engine.config import DEFAULT_KV_DTYPE, KV_DTYPES, check_kv_dtype
from llaisys.engine.model_runner import CoreModelRunner
from llaisys.engine.worker import Worker, WorkerConfig

# Largest |logit(default KV) - logit(f32 KV)| on the parity prompts, measured 2026-11-24 with
# tools/bench_kv_dtype.py: f16 0.024, bf16 0.49 (doc/benchmarks.md). A token the default picks
# may trail f32's best by at most this much (a near tie that the rounding tipped).
TIE_MARGIN = 0.1


def test_one_default_everywhere():
    assert DEFAULT_KV_DTYPE in KV_DTYPES
    assert WorkerConfig(model="x").kv_dtype == DEFAULT_KV_DTYPE
    assert inspect.signature(LLM).parameters["kv_dtype"].default == DEFAULT_KV_DTYPE
    from llaisys.cli import build_parser

    parser = build_parser()
    assert parser.parse_args(["generate", "hi"]).kv_dtype == DEFAULT_KV_DTYPE
    assert parser.parse_args(["serve"]).kv_dtype == DEFAULT_KV_DTYPE
    for dt in KV_DTYPES:
        assert parser.parse_args(["serve", "--kv-dtype", dt]).kv_dtype == dt
        assert parser.parse_args(["generate", "hi", "--kv-dtype", dt]).kv_dtype == dt


def test_serve_passes_kv_dtype_to_the_engine():
    from llaisys.cli import build_parser
    from llaisys.server.serve import build_state

    for argv, want in ((["serve", "some-model"], DEFAULT_KV_DTYPE), (["serve", "m", "--kv-dtype", "bf16"], "bf16")):
        state = build_state(build_parser().parse_args(argv))  # nothing loads before serve starts
        assert state.registry.engine_kwargs["kv_dtype"] == want
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--kv-dtype", "q8_0"])


@pytest.mark.parametrize("bad", ["q8_0", "int8", "f64", None, 3, ""])
def test_bad_kv_dtype_is_a_value_error_before_loading(bad):
    with pytest.raises(ValueError, match="kv_dtype"):
        check_kv_dtype(bad)
    with pytest.raises(ValueError, match="kv_dtype"):  # not "no such model": checked first
        Worker(WorkerConfig(model="/nonexistent/model", kv_dtype=bad))


def test_names_and_enums_are_accepted():
    from llaisys.libllaisys import DataType

    assert [check_kv_dtype(x) for x in ("F16", "bf16", DataType.F32)] == ["f16", "bf16", "f32"]


@pytest.fixture(scope="module")
def qwen05_model(qwen05_dir):
    from llaisys.models.model import Model
    from llaisys.models.tokenizer import Tokenizer

    with Model.from_path(qwen05_dir) as model:
        yield model, Tokenizer.from_dir(qwen05_dir)


@pytest.mark.slow
def test_pool_is_sized_by_the_kv_dtype(qwen05_dir):
    sizes = {}
    for dt in ("f32", DEFAULT_KV_DTYPE):
        with LLM(qwen05_dir, kv_dtype=dt, kv_cache_memory=64 << 20) as llm:
            sizes[dt] = (llm.worker.bytes_per_token(), llm.config.num_blocks)
            assert llm.worker.cache.stats().bytes <= 64 << 20
    for bpt, blocks in sizes.values():  # each dtype's own bytes: as many blocks as the budget holds
        assert blocks == (64 << 20) // (bpt * 16)
    if DEFAULT_KV_DTYPE != "f32":  # a 2-byte dtype: half the bytes per token (the 0.5B: 24 KiB in f32)
        assert sizes[DEFAULT_KV_DTYPE][0] * 2 == sizes["f32"][0] == 24 * 1024


def _greedy(model, tokenizer, prompts, layout):
    cfg = EngineConfig(max_num_seqs=len(prompts), max_num_batched_tokens=1024, max_model_len=512, num_blocks=256,
                       block_size=16, kv_layout=layout)
    sp = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)
    with model.create_kv_cache(layout, n_slots=cfg.num_kv_slots, dtype=DEFAULT_KV_DTYPE) as cache:
        engine = LLMEngine(cfg, CoreModelRunner(model, cache), tokenizer)
        for i, ids in enumerate(prompts):
            engine.add_request(str(i), ids, sp)
        done = {}
        while engine.has_unfinished_requests():
            done.update({int(o.request_id): o.outputs[0].token_ids for o in engine.step() if o.finished})
    return [list(done[i]) for i in range(len(prompts))]


NEW_TOKENS = 32


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["block", "slot"])
def test_default_kv_greedy_is_f32_kv_choice_up_to_near_ties(qwen05_model, layout):
    from parity.test_qwen05_greedy import CHATS

    model, tokenizer = qwen05_model
    prompts = [tokenizer.encode(tokenizer.apply_chat_template(c)) for c in CHATS]
    got = _greedy(model, tokenizer, prompts, layout)
    agree = total = 0
    for i, (ids, new) in enumerate(zip(prompts, got)):
        full = ids + new[:-1]  # f32 KV teacher-forced on the default's own continuation
        n = len(full)
        kw = (dict(slot_mapping=np.arange(n), block_tables=np.arange(-(-n // 16))[None, :], context_lens=[n])
              if layout == "block" else dict(seq_ids=[0]))
        with model.create_kv_cache(layout, n_slots=-(-n // 16) * 16, dtype="f32") as cache:
            ref = model.step(cache, token_ids=full, positions=np.arange(n), query_start=[0, n],
                             sample_rows=np.arange(len(ids) - 1, n), want_logits=True, **kw).logits
        best = ref.max(axis=1)
        mine = ref[np.arange(len(new)), new]
        assert (best - mine).max() <= TIE_MARGIN, f"chat {i}: a token {best - mine} below f32 KV's best"
        agree += int((ref.argmax(axis=1) == np.asarray(new)).sum())
        total += len(new)
    assert agree >= 0.95 * total  # near ties are rare: the default is f32 KV's greedy almost everywhere
