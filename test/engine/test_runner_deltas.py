"""The runner receives only deltas (vLLM v1's SchedulerOutput contract, sched_output.py): a
request's prompt crosses into the runner once, even when its prefill is chunked and it is
preempted and recomputed; after that only the tokens it gained and its new blocks do."""

import pytest

from fake_runner import FakeRunner, make_engine, run_all
from llaisys.engine import SamplingParams


class Recorder:
    """Wraps the runner state's update: records what each step hands the runner."""

    def __init__(self, engine):
        self.inputs = engine.step_runner.inputs
        self.real = self.inputs.update
        self.steps = []  # per step: (new {req_id: token ids}, cached {req_id: new token ids}, finished ids)
        self.inputs.update = self.update

    def update(self, out):
        c = out.cached_reqs
        self.steps.append(({n.req_id: list(n.token_ids) for n in out.new_reqs},
                           dict(zip(c.req_ids, (list(t) for t in c.new_token_ids))),
                           set(out.finished_req_ids), dict(zip(c.req_ids, c.resumed))))
        return self.real(out)


PROMPTS = {f"r{i}": [(7 * i + 3 * j) % 250 + 1 for j in range(23 + 5 * i)] for i in range(5)}


def run(layout, **config):
    runner = FakeRunner()
    eng = make_engine(runner, kv_layout=layout, **config)
    rec = Recorder(eng)
    for rid, prompt in PROMPTS.items():
        eng.add_request(rid, prompt, SamplingParams(max_tokens=20, ignore_eos=True))
    finals = run_all(eng)
    return eng, runner, rec, {rid: o.outputs[0].token_ids for rid, o in finals.items()}


@pytest.mark.parametrize("layout", ["block", "slot"])
def test_a_prompt_crosses_into_the_runner_once(layout):
    # 20 blocks of 4 tokens for 5 requests of 23..43 + 20 tokens: they preempt each other;
    # 16 tokens a step: every prompt is prefilled in chunks
    eng, runner, rec, outputs = run(layout, num_blocks=20, max_num_batched_tokens=16)
    assert eng.scheduler.num_preemptions > 0, "the test must preempt"
    assert any(step.get(rid, 0) > 1 for step in runner.steps for rid in PROMPTS), "prefill must be chunked"
    resumed = {rid for _, _, _, res in rec.steps for rid, r in res.items() if r}
    assert resumed, "a preempted request must come back as a held one"
    sent = {rid: [] for rid in PROMPTS}  # every token id that crossed, in order
    news = {rid: 0 for rid in PROMPTS}
    finished_sent = {rid: 0 for rid in PROMPTS}
    for new, cached, finished, _ in rec.steps:
        for rid, ids in new.items():
            news[rid] += 1
            sent[rid] += ids
        for rid, ids in cached.items():
            assert rid not in new
            sent[rid] += ids
        for rid in finished:
            finished_sent[rid] += 1
    for rid, prompt in PROMPTS.items():
        assert news[rid] == 1, f"{rid} was sent whole {news[rid]} times"
        assert finished_sent[rid] <= 1
        full = prompt + outputs[rid]
        # the prompt once, then each sampled token once: a prefix of prompt + output (the last
        # token is never needed, the request finished on it)
        assert sent[rid] == full[:len(sent[rid])] and len(sent[rid]) >= len(prompt) + len(outputs[rid]) - 1
    # the deltas rebuild exactly what the requests hold: same tokens as a roomy run without preemption
    _, _, _, roomy = run(layout, num_blocks=256, max_num_batched_tokens=256)
    assert outputs == roomy
    assert not eng.step_runner.inputs.held, "finished requests' runner state must be dropped"


def test_held_state_grows_past_its_buffers():
    """Rows and token capacity grow on demand (more requests than initial rows, prompts longer
    than the initial width) without disturbing what is held."""
    eng = make_engine(FakeRunner(), max_num_seqs=16, max_num_batched_tokens=512, max_model_len=1024, num_blocks=512)
    prompts = {f"g{i}": [(i + j) % 200 + 1 for j in range(300 + i)] for i in range(12)}
    for rid, p in prompts.items():
        eng.add_request(rid, p, SamplingParams(max_tokens=4, ignore_eos=True))
    first = run_all(eng)
    ref = make_engine(FakeRunner(), max_num_seqs=1, max_num_batched_tokens=512, max_model_len=1024, num_blocks=512)
    for rid, p in prompts.items():
        ref.add_request(rid, p, SamplingParams(max_tokens=4, ignore_eos=True))
    second = run_all(ref)
    assert {r: o.outputs[0].token_ids for r, o in first.items()} == {r: o.outputs[0].token_ids
                                                                     for r, o in second.items()}


def test_the_step_runs_one_way():
    """Issue 41's shape: LLMEngine.step is schedule -> execute -> process with no speculative
    hook, and the scheduler imports neither the detokenizer nor the output processor."""
    import ast
    import inspect

    from llaisys.engine import llm_engine, scheduler

    body = inspect.getsource(llm_engine.LLMEngine.step)
    assert "spec" not in body and len(body.strip().splitlines()) <= 6
    imported = {n.module for n in ast.walk(ast.parse(inspect.getsource(scheduler))) if isinstance(n, ast.ImportFrom)}
    assert not imported & {"detokenizer", "output_processor"}, imported
