"""Crafted GGUF files, converted as users convert them: convert_gguf(file, out_dir)
(what `llaisys convert-gguf` and `llaisys download` run).

Each case encodes the tiny valid GGUF byte by byte with one thing broken and expects a
ValueError naming the file and the header field, metadata key or tensor at fault.
"""

import struct

import pytest

from llaisys.models.gguf_convert import convert_gguf

from .crafted import (ARR, BOOL, F32, I32, STR, U32, U64, expect_refused, gguf_bytes, gguf_str, run_isolated,
                      tiny_gguf_spec)

FIRST, LAST = "token_embd.weight", "output.weight"  # first and last tensors in the file


def kv(key, vtype, value):
    """Set (or append) metadata `key`; vtype "raw" takes the bytes after the key; vtype None drops it."""
    def change(kvs, tensors, opts):
        rest = [item for item in kvs if item[0] != key]
        if vtype is None:
            return rest, tensors
        at = next((i for i, item in enumerate(kvs) if item[0] == key), len(rest))
        return rest[:at] + [(key, vtype, value)] + rest[at:], tensors
    return change


def add_kv(key, vtype, value):
    return lambda kvs, tensors, opts: (kvs + [(key, vtype, value)], tensors)


def tensor(which, **changes):
    def change(kvs, tensors, opts):
        return kvs, [{**t, **changes} if t["name"] == which else t for t in tensors]
    return change


def add_tensor(**t):
    return lambda kvs, tensors, opts: (kvs, tensors + [t])


def drop_tensor(name):
    return lambda kvs, tensors, opts: (kvs, [t for t in tensors if t["name"] != name])


def header(**options):
    def change(kvs, tensors, opts):
        opts.update(options)
        return kvs, tensors
    return change


def cut(at):
    """Truncate the file: at an int, or (marker bytes, offset after it)."""
    def change(kvs, tensors, opts):
        opts["cut"] = at
        return kvs, tensors
    return change


def u32_array(itype, count):
    return struct.pack("<IIQ", ARR, itype, count)


N_KV = len(tiny_gguf_spec()[0])
CASES = [  # (id, change, field named in the error)
    # the header
    ("bad_magic", header(magic=b"GGML"), "magic"),
    ("version_1", header(version=1), "version"),
    ("version_99", header(version=99), "version"),
    ("big_endian", header(version=0x03000000), "version"),
    ("only_20_bytes", cut(20), "header"),
    ("tensor_count_2e63", header(n_tensors=2**63), "tensor_count"),
    ("tensor_count_1e6", header(n_tensors=10**6), "tensor_count"),
    ("kv_count_2e40", header(n_kv=2**40), "kv_count"),
    ("kv_count_past_metadata", header(n_kv=N_KV + 3), None),
    # metadata: counts, lengths, type ids, encodings
    ("array_2e60_items", kv("tokenizer.ggml.token_type", "raw", u32_array(I32, 2**60)), "tokenizer.ggml.token_type"),
    ("string_array_2e60_items", kv("tokenizer.ggml.merges", "raw", u32_array(STR, 2**60)), "tokenizer.ggml.merges"),
    ("string_2e60_bytes", kv("general.architecture", "raw", struct.pack("<IQ", STR, 2**60)), "general.architecture"),
    ("unknown_value_type", add_kv("general.name", "raw", struct.pack("<IQ", 99, 0)), "general.name"),
    ("nested_array", add_kv("general.tags", "raw", struct.pack("<IIQ", ARR, ARR, 1) + struct.pack("<IQ", U32, 0)),
     "general.tags"),
    ("array_unknown_item_type", add_kv("general.tags", "raw", u32_array(77, 1)), "general.tags"),
    ("value_bad_utf8", add_kv("general.name", STR, b"\xff\xfe"), "general.name"),
    ("key_bad_utf8", add_kv(b"\xff\xfe", STR, "x"), f"metadata entry {N_KV} key"),
    ("key_1000_bytes", add_kv("k" * 1000, STR, "x"), f"metadata entry {N_KV} key"),
    ("duplicate_key", add_kv("general.architecture", STR, "qwen2"), "general.architecture"),
    ("truncated_in_tokens", cut((b"tokenizer.ggml.tokens", 2000)), "tokenizer.ggml.tokens"),
    ("alignment_3", add_kv("general.alignment", U32, 3), "general.alignment"),
    ("alignment_string", add_kv("general.alignment", STR, "32"), "general.alignment"),
    # tensor infos and data
    ("n_dims_9", tensor(FIRST, n_dims=9), FIRST),
    ("n_dims_0", tensor(FIRST, n_dims=0), FIRST),
    ("unknown_tensor_type", tensor(FIRST, type=999), FIRST),
    ("dims_not_block_multiple", tensor(FIRST, type=8), FIRST),  # Q8_0 blocks of 32 over 16 columns
    ("offset_misaligned", tensor(LAST, offset=1), LAST),
    ("offset_2e62", tensor(LAST, offset=2**62), LAST),
    ("overlapping_data", tensor(LAST, offset=0), LAST),
    ("duplicate_tensor_name", add_tensor(name=FIRST, dims=[4], type=0, data=b"\0" * 16), FIRST),
    ("dims_2e40_squared", tensor(FIRST, dims=[2**40, 2**40]), FIRST),
    ("dims_zero", tensor(FIRST, dims=[16, 0]), FIRST),
    ("tensor_name_bad_utf8", tensor(FIRST, name=b"\xff\xfe"), "tensor 0 name"),
    ("data_truncated", cut(-100), LAST),
    # the values: what a Qwen2 config and tokenizer must be
    ("block_count_1e6", kv("qwen2.block_count", U32, 1_000_000), "qwen2.block_count"),
    ("block_count_not_file", kv("qwen2.block_count", U32, 3), "qwen2.block_count"),
    ("block_count_missing", kv("qwen2.block_count", None, None), "qwen2.block_count"),
    ("embedding_length_string", kv("qwen2.embedding_length", STR, "16"), "qwen2.embedding_length"),
    ("context_length_float", kv("qwen2.context_length", F32, 256.0), "qwen2.context_length"),
    ("context_length_2e40", kv("qwen2.context_length", U64, 2**40), "qwen2.context_length"),
    ("head_count_zero", kv("qwen2.attention.head_count", U32, 0), "qwen2.attention.head_count"),
    ("head_count_kv_3", kv("qwen2.attention.head_count_kv", U32, 3), "qwen2.attention.head_count_kv"),
    ("freq_base_string", kv("qwen2.rope.freq_base", STR, "1e6"), "qwen2.rope.freq_base"),
    ("eps_negative", kv("qwen2.attention.layer_norm_rms_epsilon", F32, -1.0),
     "qwen2.attention.layer_norm_rms_epsilon"),
    # a Qwen2 file called llama (a family that loads since dense llama files do): its llama.* keys are missing
    ("architecture_llama", kv("general.architecture", STR, "llama"), "llama.embedding_length"),
    ("architecture_unknown", kv("general.architecture", STR, "gemma"), "general.architecture"),
    ("architecture_missing", kv("general.architecture", None, None), "general.architecture"),
    ("tokens_are_ints", kv("tokenizer.ggml.tokens", ARR, (I32, [1, 2, 3])), "tokenizer.ggml.tokens"),
    ("tokens_more_than_rows", kv("tokenizer.ggml.tokens", ARR, (STR, [f"t{i}" for i in range(300)])),
     "tokenizer.ggml.tokens"),
    ("token_type_short", kv("tokenizer.ggml.token_type", ARR, (I32, [1, 1])), "tokenizer.ggml.token_type"),
    ("merge_not_a_pair", kv("tokenizer.ggml.merges", ARR, (STR, ["abc"])), "tokenizer.ggml.merges"),
    ("merge_unknown_tokens", kv("tokenizer.ggml.merges", ARR, (STR, ["zz qq"])), "tokenizer.ggml.merges"),
    # a byte-level vocabulary called SentencePiece (read since it is): it has no scores
    ("tokenizer_model_llama", kv("tokenizer.ggml.model", STR, "llama"), "tokenizer.ggml.scores"),
    ("tokenizer_model_unknown", kv("tokenizer.ggml.model", STR, "bert"), "tokenizer.ggml.model"),
    ("add_bos_not_bool", kv("tokenizer.ggml.add_bos_token", STR, "no"), "tokenizer.ggml.add_bos_token"),
    ("eos_outside_vocab", kv("tokenizer.ggml.eos_token_id", U32, 10**6), "tokenizer.ggml.eos_token_id"),
    ("chat_template_syntax", kv("tokenizer.chat_template", STR, "{% for %}"), "chat_template"),
    ("chat_template_2mb", kv("tokenizer.chat_template", STR, "x" * (2 << 20)), "chat_template"),
    ("chat_template_not_string", kv("tokenizer.chat_template", BOOL, True), "tokenizer.chat_template"),
    ("tensor_type_i32", tensor("output_norm.weight", type=26), "output_norm.weight"),
    ("tensor_unknown_name", tensor("output_norm.weight", name="blk.0.evil.weight"), "blk.0.evil.weight"),
    ("tensor_huge_block_index", tensor("output_norm.weight", name="blk.99999999999999999999.attn_q.weight"),
     "blk.99999999999999999999.attn_q.weight"),
    ("embedding_1d", tensor(FIRST, dims=[16 * 272], data=b"\0" * (16 * 272 * 4)), FIRST),
    ("embedding_missing", drop_tensor(FIRST), FIRST),
]
REPRODUCERS = {"array_2e60_items"}  # the gguf reader loops 2**60 times on the old code


def build(change) -> bytes:
    kvs, tensors = tiny_gguf_spec()
    opts = {}
    kvs, tensors = change(kvs, tensors, opts)
    where = opts.pop("cut", None)
    data = gguf_bytes(kvs, tensors, **opts)
    if isinstance(where, tuple):
        marker, after = where
        return data[:data.index(gguf_str(marker)) + after]
    return data if where is None else data[:where]


@pytest.mark.parametrize("change,field", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_crafted_gguf_is_refused(tmp_path, change, field):
    path = tmp_path / "model.gguf"
    path.write_bytes(build(change))
    outcome = run_isolated(lambda: convert_gguf(path, tmp_path / "out"))
    expect_refused(outcome, field, "model.gguf")
    assert not (tmp_path / "out").exists()


def test_the_uncrafted_gguf_converts(tmp_path):
    path = tmp_path / "model.gguf"
    path.write_bytes(build(lambda kvs, tensors, opts: (kvs, tensors)))
    out = convert_gguf(path, tmp_path / "out")
    assert (out / "model.safetensors").is_file() and (out / "tokenizer.json").is_file()


# ------------------------------------------------ the same files run directly (gguf_model.load_gguf)

DOWN = "blk.0.ffn_down.weight"  # [16, 32]: the one matrix of the tiny file whose rows fit blocks of 32
Q8_DOWN = b"\0" * (16 * 34)  # 16 rows of one Q8_0 block
DIRECT_CASES = [  # (id, change, field named in the error): what only running a GGUF as it is meets
    ("matrix_q8_1", tensor(DOWN, type=9, data=b"\0" * (16 * 40)), DOWN),  # neither run nor dequantized
    ("matrix_q4_k_rows_of_32", tensor(DOWN, type=12, data=Q8_DOWN), DOWN),  # 32 is not a multiple of 256
    ("q8_0_bytes_short", tensor(DOWN, type=8, data=b"\0" * 100), None),  # the next tensor's data overlaps it
    ("q8_0_wrong_rows", tensor(DOWN, type=8, dims=[32, 8], data=b"\0" * (8 * 34)), DOWN),
    ("q8_0_three_dims", tensor(DOWN, type=8, dims=[32, 4, 4], data=Q8_DOWN), DOWN),
    ("q8_0_dims_2e40", tensor(DOWN, type=8, dims=[32, 2**40], data=Q8_DOWN), DOWN),
]


@pytest.mark.parametrize("change,field", [c[1:] for c in CASES + DIRECT_CASES],
                         ids=[c[0] for c in CASES + DIRECT_CASES])
def test_crafted_gguf_is_refused_when_run_directly(tmp_path, change, field):
    from llaisys.models.gguf_model import load_gguf

    path = tmp_path / "model.gguf"
    path.write_bytes(build(change))
    outcome = run_isolated(lambda: load_gguf(path))
    expect_refused(outcome, field, "model.gguf")


def test_a_matrix_without_kernels_is_widened_to_its_values(tmp_path):
    """A format llaisys has no kernels for (MXFP4: 32 values in 17 bytes) is dequantized at load by
    gguf-py: the values llama.cpp's own dequantizer gives (gguf.quants is its Python port). IQ4_NL
    is rewritten as Q8_0 instead (test/models/test_gguf_transcode.py)."""
    import gguf
    import numpy as np

    from llaisys.models.gguf_model import load_gguf
    from llaisys.models.safetensors_io import RawTensor

    type_id, block_bytes = 39, 17
    rng = np.random.default_rng(type_id)
    blocks = rng.integers(0, 256, 16 * block_bytes, dtype=np.uint8)
    blocks.reshape(16, block_bytes)[:, 0] = 120  # finite E8M0 scales, 2^-8
    path = tmp_path / "model.gguf"
    path.write_bytes(build(tensor(DOWN, type=type_id, data=blocks.tobytes())))
    t = load_gguf(path).loaded.tensors["model.layers.0.mlp.down_proj.weight"]
    want = gguf.quants.dequantize(blocks, gguf.GGMLQuantizationType(type_id)).reshape(16, 32)
    assert isinstance(t, RawTensor) and t.dtype == "f32" and t.shape == (16, 32)
    assert np.array_equal(np.asarray(t.data), want) and np.abs(want).max() > 0


@pytest.mark.parametrize("type_id,block_bytes,tag", [(8, 34, "q8_0"), (3, 20, "q4_1"), (7, 24, "q5_1")],
                         ids=["q8_0", "q4_1", "q5_1"])
def test_a_quantized_matrix_runs_as_its_bytes(tmp_path, type_id, block_bytes, tag):
    from llaisys.models.gguf_model import load_gguf
    from llaisys.models.tensors import QuantTensor

    blocks = bytes(range(block_bytes)) * 16
    path = tmp_path / "model.gguf"
    path.write_bytes(build(tensor(DOWN, type=type_id, data=blocks)))
    t = load_gguf(path).loaded.tensors["model.layers.0.mlp.down_proj.weight"]
    assert isinstance(t, QuantTensor) and t.dtype == tag and t.shape == (16, 32)
    assert t.data.tobytes() == blocks
