"""The prompt cache's disk tier: full KV blocks kept in files across restarts.

``DiskBlockStore`` keeps one file per block (prompt_cache_file.py has the format) in a
directory, under a byte cap with least-recently-used eviction. Files are written by one
background thread from a bounded queue (tmp file + rename, so a reader never sees half a file);
a block waiting in the queue is served from memory. Reads happen on the caller's thread.

``PromptCacheTier`` joins it to the engine: the KV manager calls ``save`` when a cached block is
evicted from memory (its K/V is copied out of the core cache then, before the block is reused)
and ``restore`` when a prefix lookup misses in memory; ``close`` writes every block still cached
in memory (shutdown). A refused, truncated or corrupt file is a miss and a log line.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from ..kv_cache import KVLayout, as_layout
from .prompt_cache_file import SUFFIX, BlockSpec, FileRefused, decode, encode
from .worker import parse_bytes

log = logging.getLogger(__name__)

DEFAULT_MAX_BYTES = 4 << 30  # 4 GiB: ~85 prompts of 4k tokens on the 0.5B (f16 KV: 192 KiB per 16-token block)
DEFAULT_QUEUE_BYTES = 128 << 20  # blocks waiting to be written; beyond, an evicted block is not kept
DEFAULT_LOAD_BUDGET_S = 1.0  # most seconds one prefix lookup spends reading files on the engine loop
STALE_TMP_S = 3600.0  # a tmp file this old at start-up was left by a writer that died


@dataclass
class DiskCacheStats:
    """Counters of the disk tier since start-up (/metrics)."""

    hits: int = 0  # blocks read back from disk into the KV cache
    misses: int = 0  # lookups that went to disk and stopped at a block it did not have or could not use
    refused: int = 0  # files refused by the header check, the checksum or their size (each also a miss)
    bytes_read: int = 0  # bytes of files read (hits)
    bytes_written: int = 0  # bytes of files written
    files_written: int = 0
    files_evicted: int = 0  # removed by the size cap
    writes_dropped: int = 0  # evicted blocks not kept because the write queue was full
    write_errors: int = 0  # files that could not be written (disk full, permissions)
    files: int = 0  # files in the directory now (all models')
    disk_bytes: int = 0  # their bytes


class DiskBlockStore:
    """Block files of one BlockSpec in `directory`, all files there held under `max_bytes`."""

    def __init__(self, directory, spec: BlockSpec, max_bytes: int = DEFAULT_MAX_BYTES,
                 queue_bytes: int = DEFAULT_QUEUE_BYTES):
        if max_bytes < spec.file_bytes:
            raise ValueError(f"prompt_cache_max_bytes {max_bytes} holds no block file ({spec.file_bytes} bytes)")
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.spec, self.max_bytes, self.queue_bytes = spec, max_bytes, queue_bytes
        self.stats = DiskCacheStats()
        self._lock = threading.Condition()
        self._index: OrderedDict = OrderedDict()  # file name -> bytes, least recently used first
        self._pending: dict = {}  # block hash -> (parent hash, token ids, payload) queued for the writer
        self._queue: deque = deque()  # block hashes to write, in order
        self._queued_bytes = 0
        self._closed = False
        self._scan()
        self._writer = threading.Thread(target=self._write_loop, name="llaisys-prompt-cache", daemon=True)
        self._writer.start()

    def _scan(self) -> None:
        found = []
        for p in self.dir.iterdir():
            try:
                st = p.stat()
                if p.name.endswith(".tmp") and time.time() - st.st_mtime > STALE_TMP_S:
                    p.unlink()
                elif p.name.endswith(SUFFIX) and p.is_file():
                    found.append((st.st_mtime_ns, p.name, st.st_size))
            except OSError:
                continue  # gone meanwhile (another process) or unreadable: not ours to count
        for _, name, size in sorted(found):
            self._index[name] = size
        self.stats.disk_bytes = sum(self._index.values())
        self.stats.files = len(self._index)
        self._evict_over_cap()

    # ---- reads (the engine loop) ----------------------------------------------------------
    def contains(self, block_hash: bytes) -> bool:
        with self._lock:
            return block_hash in self._pending or self.spec.file_name(block_hash) in self._index

    def get(self, block_hash: bytes, parent_hash: Optional[bytes], token_ids: Sequence[int]):
        """The block's payload (bytes-like), or None (absent, refused or unreadable)."""
        name = self.spec.file_name(block_hash)
        with self._lock:
            queued = self._pending.get(block_hash)
            if queued is None and name not in self._index:
                return None
        if queued is not None:
            if queued[0] == parent_hash and tuple(queued[1]) == tuple(token_ids):
                return queued[2]
            return None
        path = self.dir / name
        try:
            with open(path, "rb") as f:
                data = f.read(self.spec.file_bytes + 1)  # one byte more shows a padded file
            payload = decode(self.spec, data, block_hash, parent_hash, token_ids)
        except FileNotFoundError:  # evicted by another store on the same directory
            self._forget(name, remove=False)
            return None
        except (OSError, FileRefused) as e:
            log.warning("prompt cache: %s refused, treated as a miss: %s", path, e)
            self.stats.refused += 1
            self._forget(name, remove=True)
            return None
        with self._lock:
            if name in self._index:
                self._index.move_to_end(name)
        try:
            os.utime(path)  # the next process orders its LRU by mtime
        except OSError:
            pass
        self.stats.bytes_read += len(data)
        return payload

    def _forget(self, name: str, remove: bool) -> None:
        with self._lock:
            size = self._index.pop(name, None)
            if size is not None:
                self.stats.disk_bytes -= size
                self.stats.files -= 1
        if remove:
            try:
                (self.dir / name).unlink()
            except OSError:
                pass

    # ---- writes ---------------------------------------------------------------------------
    def has_room(self) -> bool:
        """Whether the write queue takes another block now."""
        with self._lock:
            return not self._queue or self._queued_bytes + self.spec.payload_bytes <= self.queue_bytes

    def put(self, block_hash: bytes, parent_hash: Optional[bytes], token_ids: Sequence[int], payload,
            wait: bool = False) -> bool:
        """Queue the block for writing; False when the queue is full (dropped) unless `wait`."""
        with self._lock:
            if block_hash in self._pending or self.spec.file_name(block_hash) in self._index:
                return True
            while self._queued_bytes + len(payload) > self.queue_bytes and self._queue:
                if not wait or self._closed:
                    self.stats.writes_dropped += 1
                    return False
                self._lock.wait(0.5)
            self._pending[block_hash] = (parent_hash, tuple(token_ids), payload)
            self._queue.append(block_hash)
            self._queued_bytes += len(payload)
            self._lock.notify_all()
        return True

    def _write_loop(self) -> None:
        while True:
            with self._lock:
                while not self._queue and not self._closed:
                    self._lock.wait()
                if not self._queue:
                    return
                h = self._queue[0]
                parent, tokens, payload = self._pending[h]
            ok = self._write(h, parent, tokens, payload)
            with self._lock:
                self._queue.popleft()
                del self._pending[h]
                self._queued_bytes -= len(payload)
                if ok:
                    name = self.spec.file_name(h)
                    self._index[name] = self.spec.file_bytes
                    self._index.move_to_end(name)
                    self.stats.disk_bytes += self.spec.file_bytes
                    self.stats.files += 1
                self._lock.notify_all()
            if ok:
                self._evict_over_cap()

    def _write(self, block_hash: bytes, parent: Optional[bytes], tokens, payload) -> bool:
        path = self.dir / self.spec.file_name(block_hash)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            data = encode(self.spec, block_hash, parent, tokens, payload)
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, path)  # atomic: a reader sees the old file, no file, or the whole new one
        except OSError as e:
            self.stats.write_errors += 1
            if self.stats.write_errors <= 3 or self.stats.write_errors % 1000 == 0:
                log.warning("prompt cache: cannot write %s (%d failed so far): %s", path, self.stats.write_errors, e)
            try:
                tmp.unlink()
            except OSError:
                pass
            return False
        self.stats.bytes_written += len(data)
        self.stats.files_written += 1
        return True

    def _evict_over_cap(self) -> None:
        while True:
            with self._lock:
                if self.stats.disk_bytes <= self.max_bytes or len(self._index) <= 1:
                    return
                name, size = self._index.popitem(last=False)
                self.stats.disk_bytes -= size
                self.stats.files -= 1
                self.stats.files_evicted += 1
            try:
                (self.dir / name).unlink()
            except OSError:
                pass

    def close(self) -> None:
        """Write what is queued, then stop the writer."""
        with self._lock:
            self._closed = True
            self._lock.notify_all()
        self._writer.join()


class PromptCacheTier:
    """The KV manager's view of the disk tier: blocks move between the core cache and the store."""

    def __init__(self, store: DiskBlockStore, cache, load_budget_s: float = DEFAULT_LOAD_BUDGET_S):
        self.store = store
        self.cache = cache  # llaisys.kv_cache.KVCache (read_block / write_block)
        self.load_budget_s = load_budget_s
        self._deadline = 0.0

    @property
    def stats(self) -> DiskCacheStats:
        return self.store.stats

    def contains(self, block_hash: bytes) -> bool:
        return self.store.contains(block_hash)

    def start_lookup(self) -> None:
        """A prefix lookup begins: its reads get load_budget_s seconds in all."""
        self._deadline = time.monotonic() + self.load_budget_s

    def restore(self, block_id: int, block_hash: bytes, parent_hash: Optional[bytes], token_ids) -> bool:
        """Read the block from disk into core block `block_id`; False (a miss) if it cannot be."""
        if time.monotonic() > self._deadline:
            return False
        try:
            payload = self.store.get(block_hash, parent_hash, token_ids)
            if payload is not None:
                self.cache.write_block(block_id, payload)
        except Exception:  # never fail the step: the block is computed instead
            log.exception("prompt cache: restoring a block failed; computing it instead")
            payload = None
        if payload is None:
            self.stats.misses += 1
            return False
        self.stats.hits += 1
        return True

    def miss(self) -> None:
        self.stats.misses += 1

    def save(self, block_id: int, block_hash: bytes, parent_hash: Optional[bytes], token_ids,
             wait: bool = False) -> None:
        """Keep core block `block_id` (about to be reused) on disk unless it is there already."""
        if self.store.contains(block_hash):
            return
        if not wait and not self.store.has_room():  # counted, and no copy made for nothing
            self.stats.writes_dropped += 1
            return
        try:
            payload = self.cache.read_block(block_id)
        except Exception:  # never fail the step over the disk tier: the block is just not kept
            log.exception("prompt cache: copying block %d out failed; not keeping it", block_id)
            return
        self.store.put(block_hash, parent_hash, token_ids, payload, wait=wait)

    def close(self, kv) -> None:
        """Write every block the KV manager `kv` still caches (least recently used first, so the
        most recent survive the cap), then stop the writer."""
        try:
            for blk in kv.cached_blocks():
                self.save(blk.block_id, blk.block_hash, blk.parent_hash, blk.token_ids, wait=True)
        finally:
            self.store.close()


def model_identity(worker) -> bytes:
    """32 bytes that change whenever the K/V a prompt produces could: the parsed config, the
    weights' file names, sizes and mtimes, the weight dtype and load options, and the device."""
    h = hashlib.sha256()
    model = worker.model
    h.update(repr(model.config).encode())
    h.update(f"|{int(model.dtype)}|{int(model.device)}|{worker.config.quantize}|".encode())
    path = Path(worker.path)
    files = [path] if path.is_file() else sorted(p for p in path.iterdir()
                                                  if p.suffix in (".safetensors", ".gguf", ".bin", ".json"))
    for p in files:
        st = p.stat()
        h.update(f"{p.name}|{st.st_size}|{st.st_mtime_ns}|".encode())
    return h.digest()


def check_options(directory, max_bytes, kv_layout: str, enable_prefix_caching) -> int:
    """The byte cap, or ValueError: the options of LLM(prompt_cache_dir=...), checked before a load."""
    if not isinstance(directory, (str, os.PathLike)) or not str(directory):
        raise ValueError(f"prompt_cache_dir must be a directory path, got {directory!r}")
    if as_layout(kv_layout) != KVLayout.BLOCK or enable_prefix_caching is False:
        raise ValueError("prompt_cache_dir keeps prefix-cache blocks: it needs kv_layout='block' and prefix caching on")
    try:
        return parse_bytes(max_bytes)
    except ValueError as e:
        raise ValueError(f"prompt_cache_max_bytes: {e}") from None


def open_tier(directory, max_bytes: int, worker, cache, block_size: int) -> PromptCacheTier:
    """The disk tier of `worker`'s model over its core KV cache `cache` (OSError if the directory
    cannot be made)."""
    from .. import __version__

    c = worker.model.config
    spec = BlockSpec(lib_version=__version__, model_id=model_identity(worker), kv_dtype=int(worker.kv_dtype),
                     block_size=block_size, n_layers=c.num_hidden_layers, n_kv_heads=c.num_key_value_heads,
                     head_dim=c.head_dim, payload_bytes=cache.block_bytes())
    store = DiskBlockStore(directory, spec, max_bytes)
    log.info("prompt cache: %s holds %d files (%.1f MiB, cap %.1f MiB); this model's block files are %s-*%s",
             directory, store.stats.files, store.stats.disk_bytes / 2**20, max_bytes / 2**20, spec.prefix, SUFFIX)
    return PromptCacheTier(store, cache)
