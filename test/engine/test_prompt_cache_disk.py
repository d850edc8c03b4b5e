"""The prompt cache on disk with the real 0.5B: a closed LLM's prefix blocks serve the next one
(>= 90 % of the prompt cached, the same greedy tokens); damaged or foreign files are misses with
a log line and the right answer (a q8_0 LLM uses only files of its own KV dtype); blocks evicted
under memory pressure come back from disk."""

from __future__ import annotations

import logging
import shutil
import struct

import pytest

from llaisys.engine import LLM, SamplingParams
from llaisys.engine.kv_cache_manager import hash_block_tokens
from llaisys.engine.prompt_cache_file import HEAD_BYTES

pytestmark = pytest.mark.slow

BS = 16
SP = SamplingParams(temperature=0.0, max_tokens=10)
LOGGER = "llaisys.engine.prompt_cache"


def prompt(k: int) -> str:
    """~250 tokens of code; each prompt differs from its first token on."""
    body = "\n".join(f"def scale_{k}_{i}(x):\n    return x * {i + k} + {3 * i - k}\n" for i in range(14))
    return f"# module {k}: helpers\n{body}\n# the next helper, scale_{k}_14, is"


PROMPTS = [prompt(k) for k in range(5)]


def make_llm(model_dir, cache_dir, **kw) -> LLM:
    return LLM(str(model_dir), prompt_cache_dir=str(cache_dir), threads=2, kv_cache_memory=kw.pop("kv", "64MiB"),
               **kw)


def block_file(cache_dir, prompt_ids, j: int):
    """The file of block j of the prompt (the prefix cache's hash chain names it)."""
    parent = None
    for i in range(j + 1):
        parent = hash_block_tokens(parent, prompt_ids[i * BS:(i + 1) * BS])
    [path] = cache_dir.glob(f"*-{parent.hex()}.kvb")
    return path


@pytest.fixture(scope="module")
def first_run(qwen05_dir, tmp_path_factory):
    """An LLM with a prompt cache directory answers PROMPTS greedily and is closed."""
    d = tmp_path_factory.mktemp("prompt_cache")
    with make_llm(qwen05_dir, d) as llm:
        outs = llm.generate(PROMPTS, SP)
        assert all(o.usage.cached_tokens == 0 for o in outs)
    assert list(d.glob("*.kvb")) and not list(d.glob("*.tmp"))
    return d, [list(o.prompt_token_ids) for o in outs], [list(o.outputs[0].token_ids) for o in outs]


def test_a_restart_serves_the_prompts_from_disk(qwen05_dir, first_run):
    d, prompt_ids, tokens = first_run
    assert all(len(ids) >= 200 for ids in prompt_ids)
    with make_llm(qwen05_dir, d) as llm:
        outs = llm.generate(PROMPTS, SP)
        stats = llm.engine.scheduler.kv.tier.stats
        assert stats.refused == 0 and stats.hits >= sum(len(ids) // BS - 1 for ids in prompt_ids)
    for o, ids, want in zip(outs, prompt_ids, tokens):
        assert o.usage.cached_tokens >= 0.9 * len(ids), (o.usage.cached_tokens, len(ids))
        assert list(o.outputs[0].token_ids) == want


# (offset, bytes) rewrites of a file's header that make it another configuration's file
FOREIGN = {
    "model identity": (44, b"\x5a" * 32),  # another model
    "KV dtype": (76, struct.pack("<I", 1)),  # f32 K/V
    "block size": (84, struct.pack("<I", 32)),
}


def test_damaged_and_foreign_files_are_misses_with_a_log_line(qwen05_dir, first_run, tmp_path, caplog):
    src, prompt_ids, tokens = first_run
    d = tmp_path / "cache"
    shutil.copytree(src, d)
    damaged_at = 3  # each prompt's block 3 is spoilt; blocks 0-2 still serve it
    paths = [block_file(d, ids, damaged_at) for ids in prompt_ids]
    data = paths[0].read_bytes()
    paths[0].write_bytes(data[:-7] + bytes([data[-7] ^ 0x40]) + data[-6:])  # one payload bit: checksum
    data = paths[1].read_bytes()
    paths[1].write_bytes(data[:HEAD_BYTES + 100])  # truncated
    for path, (offset, raw) in zip(paths[2:], FOREIGN.values()):
        data = path.read_bytes()
        path.write_bytes(data[:offset] + raw + data[offset + len(raw):])
    with caplog.at_level(logging.WARNING, logger=LOGGER), make_llm(qwen05_dir, d) as llm:
        outs = llm.generate(PROMPTS, SP)
        assert llm.engine.scheduler.kv.tier.stats.refused == 5
    for o, want in zip(outs, tokens):
        assert o.usage.cached_tokens == damaged_at * BS
        assert list(o.outputs[0].token_ids) == want
    refusals = [r.getMessage() for r in caplog.records if r.name == LOGGER and "refused" in r.getMessage()]
    assert len(refusals) == 5, refusals
    for why in ("checksum", "truncated", *FOREIGN):
        assert any(why in m for m in refusals), (why, refusals)


def test_a_q8_0_cache_uses_only_its_own_files(qwen05_dir, first_run, tmp_path):
    """The f16 run's files are not a q8_0 LLM's (another KV dtype, another payload size): it
    reads none of them, writes its own beside them, and a restart serves the prompt from those
    with the same greedy tokens."""
    src, prompt_ids, _ = first_run
    d = tmp_path / "cache"
    shutil.copytree(src, d)
    f16_files = set(d.glob("*.kvb"))
    with make_llm(qwen05_dir, d, kv_dtype="q8_0") as llm:
        first = llm.generate(PROMPTS[0], SP)[0]
        assert llm.engine.scheduler.kv.tier.stats.hits == 0
    assert first.usage.cached_tokens == 0
    assert set(d.glob("*.kvb")) > f16_files  # its own files, the f16 ones kept
    with make_llm(qwen05_dir, d, kv_dtype="q8_0") as llm:
        again = llm.generate(PROMPTS[0], SP)[0]
    assert again.usage.cached_tokens >= 0.9 * len(prompt_ids[0])
    assert list(again.outputs[0].token_ids) == list(first.outputs[0].token_ids)


def test_blocks_evicted_under_memory_pressure_come_back_from_disk(qwen05_dir, tmp_path):
    """A pool of 32 blocks: two other prompts evict the first one's blocks, which the disk tier
    then serves to the same prompt again in the same process."""
    with make_llm(qwen05_dir, tmp_path, kv="6MiB", max_model_len=512) as llm:
        assert llm.config.num_blocks == 32
        first = llm.generate(PROMPTS[0], SP)[0]
        llm.generate(PROMPTS[1], SP)
        llm.generate(PROMPTS[2], SP)
        tier = llm.engine.scheduler.kv.tier
        assert tier.stats.files_written + len(tier.store._pending) > 0  # evicted blocks went to disk
        again = llm.generate(PROMPTS[0], SP)[0]
        assert tier.stats.hits > 0
    assert again.usage.cached_tokens >= 0.9 * len(first.prompt_token_ids)
    assert list(again.outputs[0].token_ids) == list(first.outputs[0].token_ids)


def test_prompt_cache_needs_the_block_layout(qwen05_dir, tmp_path):
    with pytest.raises(ValueError, match="kv_layout='block'"):
        LLM(str(qwen05_dir), kv_layout="slot", prompt_cache_dir=str(tmp_path))
    with pytest.raises(ValueError, match="prompt_cache_max_bytes"):
        LLM(str(qwen05_dir), prompt_cache_dir=str(tmp_path), prompt_cache_max_bytes="-3")
