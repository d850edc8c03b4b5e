"""The OpenAI server on an NVIDIA GPU (`llaisys serve --device nvidia`), over loopback: a tiny
random checkpoint with the real Qwen2.5 tokenizer, so it runs in seconds. Skips without a GPU.

The tokenizer comes from the real 0.5B directory, or from LLAISYS_TEST_TOKENIZER_DIR (a folder
with config.json and the tokenizer files alone): a GPU machine has no model hub, and
tools/gpu/run_checks.sh carries that folder there. What is checked is the server's own work
on the GPU (engine steps, device sampling, streaming, batching, the KV pool sized from the
GPU's memory); the numerics of the forward are test/parity's.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from llaisys import DeviceType, runtime
from server_helpers import MODEL_NAME, error_of, launch, post, stream_post, wait_idle

pytestmark = [pytest.mark.nvidia,
              pytest.mark.skipif(runtime.device_count(DeviceType.NVIDIA) == 0,
                                 reason="no NVIDIA GPU in this build/machine")]

GPU_ARGS = ("--device", "nvidia", "--gpu-memory-utilization", "0.05")
PROMPT = "def fibonacci(n):"


@pytest.fixture(scope="module")
def tiny(request, tmp_path_factory):
    from tiny_checkpoint import make_tiny_checkpoint

    tok = os.environ.get("LLAISYS_TEST_TOKENIZER_DIR") or request.getfixturevalue("qwen05_dir")
    return make_tiny_checkpoint(tmp_path_factory.mktemp("tiny_gpu"), Path(tok), tie=True)


@pytest.fixture(scope="module")
def server(tiny, tmp_path_factory, request):
    srv = launch(tiny, tmp_path_factory.mktemp("gpu_server"), *GPU_ARGS)
    yield srv
    srv.stop()
    if request.session.testsfailed:
        print(f"\n---- server log (port {srv.port}) ----\n{srv.log()[-20000:]}")


def body(**kw) -> dict:
    return {"model": MODEL_NAME, "prompt": PROMPT, "temperature": 0, "max_tokens": 24, **kw}


def complete(srv, **kw):
    r = post(srv, "/v1/completions", body(**kw), timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def test_greedy_text_is_the_offline_engines_and_streams_the_same(server, tiny):
    from llaisys import LLM, SamplingParams

    got = complete(server)
    text = got["choices"][0]["text"]
    assert got["usage"]["completion_tokens"] > 0
    events = stream_post(server, "/v1/completions", body())
    assert events[-1][1] == "[DONE]"
    streamed = "".join(e["choices"][0]["text"] for _, e in events[:-1] if e.get("choices"))
    assert streamed == text
    with LLM(str(tiny), device="nvidia", gpu_memory_utilization=0.05) as llm:  # the same GPU, in this process
        offline = llm.generate([PROMPT], SamplingParams(temperature=0.0, max_tokens=24))[0].outputs[0].text
    assert offline == text


def test_concurrent_requests_batch_and_leave_nothing_held(server):
    """16 requests at once, greedy and seeded sampling mixed: every one answers, the greedy ones
    all alike, and afterwards nothing runs, waits or holds a KV block."""
    bodies = [{"temperature": 0} if i % 2 == 0 else {"temperature": 0.8, "seed": i} for i in range(16)]
    with ThreadPoolExecutor(16) as pool:
        outs = list(pool.map(lambda b: complete(server, **b), bodies))
    greedy = {o["choices"][0]["text"] for o, b in zip(outs, bodies) if b["temperature"] == 0}
    assert len(greedy) == 1
    again = complete(server, temperature=0.8, seed=3)  # seeded sampling repeats on the GPU
    assert again["choices"][0]["text"] == outs[3]["choices"][0]["text"]
    assert wait_idle(server)["kv_cache_usage_perc"] == 0.0


def test_bad_request_is_a_400_and_the_server_goes_on(server):
    r = post(server, "/v1/completions", body(max_tokens=-1), timeout=60)
    assert r.status_code == 400 and error_of(r)["type"] == "invalid_request_error"
    r = post(server, "/v1/completions", body(logit_bias={"99999999": 5}), timeout=60)
    assert r.status_code == 400 and error_of(r)["type"] == "invalid_request_error"
    assert complete(server)["choices"][0]["text"] == complete(server)["choices"][0]["text"]
