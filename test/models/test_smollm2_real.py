"""A real, trained Llama GGUF end to end: SmolLM2-135M-Instruct in Q4_1 (test/smollm2_files.py:
9 query / 3 kv heads, tied embedding, a GPT-2-style vocabulary with llama.cpp's "smollm"
pre-tokenizer). llaisys runs Q4_1 natively: `LLM(file)` keeps those matrices as the file's
blocks (gguf_model.py; nothing widened, nothing logged), and `llaisys convert-gguf` writes a
bf16 directory.
- run as it is, on the float path (LLAISYS_QUANT_F32_ROWS=0: every block dequantized in f32 to
  gguf-py's values, but for the last bit where the compiler fuses d q + m) with f32 activations,
  greedy chat answers are token for token transformers' own GGUF loading (f32, the same values);
  on the int8 kernels (the default for decode: activations rounded to int8 per 32) they begin as
  llama.cpp's and the f32 model's;
- its vocabulary encodes llama.cpp's own test texts (ggml-vocab-llama-bpe.gguf.inp, from the
  pinned llama.cpp source) to the ids llama.cpp's tokenizer gives with this file
  (smollm2_llama_cpp_ids.out, written by tools/llama_cpp_tokenize.py), and decodes them back;
- every converted weight equals transformers' own GGUF loading (its Q4_1 dequantization and
  its un-permutation of the q and k rows) rounded to bf16;
- on the converted directory, with f32 activations, greedy chat answers are token for token
  transformers' (f32 over the same weights)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from llama_cpp_files import models_dir, vocab_texts
from smollm2_files import smollm2_gguf

from llaisys import runtime

pytestmark = pytest.mark.slow

IDS_FILE = Path(__file__).with_name("smollm2_llama_cpp_ids.out")
CHATS = [[{"role": "user", "content": "What is the capital of France?"}],
         [{"role": "user", "content": "Write a haiku about autumn leaves."}],
         [{"role": "system", "content": "You are a helpful assistant."},
          {"role": "user", "content": "List three prime numbers greater than 100."}]]
NEW_TOKENS = 32


@pytest.fixture(scope="module")
def gguf_path():
    return smollm2_gguf()


@pytest.fixture(scope="module")
def converted(gguf_path, tmp_path_factory):
    out = tmp_path_factory.mktemp("smollm2") / "hf"
    subprocess.run([sys.executable, "-m", "llaisys.cli", "convert-gguf", str(gguf_path), str(out)], check=True,
                   capture_output=True, timeout=600)
    return out


def test_config_is_smollm2(converted):
    cfg = json.loads((converted / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"] and cfg["tie_word_embeddings"] is True
    assert (cfg["num_hidden_layers"], cfg["hidden_size"], cfg["intermediate_size"]) == (30, 576, 1536)
    assert (cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["vocab_size"]) == (9, 3, 49152)
    assert cfg["rope_theta"] == 100000.0


def test_tokenizer_encodes_as_llama_cpp(converted):
    from llaisys.models.tokenizer import Tokenizer

    texts = vocab_texts(models_dir(["ggml-vocab-llama-bpe.gguf.inp"]) / "ggml-vocab-llama-bpe.gguf.inp")
    lines = IDS_FILE.read_text().split("\n")[:len(texts)]
    assert len(lines) == len(texts) > 40
    tok = Tokenizer.from_dir(converted)
    wrong = []
    for text, line in zip(texts, lines):
        want = [int(x) for x in line.split()]
        got = tok.encode(text)
        if got != want or tok.decode(got) != text:
            wrong.append((text[:40], got[:12], want[:12]))
    assert not wrong, f"{len(wrong)} of {len(texts)} texts differ from llama.cpp, e.g. {wrong[:3]}"
    assert tok.encode("2024") == [tok.encode(d)[0] for d in "2024"]  # "smollm": one digit a token


@pytest.fixture(scope="module")
def hf_gguf(gguf_path):
    """transformers' own loading of the file: every tensor dequantized to f32 (its q/k rows un-permuted)."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.float32).eval()


def hf_greedy(hf, tok) -> list:
    """transformers' greedy continuations of CHATS (NEW_TOKENS each, past the end of the answer too)."""
    want = []
    for chat in CHATS:
        ids = tok.encode(tok.apply_chat_template(chat))
        with torch.no_grad():
            out = hf.generate(torch.tensor([ids]), max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=None,
                              pad_token_id=0)
        want.append(out[0, len(ids):].tolist())
    return want


def test_every_weight_equals_transformers_gguf_loading(converted, hf_gguf):
    from llaisys.models.safetensors_io import read_safetensors

    want = {k: v.detach() for k, v in hf_gguf.state_dict().items()}
    ours = read_safetensors(converted / "model.safetensors").tensors
    assert len(ours) == 30 * 9 + 2 and set(ours) <= set(want)  # 9 a layer, the embedding, the final norm
    mismatched = [name for name, t in ours.items()
                  if t.dtype != "bf16" or not np.array_equal(
                      t.data, want[name].to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16))]
    assert mismatched == []


# the engine's greedy answers with f32 KV, printed as JSON (a child: the ISA is chosen once a process)
CHILD = r"""
import json, sys
from llaisys import LLM, SamplingParams, runtime
model, chats, new_tokens = sys.argv[1], json.loads(sys.stdin.read()), int(sys.argv[2])
greedy = SamplingParams(temperature=0.0, max_tokens=new_tokens, ignore_eos=True)
with LLM(model, kv_dtype="f32", kv_cache_memory=128 << 20) as llm:
    outs = llm.chat(chats, greedy)
print(json.dumps({"isa": runtime.cpu_isa(), "ids": [o.outputs[0].token_ids for o in outs]}))
"""


def llaisys_greedy(model, **env_extra) -> list:
    """The engine's greedy continuations of CHATS with f32 activations (on an AVX512_BF16 CPU, the
    same CPU's f32 kernels)."""
    env = dict(os.environ, **env_extra)
    if runtime.cpu_isa() == "avx512bf16":
        env["LLAISYS_ISA"] = "avx512"
    child = subprocess.run([sys.executable, "-c", CHILD, str(model), str(NEW_TOKENS)], input=json.dumps(CHATS),
                           env=env, capture_output=True, text=True, timeout=600)
    assert child.returncode == 0, child.stderr[-4000:]
    res = json.loads(child.stdout.splitlines()[-1])
    assert res["isa"] != "avx512bf16"
    return res["ids"]


def test_f32_greedy_chat_equals_transformers(converted):
    from transformers import AutoModelForCausalLM

    from llaisys.models.tokenizer import Tokenizer

    tok = Tokenizer.from_dir(converted)
    want = hf_greedy(AutoModelForCausalLM.from_pretrained(converted, dtype=torch.float32).eval(), tok)
    assert llaisys_greedy(converted) == want
    assert "Paris" in tok.decode(want[0])  # trained weights: a real answer


def test_runs_as_it_is_on_the_float_path(gguf_path, converted, hf_gguf):
    from llaisys.models.tokenizer import Tokenizer

    want = hf_greedy(hf_gguf, Tokenizer.from_dir(converted))
    assert llaisys_greedy(gguf_path, LLAISYS_QUANT_F32_ROWS="0") == want


# Largest f32 logit gap allowed for a token the int8 path picks. Measured on Zen 5, 32 tokens of
# each answer: 0.08-0.28 on the AVX-512 x16, AVX2 and scalar paths and the file's rows; a wrong
# kernel's picks sit several logits down.
GAP = 1.0


def f32_gaps(hf, tok, got) -> list:
    """Per continuation of CHATS in got: at each generated position, how far below the f32
    model's best logit the chosen token's is (0: its own greedy pick), teacher-forced along got."""
    gaps = []
    for chat, out in zip(CHATS, got):
        ids = tok.encode(tok.apply_chat_template(chat))
        with torch.no_grad():
            logits = hf(torch.tensor([ids + out])).logits[0, len(ids) - 1:-1].double()
        chosen = logits[torch.arange(len(out)), torch.tensor(out)]
        gaps.append((logits.max(-1).values - chosen).tolist())
    return gaps


def test_runs_as_it_is_on_the_int8_kernels(gguf_path, converted, hf_gguf):
    """The default path: the Q4_1 matrices and the Q8_0 embedding / lm_head take activations
    rounded to int8 per 32, as in llama.cpp. Greedy answers then part from the f32 model's where
    its top two logits are close: "What is the capital of France?" flips from "The capital of
    France is Paris." to "L'Étoile, la ..." in both engines (llama.cpp's server, this file:
    "L'Étoile, la Marseillaise, ..."), and where the answers part depends on each kernel's
    roundings (x16 or file rows, AVX2 or AVX-512, AMX's bf16 prefill). So each token llaisys
    picks is held to the f32 model's choice teacher-forced along llaisys's own answer: within
    GAP of the f32 model's best logit at that position (the weights are the same, only the
    activations' rounding differs)."""
    from llaisys.models.tokenizer import Tokenizer

    tok = Tokenizer.from_dir(converted)
    got = llaisys_greedy(gguf_path)
    gaps = f32_gaps(hf_gguf, tok, got)
    assert max(max(g) for g in gaps) < GAP, ([round(max(g), 3) for g in gaps], [tok.decode(ids) for ids in got])
    assert "Paris" in tok.decode(hf_greedy(hf_gguf, tok)[0])  # the f32 reference is the trained model's


def test_the_q4_1_matrices_load_as_their_blocks(gguf_path, caplog):
    from llaisys.models import gguf_model
    from llaisys.models.tensors import QuantTensor

    with caplog.at_level("INFO", logger="llaisys.models.gguf_model"):
        g = gguf_model.load_gguf(gguf_path)
    assert "widened" not in caplog.text
    summary = gguf_model.quant_summary(g.loaded)
    assert set(summary) == {"f32", "q4_1", "q8_0"} and summary["q8_0"][0] == 1  # the embedding: Q8_0
    assert summary["q4_1"][0] == 30 * 7  # every linear of the 30 layers
    down = g.loaded.tensors["model.layers.0.mlp.down_proj.weight"]
    info = next(t for t in g.file.tensors if t.name == "blk.0.ffn_down.weight")
    assert isinstance(down, QuantTensor) and down.data.tobytes() == g.file.tensor_bytes(info).tobytes()
