"""Code infill: POST /infill (llama-server's) and `suffix` on /v1/completions, on the real
Qwen2.5-Coder-0.5B.

- llama.vim's and llama.vscode's exact request bodies (from their sources) answered 200 in
  llama-server's shape;
- greedy middles token-identical to transformers' greedy generation on the same prompt ids
  (file-level and repo-level layouts), and the same middle through `suffix`;
- a middle that makes a function body compile and run; streaming; the editor's time and
  indentation limits; a model without FIM tokens answered 400 naming the field.

The layout, trimming and plain-text rules themselves are test_infill_units.py's.
"""

from __future__ import annotations

import json
import os
import re

import pytest
import requests

from server_helpers import error_of, post, sse_events, wait_idle

from llaisys.models.fim import ExtraChunk, build_fim_prompt, fim_codec
from llaisys.models.tokenizer import Tokenizer

# a known gap: the else branch of a recursive factorial (the 0.5B fills it, and n_indent ends it)
FACT_PREFIX = "def factorial(n):\n    if n == 0:\n        return 1\n"
FACT_SUFFIX = "\n\n\nprint(factorial(5))\n"
EXTRA = [{"filename": "util/math_helpers.py", "text": "def square(x):\n    return x * x\n"},
         {"filename": "util/strings.py", "text": "def shout(s):\n    return s.upper() + '!'\n"}]
NEW = 12  # greedy tokens compared with transformers


def llama_vim_warmup(extra: list) -> dict:
    """llama.vim's ring update request (autoload/llama.vim, s:ring_update), as json_encode writes it."""
    return {"id_slot": 0, "input_prefix": "", "input_suffix": "", "input_extra": extra, "prompt": "", "n_predict": 0,
            "temperature": 0.0, "samplers": [], "stream": False, "cache_prompt": True, "t_max_prompt_ms": 1,
            "t_max_predict_ms": 1, "response_fields": [""], "model": ""}


def llama_vim_fim(prefix: str, suffix: str, middle: str, extra: list, indent: int) -> dict:
    """llama.vim's FIM request (llama#fim) with its default config (n_predict 128, stop_strings [],
    t_max_prompt_ms 500, t_max_predict_ms 250 for a first request), model_fim ''."""
    return {"id_slot": 0, "input_prefix": prefix, "input_suffix": suffix, "input_extra": extra, "prompt": middle,
            "n_predict": 128, "stop": [], "n_indent": indent, "top_k": 40, "top_p": 0.90,
            "samplers": ["top_k", "top_p", "infill"], "stream": False, "cache_prompt": True,
            "t_max_prompt_ms": 500, "t_max_predict_ms": 250,
            "response_fields": ["content", "timings/prompt_n", "timings/prompt_ms", "timings/prompt_per_token_ms",
                                "timings/prompt_per_second", "timings/predicted_n", "timings/predicted_ms",
                                "timings/predicted_per_token_ms", "timings/predicted_per_second", "truncated",
                                "tokens_cached"],
            "model": ""}


def llama_vscode_fim(prefix: str, suffix: str, middle: str, extra: list, indent: int) -> dict:
    """llama.vscode's FIM request (src/llama-server.ts, createRequestPayload) with its default
    configuration (n_predict 128, max_parallel_completions 3, t_max_prompt_ms 500,
    t_max_predict_ms 2500, no lora, no model)."""
    return {"id_slot": 0, "input_prefix": prefix, "input_suffix": suffix, "input_extra": extra, "prompt": middle,
            "n_predict": 128, "n_cmpl": 3, "top_k": 40, "top_p": 0.99, "stream": False,
            "samplers": ["top_k", "top_p", "infill"], "cache_prompt": True, "n_indent": indent,
            "t_max_prompt_ms": 500, "t_max_predict_ms": 2500}


def vim_extra(chunks: list) -> list:
    """input_extra as llama.vim sends it: each chunk with its reltime() `time`."""
    return [dict(c, time=[1764331200, 123456]) for c in chunks]


@pytest.fixture(scope="module")
def server(start_dir_server):
    from llaisys import runtime

    old = os.environ.get("LLAISYS_ISA")
    if runtime.cpu_isa() == "avx512bf16":  # f32 activations: transformers' arithmetic, not bf16 rounding
        os.environ["LLAISYS_ISA"] = "avx512"
    try:
        return start_dir_server("--kv-dtype", "f32", "--max-num-seqs", "4")
    finally:
        if old is None:
            os.environ.pop("LLAISYS_ISA", None)
        else:
            os.environ["LLAISYS_ISA"] = old


@pytest.fixture(scope="module")
def tok(qwen05_dir):
    return Tokenizer.from_dir(qwen05_dir)


@pytest.fixture(scope="module")
def hf_greedy(qwen05_dir):
    """ids -> transformers' greedy new ids (float32), ending at a FIM stop id or after NEW tokens."""
    import torch
    from transformers import AutoModelForCausalLM

    stops = list(fim_codec(Tokenizer.from_dir(qwen05_dir)).tokens.stop_ids)
    hf = AutoModelForCausalLM.from_pretrained(qwen05_dir, dtype=torch.float32).eval()

    def run(ids: list) -> list:
        with torch.no_grad():
            out = hf.generate(torch.tensor([ids]), max_new_tokens=NEW, do_sample=False, eos_token_id=stops,
                              pad_token_id=0)
        return out[0, len(ids):].tolist()

    return run


@pytest.mark.parametrize("extra", [[], EXTRA], ids=["file-level", "repo-level"])
def test_greedy_middle_equals_transformers(server, tok, hf_greedy, extra):
    codec = fim_codec(tok)
    ids = build_fim_prompt(codec, FACT_PREFIX, FACT_SUFFIX, "", [ExtraChunk(**c) for c in extra]).token_ids
    r = post(server, "/infill", {"input_prefix": FACT_PREFIX, "input_suffix": FACT_SUFFIX, "input_extra": extra,
                                 "temperature": 0, "n_predict": NEW, "return_tokens": True})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["tokens_evaluated"] == len(ids) and body["prompt"] == tok.decode(ids)  # the same prompt ids
    want = hf_greedy(ids)
    assert body["tokens"] == want
    assert body["tokens_predicted"] == len(want)
    assert body["stop"] is True and body["stop_type"] in ("eos", "limit")
    if extra:
        assert body["prompt"].startswith("<|repo_name|>myproject\n<|file_sep|>util/math_helpers.py\n")
    if not extra:  # the same middle through suffix on /v1/completions
        r = post(server, "/v1/completions", {"prompt": FACT_PREFIX, "suffix": FACT_SUFFIX, "temperature": 0,
                                             "max_tokens": NEW})
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["text"] == tok.decode(want, skip_special_tokens=True)
        assert r.json()["usage"]["prompt_tokens"] == len(ids)


def test_middle_completes_a_function_body(server):
    r = post(server, "/infill", {"input_prefix": FACT_PREFIX, "input_suffix": FACT_SUFFIX, "prompt": "    ",
                                 "temperature": 0, "n_predict": 32, "n_indent": 4})
    assert r.status_code == 200, r.text
    middle = r.json()["content"]
    source = FACT_PREFIX + "    " + middle + FACT_SUFFIX
    code = compile(source, "gap.py", "exec")
    scope: dict = {}
    exec(code, scope)  # noqa: S102 -- the model's own middle, in a fresh namespace
    assert scope["factorial"](5) == 120
    assert r.json()["stop_type"] == "limit"  # n_indent ended it at the blank line


def test_llama_vim_bodies_answered_as_llama_server(server):
    warm = requests.post(server.url + "/infill", data=json.dumps(llama_vim_warmup(vim_extra(EXTRA))),
                         headers={"Content-Type": "application/json"}, timeout=300)
    assert warm.status_code == 200, warm.text
    assert warm.json() == {}  # response_fields [""] selects nothing, as llama-server answers
    body = llama_vim_fim(FACT_PREFIX, FACT_SUFFIX, "    ", vim_extra(EXTRA), 4)
    r = requests.post(server.url + "/infill", data=json.dumps(body), headers={"Content-Type": "application/json"},
                      timeout=300)
    assert r.status_code == 200, r.text
    assert re.search(r'"content"\s*:"', r.text)  # llama.vim's own check before it decodes the answer
    got = r.json()
    assert set(got) == {"content", "timings/prompt_n", "timings/prompt_ms", "timings/prompt_per_token_ms",
                        "timings/prompt_per_second", "timings/predicted_n", "timings/predicted_ms",
                        "timings/predicted_per_token_ms", "timings/predicted_per_second", "truncated",
                        "tokens_cached"}
    assert isinstance(got["content"], str) and got["truncated"] is False
    assert got["tokens_cached"] > 0  # the warm-up's prompt (the ring) came from the prefix cache


def test_llama_vscode_body_answers_n_cmpl_results(server):
    r = post(server, "/infill", llama_vscode_fim(FACT_PREFIX, FACT_SUFFIX, "    ", EXTRA, 4))
    assert r.status_code == 200, r.text
    results = r.json()
    assert isinstance(results, list) and [x["index"] for x in results] == [0, 1, 2]
    for x in results:
        assert x["stop"] is True and isinstance(x["content"], str)
        assert x["stop_type"] in ("eos", "limit", "word")
        t = x["timings"]
        assert t["prompt_n"] + t["cache_n"] == x["tokens_evaluated"]


def test_stream_adds_up_to_the_answer(server):
    body = {"input_prefix": FACT_PREFIX, "input_suffix": FACT_SUFFIX, "prompt": "    ", "temperature": 0,
            "n_predict": 32, "n_indent": 4}
    whole = post(server, "/infill", body).json()
    with requests.post(server.url + "/infill", json=dict(body, stream=True), stream=True, timeout=300) as r:
        assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/event-stream")
        events = [e for _, e in sse_events(r)]
    assert "[DONE]" not in events  # llama-server ends /infill streams without it
    pieces, final = events[:-1], events[-1]
    assert all(p["stop"] is False for p in pieces) and pieces
    assert "".join(p["content"] for p in pieces) == whole["content"]
    assert final["stop"] is True and final["content"] == "" and final["stop_type"] == whole["stop_type"]
    assert final["timings"]["predicted_n"] == whole["timings"]["predicted_n"]


def test_time_limits(server):
    # t_max_predict_ms: stop once a new line exists after the limit (1 ms: at the first new line)
    r = post(server, "/infill", {"input_prefix": FACT_PREFIX, "input_suffix": FACT_SUFFIX, "temperature": 0,
                                 "n_predict": 64, "t_max_predict_ms": 1})
    got = r.json()
    assert r.status_code == 200 and got["stop_type"] == "limit" and got["tokens_predicted"] < 64
    assert got["content"].count("\n") == 1 and got["content"].endswith("\n"), got["content"]
    # t_max_prompt_ms: no token within 1 ms -> an empty answer, stop_type limit
    r = post(server, "/infill", {"input_prefix": "x = 1\n" * 40, "input_suffix": "", "n_predict": 8,
                                 "t_max_prompt_ms": 1})
    assert r.status_code == 200 and r.json()["content"] == "" and r.json()["stop_type"] == "limit"
    # a client that leaves mid-stream: its request is aborted; nothing runs or holds KV blocks after these
    with requests.post(server.url + "/infill", json={"input_prefix": FACT_PREFIX, "input_suffix": FACT_SUFFIX,
                                                     "n_predict": 64, "stream": True, "ignore_eos": True},
                       stream=True, timeout=300) as s:
        next(s.iter_lines())
    assert not any(wait_idle(server).values())


def test_bad_infill_bodies_are_400(server):
    r = post(server, "/infill", {"input_prefix": 3})
    assert r.status_code == 400 and error_of(r)["param"] == "input_prefix"
    r = post(server, "/infill", {"input_extra": [{"filename": "a", "text": "x"}] * 300})
    assert r.status_code == 400 and error_of(r)["param"] == "input_extra"
    r = post(server, "/v1/completions", {"prompt": [1, 2, 3], "suffix": "x"})
    assert r.status_code == 400 and error_of(r)["param"] == "suffix"


@pytest.fixture(scope="module")
def no_fim_model(tiny_chat_model, tmp_path_factory):
    """The tiny chat checkpoint with the FIM tokens taken out of its tokenizer."""
    import shutil

    path = tmp_path_factory.mktemp("no_fim")
    for f in tiny_chat_model.iterdir():
        shutil.copy(f, path / f.name)
    names = {"<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"}
    tj = json.loads((path / "tokenizer.json").read_text())
    tj["added_tokens"] = [t for t in tj["added_tokens"] if t["content"] not in names]
    (path / "tokenizer.json").write_text(json.dumps(tj))
    cfg = json.loads((path / "tokenizer_config.json").read_text())
    cfg["added_tokens_decoder"] = {k: v for k, v in cfg.get("added_tokens_decoder", {}).items()
                                   if v["content"] not in names}
    (path / "tokenizer_config.json").write_text(json.dumps(cfg))
    return path


def test_model_without_fim_tokens_answers_400_naming_the_field(no_fim_model, tmp_path):
    from server_helpers import launch

    srv = launch(no_fim_model, tmp_path)
    try:
        r = post(srv, "/infill", {"input_prefix": "def f():\n", "input_suffix": "\n"})
        assert r.status_code == 400 and error_of(r)["param"] == "input_prefix" and "fill-in-the-middle" in r.text
        r = post(srv, "/v1/completions", {"prompt": "def f():\n", "suffix": "\n", "max_tokens": 2})
        assert r.status_code == 400 and error_of(r)["param"] == "suffix"
        r = post(srv, "/v1/completions", {"prompt": "def f():\n", "max_tokens": 2})
        assert r.status_code == 200  # without suffix the model still completes
    finally:
        srv.stop()


def test_bench_infill_replays_a_session(server, tmp_path):
    import bench_infill  # tools/ is on pytest's pythonpath

    out = tmp_path / "infill.json"
    assert bench_infill.main(["--base-url", server.url, "--requests", "3", "--ring-tokens", "300", "--cold", "1",
                              "--n-prefix", "6", "--n-suffix", "3", "--n-predict", "1", "--output", str(out)]) == 0
    res = json.loads(out.read_text())
    assert 0 < res["ring_tokens"] <= 300 and res["ring_chunks"] >= 1
    assert res["cold"][0]["cached"] == 0  # its unique first chunk: nothing of it was cached
    keys = res["keystrokes"]
    assert len(keys) == 3 and all(k["ttft_s"] > 0 for k in keys)
    # typing on one line: every keystroke after the first finds the ring and the lines above cached
    assert all(k["cached"] >= res["ring_tokens"] for k in keys[1:])
    assert res["ttft_p50_s"] <= res["ttft_p99_s"] and res["p50_over_cold"] > 0
