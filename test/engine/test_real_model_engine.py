"""The engine on the real Qwen2.5-Coder-0.5B-Instruct: greedy token ids must not depend on
how the requests were scheduled.

One reference run (each prompt alone, BLOCK layout, no prefix caching) is compared with:
batches of 4 and 16 (the 16 with a small token budget, so prompts are prefilled in chunks),
prefix caching on (cold and with every prompt block already cached), a KV pool so small that
requests are preempted and recomputed, and the SLOT layout. Then a two-turn chat reuses the
first turn's blocks, and n > 1 sampling with a seed is reproducible. After every run no KV
block is held (the autouse leak check in conftest.py, plus check_idle here).

The model is loaded once; each configuration is a fresh LLMEngine on that Worker
(Worker.make_runner reallocates the KV cache, so one engine is alive at a time).
"""

import pytest

from llaisys.engine import EngineConfig, LLMEngine, SamplingParams
from llaisys.engine.config import KV_MAX_SEQS
from llaisys.engine.worker import Worker, WorkerConfig

pytestmark = pytest.mark.slow

BLOCK = 16
MAX_TOKENS = 12
GREEDY = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True)
CODE = """def merge(a, b):
    out = []
    i = j = 0
    while i < len(a) and j < len(b):
        if a[i] <= b[j]:
            out.append(a[i]); i += 1
        else:
            out.append(b[j]); j += 1
    return out + a[i:] + b[j:]
"""
# 16 chat prompts, 30 to ~120 tokens; all but two share the template's default system prompt
CHATS = [
    [{"role": "user", "content": "Hi"}],
    [{"role": "user", "content": "What is 2+2?"}],
    [{"role": "user", "content": "Write a Python function that reverses a string."}],
    [{"role": "user", "content": f"Explain what this code does, step by step:\n```python\n{CODE}```"}],
    [{"role": "user", "content": "Name three prime numbers."}],
    [{"role": "user", "content": "用一句话解释什么是递归。"}],
    [{"role": "system", "content": "You are a terse assistant. Answer in one sentence."},
     {"role": "user", "content": "What is the capital of Japan?"}],
    [{"role": "user", "content": "Translate 'good morning' into French and German."}],
    [{"role": "user", "content": "Fix the bug:\n```js\nfunction add(a, b) { return a - b }\n```"},
     {"role": "assistant", "content": "The function subtracts instead of adding."},
     {"role": "user", "content": "Show the corrected code and one test for it."}],
    [{"role": "user", "content": "Write a haiku about the sea."}],
    [{"role": "user", "content": "What does HTTP stand for?"}],
    [{"role": "user", "content": "Give a SQL query that counts the rows of a table named users."}],
    [{"role": "user", "content": "Rewrite this without the explicit loop:\n```python\n"
                                 "total = 0\nfor x in range(10):\n    if x % 2 == 0:\n        total += x * x\n```"}],
    [{"role": "user", "content": "What is a linked list? 🙂"}],
    [{"role": "system", "content": "You review code. Be specific."},
     {"role": "user", "content": f"Review:\n```python\n{CODE}```"}],
    [{"role": "user", "content": "Sort [3, 1, 2] in Python."}],
]


@pytest.fixture(scope="module")
def worker(qwen05_dir):
    # f32 KV: these tests hold batching, prefix-cache hits and preemption to the same tokens as
    # one request alone. With a 16-bit cache they need not: a step of another shape moves a K/V
    # value by ~1e-7 (f32 logits of a 70-token prompt computed in 4 chunks differ from one step
    # by 2.5e-5), and where that crosses an f16 rounding boundary it becomes one f16 ulp (the
    # same logits differ by 2.8e-3 with f16 KV), enough to tip a seeded sample at temperature 1.5.
    w = Worker(WorkerConfig(model=str(qwen05_dir), kv_dtype="f32", kv_cache_memory=64 << 20))
    yield w
    w.close()


@pytest.fixture(scope="module")
def prompts(worker):
    tok = worker.tokenizer
    ids = [tok.encode(tok.apply_chat_template(c, add_generation_prompt=True)) for c in CHATS]
    assert min(map(len, ids)) >= 20 and max(map(len, ids)) <= 130, [len(p) for p in ids]
    return ids


class Spy:
    """Passes each step to the real runner and records its shape (rows, tokens, sampled rows)."""

    def __init__(self, runner):
        self.runner = runner
        self.steps = []  # per computing step: (n_seqs, n_tokens, n_sample)

    def prepare(self, batch):  # the step's core arguments, made on the engine's thread
        self.runner.prepare(batch)

    def execute(self, batch):
        if batch.n_tokens:
            self.steps.append((batch.n_seqs, batch.n_tokens, batch.n_sample))
        return self.runner.execute(batch)


def make_engine(worker, **overrides):
    """A fresh engine on the shared worker; defaults: BLOCK, no prefix cache, a large pool."""
    cfg = dict(max_num_seqs=16, max_num_batched_tokens=2048, max_model_len=1024, block_size=BLOCK,
               num_blocks=worker.num_blocks(BLOCK), enable_prefix_caching=False, seed=0)
    cfg.update(overrides)
    config = EngineConfig(**cfg)
    spy = Spy(worker.make_runner(config))
    return LLMEngine(config, spy, worker.tokenizer), spy


def check_idle(eng):
    """Nothing is held: every block is free (cached ones included), every ref count zero."""
    kv = eng.scheduler.kv
    kv.check_invariants()
    assert not eng.has_unfinished_requests()
    assert kv.num_used_blocks == 0 and not kv.tables
    assert all(b.ref_cnt == 0 for b in kv.blocks)


def run(eng, prompts, sp=GREEDY, batch=None, tag="r"):
    """Run `prompts` in groups of `batch` (all at once when None), each group to the end;
    the finished RequestOutputs in prompt order."""
    batch = batch or len(prompts)
    outs = []
    for g in range(0, len(prompts), batch):
        ids = [f"{tag}{i}" for i in range(g, min(g + batch, len(prompts)))]
        for rid, p in zip(ids, prompts[g:g + batch]):
            eng.add_request(rid, p, sp)
        done = {}
        while eng.has_unfinished_requests():
            for o in eng.step():
                if o.finished:
                    done[o.request_id] = o
        outs += [done[rid] for rid in ids]
    check_idle(eng)
    for o in outs:
        assert o.error is None and all(c.finish_reason == "length" for c in o.outputs), o
    return outs


def tokens(outs):
    return [o.outputs[0].token_ids for o in outs]


@pytest.fixture(scope="module")
def reference(worker, prompts):
    """Each prompt alone, BLOCK layout, no prefix caching, room for everything."""
    eng, spy = make_engine(worker)
    ref = tokens(run(eng, prompts, batch=1))
    assert max(n for n, _, _ in spy.steps) == 1
    assert all(len(t) == MAX_TOKENS for t in ref)
    return ref


def test_batch_of_4_matches_one_at_a_time(worker, prompts, reference):
    eng, spy = make_engine(worker)
    assert tokens(run(eng, prompts[:8], batch=4)) == reference[:8]
    assert max(n for n, _, _ in spy.steps) == 4


def test_batch_of_16_with_chunked_prefill_matches_one_at_a_time(worker, prompts, reference):
    eng, spy = make_engine(worker, max_num_batched_tokens=96, long_prefill_token_threshold=48)
    assert tokens(run(eng, prompts)) == reference
    assert max(n for n, _, _ in spy.steps) == 16  # all 16 were computed in one step
    assert max(t for _, t, _ in spy.steps) <= 96
    # a prompt longer than 48 tokens is prefilled over several steps: some rows end mid-prompt
    assert any(s < n for n, _, s in spy.steps)


def test_prefix_caching_matches_no_caching(worker, prompts, reference):
    eng, _ = make_engine(worker, enable_prefix_caching=True, max_num_batched_tokens=128)
    # cold: requests admitted after the first step find the shared system-prompt block cached
    assert tokens(run(eng, prompts, tag="cold")) == reference
    stats = eng.scheduler.kv.stats
    assert stats.hit_tokens > 0 and eng.scheduler.kv.num_cached_blocks > 0
    # warm: every full block of every prompt (but the one holding the last token) is a hit
    before = stats.hit_tokens
    outs = run(eng, prompts, tag="warm")
    assert tokens(outs) == reference
    want = [(len(p) - 1) // BLOCK * BLOCK for p in prompts]
    assert [o.usage.cached_tokens for o in outs] == want
    assert stats.hit_tokens - before == sum(want)


@pytest.mark.parametrize("mode", ["async_output", "async_scheduling"])
def test_async_output_matches_one_at_a_time(worker, prompts, reference, mode):
    # outputs made while the next step computes (and, async_scheduling, each step planned while
    # the one before computes): chunked prefill, prefix hits (the second run) and preemption (a
    # pool of 12 blocks) give the reference's tokens
    for cfg in (dict(max_num_batched_tokens=96, long_prefill_token_threshold=48, enable_prefix_caching=True),
                dict(num_blocks=12)):
        eng, spy = make_engine(worker, **{mode: True}, **cfg)
        try:
            chosen = prompts if "num_blocks" not in cfg else [prompts[i] for i in SHORT]
            want = reference if "num_blocks" not in cfg else [reference[i] for i in SHORT]
            assert tokens(run(eng, chosen)) == want
            if cfg.get("enable_prefix_caching"):
                assert tokens(run(eng, chosen, tag="warm")) == want
                assert eng.scheduler.kv.stats.hit_tokens > 0
            else:
                assert eng.scheduler.num_preemptions > 0
            assert (eng.step_runner.num_started_ahead > 10) is (mode == "async_scheduling")
        finally:
            eng.close()


SHORT = [0, 1, 2, 4, 5, 6, 7, 9]  # prompts of 30-39 tokens: 3 or 4 blocks each with their output


@pytest.mark.parametrize("sp", [
    SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True, temperature=0.0, repetition_penalty=1.8,
                   frequency_penalty=1.5),
    SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True, temperature=1.0, seed=11, presence_penalty=1.5),
], ids=["greedy", "seeded"])
def test_async_scheduling_penalties_match_the_synchronous_engine(worker, prompts, sp):
    """The core's penalties count the whole output: with async scheduling a penalised row's last
    output id is the token the step in flight samples, written on the step thread just before the
    call. Strong penalties make a missing or wrong id change the tokens."""
    got = {}
    for mode in ({}, dict(async_scheduling=True)):
        eng, spy = make_engine(worker, **mode)
        try:
            got[bool(mode)] = tokens(run(eng, prompts[:6], sp))
            assert (eng.step_runner.num_started_ahead > 10) is bool(mode)
        finally:
            eng.close()
    assert got[True] == got[False]


def test_preemption_matches_a_large_pool(worker, prompts, reference):
    # 12 blocks admit four of them with no room to grow: a decode that needs a new block
    # preempts the latest admitted, which later recomputes its prompt and output so far
    eng, _ = make_engine(worker, num_blocks=12)
    assert tokens(run(eng, [prompts[i] for i in SHORT])) == [reference[i] for i in SHORT]
    assert eng.scheduler.num_preemptions > 0
    assert eng.metrics.num_preemptions_total == eng.scheduler.num_preemptions


def test_slot_layout_matches_block(worker, prompts, reference):
    eng, spy = make_engine(worker, kv_layout="slot")
    assert tokens(run(eng, prompts)) == reference
    assert max(n for n, _, _ in spy.steps) == 16
    assert len(eng.scheduler.kv._free_seq_ids) == KV_MAX_SEQS  # every seq id was given back


def test_second_chat_turn_reuses_the_first_turns_blocks(worker):
    tok = worker.tokenizer
    turn1 = [{"role": "user", "content": "Write a Python function that adds two numbers."}]
    sp = SamplingParams(temperature=0.0, max_tokens=16)

    def encode(conv):
        return tok.encode(tok.apply_chat_template(conv, add_generation_prompt=True))

    eng, _ = make_engine(worker, enable_prefix_caching=True)
    (o1,) = run_free(eng, [encode(turn1)], sp, "t1")
    assert o1.usage.cached_tokens == 0
    turn2 = turn1 + [{"role": "assistant", "content": o1.outputs[0].text},
                     {"role": "user", "content": "Now add type hints."}]
    p1, p2 = encode(turn1), encode(turn2)
    assert p2[:len(p1)] == p1  # the second turn re-sends the first
    (o2,) = run_free(eng, [p2], sp, "t2")
    assert o2.usage.cached_tokens >= len(p1) // BLOCK * BLOCK > 0
    cold, _ = make_engine(worker, enable_prefix_caching=False)
    (o3,) = run_free(cold, [p2], sp, "t2")
    assert o3.usage.cached_tokens == 0
    assert o3.outputs[0].token_ids == o2.outputs[0].token_ids


def run_free(eng, prompts, sp, tag):
    """run() for requests that may stop early (eos)."""
    for i, p in enumerate(prompts):
        eng.add_request(f"{tag}{i}", p, sp)
    done = {}
    while eng.has_unfinished_requests():
        for o in eng.step():
            if o.finished:
                done[o.request_id] = o
    check_idle(eng)
    return [done[f"{tag}{i}"] for i in range(len(prompts))]


def test_n_samples_with_a_seed_are_reproducible(worker, prompts):
    # a hot temperature on an open prompt, so the siblings' seeds lead to different text
    sp = SamplingParams(n=3, temperature=1.5, seed=1234, max_tokens=MAX_TOKENS, ignore_eos=True)
    p = prompts[9]
    eng, _ = make_engine(worker, enable_prefix_caching=True)
    (first,) = run(eng, [p], sp, tag="a")
    (again,) = run(eng, [p], sp, tag="b")  # the prompt's blocks now come from the cache
    assert again.usage.cached_tokens > 0
    cold, _ = make_engine(worker, enable_prefix_caching=False)
    (fresh,) = run(cold, [p], sp, tag="c")  # three siblings each computing the prompt
    samples = [c.token_ids for c in first.outputs]
    assert len(samples) == 3 and all(len(s) == MAX_TOKENS for s in samples)
    assert [c.token_ids for c in again.outputs] == samples
    assert [c.token_ids for c in fresh.outputs] == samples
    assert len({tuple(s) for s in samples}) > 1  # the siblings really sampled (different seeds)
