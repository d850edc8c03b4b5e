"""Property tests: random add / step / abort sequences over random small configurations keep
the KV bookkeeping consistent, respect the step limits, and give every request that was not
aborted exactly the output it gets when run alone with plenty of memory (the engine in its
three step orders, test_llm_engine.MODES; the one alone synchronous)."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fake_runner import FakeRunner, make_engine, run_all
from test_llm_engine import MODES
from llaisys.engine import SamplingParams

SHARED = [(i * 37) % 250 + 1 for i in range(64)]  # prompts start with pieces of this: prefix hits

configs = st.fixed_dictionaries({
    "kv_layout": st.sampled_from(["block", "slot"]),
    "enable_prefix_caching": st.booleans(),
    "block_size": st.sampled_from([1, 2, 4, 16]),
    "num_blocks_tokens": st.integers(24, 160),  # pool size in tokens
    "max_num_seqs": st.integers(1, 6),
    "max_num_batched_tokens": st.integers(6, 40),
    "long_prefill_token_threshold": st.sampled_from([0, 3, 8]),
})

requests = st.fixed_dictionaries({
    "shared": st.integers(0, 40),
    "tail": st.lists(st.integers(1, 250), max_size=12),
    "max_tokens": st.integers(1, 12),
    "n": st.integers(1, 3),
    "temperature": st.sampled_from([0.0, 1.0]),
    "stop": st.sampled_from([None, "\n\n", ["a", "bc"]]),
})

ops = st.lists(st.one_of(
    st.tuples(st.just("add"), requests),
    st.tuples(st.just("step"), st.integers(1, 4)),
    st.tuples(st.just("abort"), st.integers(0, 30)),
), min_size=1, max_size=30)


def build(cfg, mode="sync"):
    cfg = dict(cfg, **MODES[mode])
    if cfg["kv_layout"] == "slot":
        cfg["enable_prefix_caching"] = False
    bs = cfg["block_size"]
    cfg["num_blocks"] = max(1, cfg.pop("num_blocks_tokens") // bs)
    cfg["max_num_batched_tokens"] = max(cfg["max_num_batched_tokens"], cfg["max_num_seqs"])
    return make_engine(FakeRunner(), max_model_len=64, seed=1, **cfg)


def params(r, i):
    return SamplingParams(n=r["n"], max_tokens=r["max_tokens"], temperature=r["temperature"], seed=1000 + i,
                          stop=r["stop"], ignore_eos=i % 2 == 0)


def check_step(eng):
    kv = eng.scheduler.kv
    kv.check_invariants()
    cfg = eng.config
    if eng.runner.steps:
        last = eng.runner.steps[-1]
        assert sum(last.values()) <= cfg.max_num_batched_tokens and len(last) <= cfg.max_num_seqs
    assert len(eng.scheduler.running) <= cfg.max_num_seqs
    held = sum(1 for b in kv.blocks if b.ref_cnt)
    assert held == kv.num_used_blocks


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(cfg=configs, script=ops, mode=st.sampled_from(list(MODES)))
def test_random_add_step_abort(cfg, script, mode):
    eng = build(cfg, mode)
    added, aborted, finals = {}, set(), {}

    def collect(outs):
        for o in outs:
            assert o.request_id not in finals, "output after the final one"
            if o.finished:
                finals[o.request_id] = o

    for op, arg in script:
        if op == "add":
            rid = f"q{len(added)}"
            prompt = SHARED[:arg["shared"]] + arg["tail"] or [1]
            try:
                eng.add_request(rid, prompt, params(arg, len(added)))
            except ValueError as e:
                assert "exceeds max_model_len" in str(e) or "KV blocks" in str(e)
                continue
            added[rid] = (prompt, arg, len(added))
        elif op == "step":
            for _ in range(arg):
                collect(eng.step())
                check_step(eng)
        elif added:
            rid = sorted(added)[arg % len(added)]
            if rid not in finals:
                aborted.add(rid)
            eng.abort_request(rid)
        check_step(eng)
    while eng.has_unfinished_requests():
        collect(eng.step())
        check_step(eng)
    assert set(finals) == set(added)
    assert eng.scheduler.kv.num_used_blocks == 0

    for rid, (prompt, r, i) in added.items():
        out = finals[rid]
        if any(c.finish_reason == "abort" for c in out.outputs):
            assert rid in aborted
            continue
        alone = make_engine(num_blocks=256, max_model_len=64, block_size=4, seed=1)
        alone.add_request(rid, prompt, params(r, i))
        (ref,) = run_all(alone).values()
        assert [(c.token_ids, c.text, c.finish_reason, c.stop_reason) for c in out.outputs] == \
               [(c.token_ids, c.text, c.finish_reason, c.stop_reason) for c in ref.outputs]
