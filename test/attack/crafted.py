"""Helpers of the attack suite: a tiny valid model directory and GGUF to mutate, and a runner
that loads each crafted file in a forked child under a memory limit and a timeout.

A hostile file must give a ValueError naming what is wrong. Whatever else happens (another
exception type, a crash, running out of memory, a hang) comes back as an Outcome that the
test reports, instead of taking the test process or the machine with it.
"""

import json
import os
import resource
import signal
import struct
import time
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from llaisys.models import bf16
from llaisys.models.arch import parse_config
from llaisys.models.gguf_tokenizer import build_backend, bytes_to_unicode
from llaisys.models.loader import expected_shapes
from llaisys.models.safetensors_io import RawTensor, write_safetensors

TIMEOUT_S = 15.0  # per case; a case that hangs fails after this
EXTRA_MEMORY = 2 << 30  # address space a case may add to what the test process already maps

TEMPLATE = ("{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content"
            " + '<|im_end|>' + '\\n' }}{%- endfor %}{%- if add_generation_prompt %}"
            "{{- '<|im_start|>assistant\\n' }}{%- endif %}")
CONFIG = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 16, "intermediate_size": 32,
          "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 272,
          "max_position_embeddings": 256, "rms_norm_eps": 1e-6, "rope_theta": 1e6, "tie_word_embeddings": False,
          "torch_dtype": "bfloat16", "hidden_act": "silu"}


@dataclass
class Outcome:
    """What loading a crafted file did, as seen from the test process."""

    kind: str  # "ok", "raised", "timeout" or "crashed"
    type: str = ""  # the exception's qualified type name
    is_value_error: bool = False
    message: str = ""
    field: Optional[str] = None  # the exception's .field, if it has one
    has_field: bool = False
    detail: str = ""  # seconds, signal

    def __str__(self):
        return f"{self.kind} {self.type} {self.detail} {self.message[:300]!r}"


def _vm_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def run_isolated(fn: Callable[[], object], timeout: float = TIMEOUT_S) -> Outcome:
    """Run fn() in a forked child with RLIMIT_AS = current + EXTRA_MEMORY; never hangs or dies with it."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: report one JSON line, then leave without running pytest's teardown
        try:
            os.close(r)
            limit = _vm_bytes() + EXTRA_MEMORY
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
            try:
                fn()
                report = {"kind": "ok"}
            except BaseException as e:  # noqa: BLE001 - every outcome is reported
                report = {"kind": "raised", "type": f"{type(e).__module__}.{type(e).__qualname__}",
                          "is_value_error": isinstance(e, ValueError), "message": str(e)[:4000],
                          "field": getattr(e, "field", None) if isinstance(getattr(e, "field", None), str) else None,
                          "has_field": hasattr(e, "field")}
            os.write(w, json.dumps(report).encode()[:60000])
        finally:
            os._exit(0)
    os.close(w)
    start, status = time.monotonic(), None
    while time.monotonic() - start < timeout:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.005)
    else:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(r)
        return Outcome("timeout", detail=f"still running after {timeout:g} s")
    with os.fdopen(r, "rb") as f:
        data = f.read()
    if os.WIFSIGNALED(status) or not data:
        return Outcome("crashed", detail=f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else "no report")
    return Outcome(**json.loads(data))


def expect_refused(outcome: Outcome, field: Optional[str], file: Optional[str] = None) -> None:
    """The load failed with a ValueError whose message names `file` and `field`."""
    assert outcome.kind == "raised", f"not refused cleanly: {outcome}"
    assert outcome.is_value_error, f"refused with {outcome.type}, not a ValueError: {outcome.message[:300]!r}"
    if file is not None:
        assert file in outcome.message, f"the message does not name {file!r}: {outcome.message[:300]!r}"
    if field is not None:
        assert field in outcome.message, f"the message does not name {field!r}: {outcome.message[:300]!r}"
        if outcome.has_field:
            assert outcome.field == field, f"error .field is {outcome.field!r}, expected {field!r}"


# ---------------------------------------------------------------- the tiny model directory


def tiny_vocab():
    """(tokens, token_types, merges): 256 byte tokens, a few merges, control tokens, padding to 272."""
    tokens = sorted(bytes_to_unicode().values(), key=ord)
    merges = ["h e", "Ġ t", "Ġt he", "l l", "he ll", "Ġ Ġ", "ä ½"]
    tokens += ["he", "Ġt", "Ġthe", "ll", "hell", "ĠĠ", "ä½"]
    types = [1] * len(tokens)
    for tok in ("<|endoftext|>", "<|im_start|>", "<|im_end|>"):
        tokens.append(tok)
        types.append(3)
    while len(tokens) < CONFIG["vocab_size"]:
        tokens.append(f"[PAD{len(tokens)}]")
        types.append(5)
    return tokens, types, merges


def write_tiny_dir(path, config: Optional[dict] = None, seed: int = 0):
    """A complete, valid tiny Qwen2 directory (bf16 safetensors, tokenizer files, chat template)."""
    path.mkdir(parents=True, exist_ok=True)
    config = dict(CONFIG if config is None else config)
    tokens, types, merges = tiny_vocab()
    build_backend(tokens, merges, types).save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(json.dumps(
        {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "bos_token": None, "chat_template": TEMPLATE}))
    im_end, eot = tokens.index("<|im_end|>"), tokens.index("<|endoftext|>")
    (path / "generation_config.json").write_text(json.dumps({"eos_token_id": [im_end, eot], "pad_token_id": eot}))
    (path / "config.json").write_text(json.dumps(config))
    rng = np.random.default_rng(seed)
    shapes = expected_shapes(parse_config(config))
    write_safetensors(path / "model.safetensors", [
        RawTensor(name, "bf16", shape, bf16.f32_to_bf16(rng.standard_normal(shape).astype(np.float32) * 0.1))
        for name, shape in shapes.items()])
    return path


def safetensors_bytes(header, data: bytes = b"", length: Optional[int] = None) -> bytes:
    """A safetensors file from a header (dict, or raw JSON text) and data; `length` overrides the prefix."""
    blob = header.encode() if isinstance(header, str) else json.dumps(header).encode()
    return (len(blob) if length is None else length).to_bytes(8, "little") + blob + data


# ---------------------------------------------------------------- GGUF, byte by byte

U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
_FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f", BOOL: "<?", U64: "<Q",
        I64: "<q", F64: "<d"}


def gguf_str(s) -> bytes:
    b = s if isinstance(s, bytes) else s.encode()
    return struct.pack("<Q", len(b)) + b


def gguf_value(vtype: int, value) -> bytes:
    if vtype == STR:
        return gguf_str(value)
    if vtype == ARR:
        itype, items = value
        return struct.pack("<IQ", itype, len(items)) + b"".join(gguf_value(itype, v) for v in items)
    return struct.pack(_FMT[vtype], value)


def tiny_gguf_spec():
    """(kvs, tensors) of a valid tiny Qwen2 GGUF: kvs [(key, type, value)], tensors [dict] (F32)."""
    tokens, types, merges = tiny_vocab()
    c = CONFIG
    kvs = [("general.architecture", STR, "qwen2"), ("qwen2.block_count", U32, c["num_hidden_layers"]),
           ("qwen2.context_length", U32, c["max_position_embeddings"]),
           ("qwen2.embedding_length", U32, c["hidden_size"]), ("qwen2.feed_forward_length", U32, c["intermediate_size"]),
           ("qwen2.attention.head_count", U32, c["num_attention_heads"]),
           ("qwen2.attention.head_count_kv", U32, c["num_key_value_heads"]), ("qwen2.rope.freq_base", F32, 1e6),
           ("qwen2.attention.layer_norm_rms_epsilon", F32, 1e-6), ("tokenizer.ggml.model", STR, "gpt2"),
           ("tokenizer.ggml.pre", STR, "qwen2"), ("tokenizer.ggml.tokens", ARR, (STR, tokens)),
           ("tokenizer.ggml.token_type", ARR, (I32, types)), ("tokenizer.ggml.merges", ARR, (STR, merges)),
           ("tokenizer.ggml.bos_token_id", U32, tokens.index("<|endoftext|>")),
           ("tokenizer.ggml.eos_token_id", U32, tokens.index("<|im_end|>")),
           ("tokenizer.ggml.add_bos_token", BOOL, False), ("tokenizer.chat_template", STR, TEMPLATE)]
    rng = np.random.default_rng(0)
    hf_to_gguf = {"model.embed_tokens": "token_embd", "model.norm": "output_norm", "lm_head": "output",
                  "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
                  "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
                  "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}
    tensors = []
    for name, shape in expected_shapes(parse_config(CONFIG)).items():
        stem, kind = name.rsplit(".", 1)
        if stem.startswith("model.layers."):
            _, _, n, rest = stem.split(".", 3)
            gname = f"blk.{n}.{hf_to_gguf[rest]}.{kind}"
        else:
            gname = f"{hf_to_gguf[stem]}.{kind}"
        data = (rng.standard_normal(shape).astype(np.float32) * 0.1).tobytes()
        tensors.append({"name": gname, "dims": list(reversed(shape)), "type": 0, "data": data})
    return kvs, tensors


def gguf_bytes(kvs, tensors, version: int = 3, magic: bytes = b"GGUF", alignment: int = 32,
               n_tensors: Optional[int] = None, n_kv: Optional[int] = None) -> bytes:
    """Encode a GGUF. A kv may be (key, type, value) or (key, "raw", bytes after the key); a tensor dict may
    carry "offset" (else packed in order), "n_dims" (else len(dims)) and "raw_name" overrides."""
    out = [magic, struct.pack("<I", version),
           struct.pack("<QQ", len(tensors) if n_tensors is None else n_tensors, len(kvs) if n_kv is None else n_kv)]
    for key, vtype, value in kvs:
        out.append(gguf_str(key) + (value if vtype == "raw" else struct.pack("<I", vtype) + gguf_value(vtype, value)))
    offset, data = 0, []
    for t in tensors:
        offset = -(-offset // alignment) * alignment
        off = t.get("offset", offset)
        out.append(gguf_str(t["name"]) + struct.pack("<I", t.get("n_dims", len(t["dims"])))
                   + struct.pack(f"<{len(t['dims'])}Q", *t["dims"]) + struct.pack("<IQ", t["type"], off))
        data.append((offset, t["data"]))
        offset += len(t["data"])
    head = b"".join(out)
    head += b"\0" * (-len(head) % alignment)
    body = bytearray()
    for off, blob in data:
        body += b"\0" * (off - len(body)) + blob
    return head + bytes(body)
