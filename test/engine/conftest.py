"""Engine tests: every KV manager a test creates must end with no block in use and
consistent bookkeeping (no leaks). `tiny`: a tiny random checkpoint with the real tokenizer, for
tests of configuration that need a real LLM but not its answers."""

import pytest

from llaisys.engine import KVCacheManager


@pytest.fixture(autouse=True)
def no_kv_leak(monkeypatch):
    made = []
    original = KVCacheManager.__init__

    def recording_init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(KVCacheManager, "__init__", recording_init)
    yield made
    for kv in made:
        if getattr(kv, "skip_leak_check", False):
            continue
        kv.check_invariants()
        assert kv.num_used_blocks == 0, f"{kv.num_used_blocks} blocks still in use"
        assert not kv.tables, f"block tables left: {list(kv.tables)}"
        assert all(b.ref_cnt == 0 for b in kv.blocks)


@pytest.fixture(scope="session")
def tiny(qwen05_dir, tmp_path_factory):
    from tiny_checkpoint import make_tiny_checkpoint

    return str(make_tiny_checkpoint(tmp_path_factory.mktemp("tiny"), qwen05_dir))
