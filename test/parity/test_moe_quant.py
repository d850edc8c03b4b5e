"""Quantized experts (`quantize="q8_0" | "q4_k"` at load): each expert's 2-D tensors quantized
by the library, stacked as GGUF blocks into the 3-D expert slots and run through the quantized
linear over one expert's rows at a time. The reference is transformers over the same weights
dequantized (bit for bit as gguf-py). On the quantized kernels' float path
(LLAISYS_QUANT_F32_ROWS=0, in a child process: the setting is read once per process) nothing
but f32 sums differs: logits within EXACT at every position. On the default path, whose int8
kernels round the activations per block (a lot of noise at hidden 64: two blocks a row),
logits within ATOL and the greedy tokens equal wherever transformers' top two are further apart
than 2 ATOL."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from llaisys.models.arch import weight_slots
from llaisys.models.loader import load_model
from llaisys.models.model import Model
from llaisys.models.safetensors_io import RawTensor, write_safetensors
from llaisys.models.tensors import QuantTensor
from llaisys.ops import dequantize
from llaisys.tensor import Tensor

from .test_moe import PROMPTS, make_tiny_moe
from .test_tiny_qwen2 import Runner, hf_logits

EXACT = 1e-4  # measured: 6e-6 at most
ATOL = 0.3  # measured: 0.14 (q8_0) at most; a wrong expert's weights move logits by several units
CHILD = """
import json, sys
import numpy as np
from llaisys.models.loader import load_model
from llaisys.models.model import Model
path, scheme, prompt = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
with Model(load_model(path, quantize=scheme)) as m:
    cache = m.create_kv_cache("block", n_slots=64, block_size=16)
    n = len(prompt)
    res = m.step(cache, token_ids=prompt, positions=list(range(n)), query_start=[0, n], sample_rows=list(range(n)),
                 slot_mapping=list(range(n)), block_tables=[[0, 1, 2, 3]], context_lens=[n], want_logits=True)
    np.save(sys.argv[4], res.logits)
"""


def dequantized(t) -> np.ndarray:
    with Tensor.from_numpy(t.data, t.dtype, shape=t.shape) as q, Tensor(t.shape, "f32") as out:
        dequantize(out, q)
        return out.numpy()


def quantized_with_reference(tmp_path, family: str, scheme: str):
    """A tiny `family` checkpoint (under tmp_path/ckpt) loaded with its experts quantized by
    `scheme`, and transformers over the same weights dequantized: (path, loaded, hf)."""
    import transformers

    path = tmp_path / "ckpt"
    # expert and shared widths of whole 32-blocks, so every expert projection is quantized
    make_tiny_moe(path, family, moe_intermediate_size=64, **({"shared_expert_intermediate_size": 96}
                                                             if family == "qwen2_moe" else {}))
    loaded = load_model(path, quantize=scheme)
    slots = weight_slots(loaded.config)
    experts = {n: t for n, t in loaded.tensors.items() if slots[n].kind.startswith(("EXPERT_", "SHARED_"))
               and slots[n].kind != "SHARED_EXPERT_GATE"}
    assert experts and all(isinstance(t, QuantTensor) for t in experts.values())
    ref_dir = tmp_path / "dequantized"
    ref_dir.mkdir()
    (ref_dir / "config.json").write_text((path / "config.json").read_text())
    write_safetensors(ref_dir / "model.safetensors", {
        n: RawTensor(n, "f32", t.shape, dequantized(t) if isinstance(t, QuantTensor) else np.asarray(t.data))
        for n, t in loaded.tensors.items()})
    model_class = {"qwen3_moe": "Qwen3MoeForCausalLM", "qwen2_moe": "Qwen2MoeForCausalLM"}[family]
    hf = getattr(transformers, model_class).from_pretrained(ref_dir, dtype=torch.float32,
                                                            attn_implementation="eager").eval()
    return path, loaded, hf


def check_quantized_logits(m, hf, prompt) -> None:
    """`prompt` prefilled in two chunks on BLOCK and on SLOT: logits within ATOL of hf's, and
    the greedy tokens equal wherever hf's top two are further apart than 2 ATOL."""
    want = hf_logits(hf, prompt)
    for layout in ("block", "slot"):
        runner = Runner(m, layout, 1)
        got = np.concatenate([runner.step([0], [prompt[:12]])[0], runner.step([0], [prompt[12:]])[0]])
        err = float(np.abs(got - want).max())
        assert err <= ATOL, f"{layout}: logits differ by {err}"
        top2 = np.sort(want, axis=1)[:, -2:]
        clear = top2[:, 1] - top2[:, 0] > 2 * ATOL
        assert (got.argmax(1) == want.argmax(1))[clear].all()


@pytest.mark.parametrize("scheme", ["q8_0", "q4_k"])
@pytest.mark.parametrize("family", ["qwen3_moe", "qwen2_moe"])
def test_quantized_experts_follow_their_dequantized_weights(tmp_path, family, scheme):
    path, loaded, hf = quantized_with_reference(tmp_path, family, scheme)
    prompt = PROMPTS[2]
    with Model(loaded) as m:
        check_quantized_logits(m, hf, prompt)
    want = hf_logits(hf, prompt)
    env = dict(os.environ, LLAISYS_QUANT_F32_ROWS="0", LLAISYS_AMX="0")
    child = subprocess.run([sys.executable, "-c", CHILD, str(path), scheme, json.dumps(prompt), str(tmp_path / "l.npy")],
                           capture_output=True, text=True, timeout=600, env=env)
    assert child.returncode == 0, child.stderr[-4000:]
    err = float(np.abs(np.load(tmp_path / "l.npy") - want).max())
    assert err <= EXACT, f"float path: logits differ by {err}"
