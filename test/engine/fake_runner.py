"""Test doubles for the engine: a byte-level fake tokenizer and a fake model runner.

FakeRunner simulates the core faithfully enough to catch bookkeeping bugs: it stores each
computed token in a fake KV cache at the slot the batch names (BLOCK) or in the row's seq
cells (SLOT), and samples the next token as a hash of the history it READS BACK from that
cache. A wrong block table, a wrong slot, a false prefix hit, a stale seq or a recompute
that feeds different tokens all change the output. Pooling rows get, for each token, a
HIDDEN-wide "hidden state" hashed from the history up to it, also read back from the cache.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict

import numpy as np

from llaisys.engine import EngineConfig, LLMEngine, StepResult, empty_result

EOS = 256  # the fake tokenizer's eos id
PAD = 257  # another special token
HIDDEN = 8  # width of the fake hidden states
WORDS = ["hello", " world", "\n\n", "STOP", "é", "€", "<b>", "</b>"]


class FakeTokenizer:
    """Ids 0..255 are raw bytes (so one character may span tokens), 256/257 are special,
    258.. are the multi-character pieces of WORDS."""

    def __init__(self):
        self.pieces = [bytes([i]) for i in range(256)] + [b"<eos>", b"<pad>"] + [w.encode() for w in WORDS]
        self.special = {EOS, PAD}
        self.eos_token_ids = [EOS]
        self.vocab_size = len(self.pieces)

    def id_of(self, word: str) -> int:
        return 258 + WORDS.index(word)

    def encode_bytes(self, text: str) -> list:
        return list(text.encode())

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        data = b"".join(self.pieces[i] for i in ids if not (skip_special_tokens and i in self.special))
        return data.decode("utf-8", errors="replace")


def history_hidden(history) -> np.ndarray:
    """[HIDDEN] float32: the fake model's final hidden state after `history`."""
    h = hashlib.sha256(b"hidden" + np.asarray(history, dtype="<i8").tobytes()).digest()
    return (np.frombuffer(h[:HIDDEN], np.uint8).astype(np.float32) - 127.5) / 64.0


def history_token(history, req, vocab: int, step=None) -> int:
    """The fake model: a hash of the whole history (plus seed and step when sampling; step: the
    output draw, StepInput.sample_steps, by default the request's num_output_tokens)."""
    h = hashlib.sha256(np.asarray(history, dtype="<i8").tobytes())
    if req.sampling_params.temperature > 0:
        h.update(f"{req.seed}:{req.num_output_tokens if step is None else step}".encode())
    return int.from_bytes(h.digest()[:8], "little") % vocab


class FakeRunner:
    def __init__(self, vocab: int = 266, next_fn=None, fail_when=None, fail_after_write_when=None):
        self.vocab = vocab
        self.next_fn = next_fn  # (history, req) -> token id, instead of the hash
        self.fail_when = fail_when  # (batch) -> bool: raise instead of computing
        self.fail_after_write_when = fail_after_write_when  # (batch) -> bool: write the K/V, then raise
        self.calls = 0  # execute() calls
        self.slots = {}  # BLOCK: slot -> (token id, position)
        self.cells = defaultdict(dict)  # SLOT: seq id -> {position: token id}
        self.steps = []  # per step: {req_id: num tokens}, for assertions
        self.sample_steps = []  # per step: set of req_ids sampled

    @property
    def vocab_size(self) -> int:
        return self.vocab

    def execute(self, batch) -> StepResult:
        self.calls += 1
        for s in batch.free_seq_ids.tolist():
            self.cells.pop(s, None)
        if getattr(batch, "rewind", False) and batch.kv_layout == "slot":  # what seq_rm(seq, first position, -1) does
            for s in range(batch.n_seqs):
                first = int(batch.positions[batch.query_start[s]])
                cells = self.cells[int(batch.seq_ids[s])]
                for p in [p for p in cells if p >= first]:
                    del cells[p]
        if self.fail_when is not None and self.fail_when(batch):
            raise RuntimeError("injected failure")
        qs = batch.query_start
        self.steps.append({rid: int(qs[i + 1] - qs[i]) for i, rid in enumerate(batch.req_ids)})
        self.sample_steps.append({r.request_id for r in batch.sample_requests})
        if batch.n_tokens == 0:
            return empty_result()
        self._check_and_write(batch)
        if self.fail_after_write_when is not None and self.fail_after_write_when(batch):
            raise RuntimeError("injected failure after the K/V was written")
        out = np.zeros(batch.n_sample, np.int64)
        # the draws (the StepRunner's, taken on the engine's thread; a hand-made batch: the outputs)
        steps = batch.sample_steps if batch.sample_steps is not None else \
            [r.num_output_tokens for r in batch.sample_requests]
        for i, t in enumerate(batch.sample_rows.tolist()):
            row = int(batch.seq_of_token[t])
            history = self._read(batch, row, int(batch.positions[t]) + 1)
            req, step = batch.sample_requests[i], int(steps[i])
            tok = self.next_fn(history, req) if self.next_fn else history_token(history, req, self.vocab, step)
            banned = {k for k, v in req.logit_bias_at(step).items() if v <= -100}
            while tok in banned:
                tok = (tok + 1) % self.vocab
            out[i] = tok
        hidden = None
        pooling = getattr(batch, "pooling", None)
        if pooling is not None and pooling.any():
            hidden = np.stack([history_hidden(self._read(batch, int(batch.seq_of_token[t]),
                                                         int(batch.positions[t]) + 1))
                               for t in batch.hidden_rows.tolist()])
        k = max([r.sampling_params.logprobs or 0 for r in batch.sample_requests] + [0])
        top_ids = (out[:, None] + 1 + np.arange(k)[None, :]) % self.vocab  # never the sampled id
        top_lps = -np.arange(k, dtype=np.float32)[None, :].repeat(len(out), 0)
        return StepResult(token_ids=out, logprobs=-(out % 7).astype(np.float32) - 0.5,
                          top_ids=top_ids, top_logprobs=top_lps, hidden=hidden)

    def _check_and_write(self, batch) -> None:
        qs, pos, bs = batch.query_start, batch.positions, batch.block_size
        assert qs[0] == 0 and qs[-1] == batch.n_tokens and np.all(np.diff(qs) > 0)
        for s in range(batch.n_seqs):
            rows = pos[qs[s]:qs[s + 1]]
            assert np.all(np.diff(rows) == 1), "positions must be consecutive within a row"
            assert rows[-1] + 1 == batch.context_lens[s]
        if batch.kv_layout == "block":
            tables = batch.block_tables
            want = tables[batch.seq_of_token, pos // bs].astype(np.int64) * bs + pos % bs
            assert np.array_equal(want, batch.slot_mapping)
            assert len(set(batch.slot_mapping.tolist())) == batch.n_tokens, "two tokens write one slot"
            for t, (slot, tok) in enumerate(zip(batch.slot_mapping.tolist(), batch.token_ids.tolist())):
                self.slots[slot] = (tok, int(pos[t]))
        else:
            assert len(set(batch.seq_ids.tolist())) == batch.n_seqs
            for s in range(batch.n_seqs):
                cells = self.cells[int(batch.seq_ids[s])]
                first = int(pos[qs[s]])
                assert not cells or max(cells) < first, "seq holds positions at or after the chunk (stale seq)"
                for t in range(qs[s], qs[s + 1]):
                    cells[int(pos[t])] = int(batch.token_ids[t])

    def _read(self, batch, row: int, n: int) -> list:
        if batch.kv_layout == "slot":
            cells = self.cells[int(batch.seq_ids[row])]
            return [cells[p] for p in range(n)]
        bs, table = batch.block_size, batch.block_tables[row]
        hist = []
        for p in range(n):
            tok, stored_pos = self.slots[int(table[p // bs]) * bs + p % bs]
            assert stored_pos == p, f"slot for position {p} holds position {stored_pos}"
            hist.append(tok)
        return hist


def make_engine(runner=None, **config) -> LLMEngine:
    cfg = dict(max_num_seqs=8, max_num_batched_tokens=64, max_model_len=256, block_size=4, num_blocks=256)
    cfg.update(config)
    return LLMEngine(EngineConfig(**cfg), runner or FakeRunner(), FakeTokenizer(), clock=FakeClock())


class FakeClock:
    """A clock that advances one unit per reading (deterministic timestamps)."""

    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        self.t += 1.0
        return self.t


def run_all(engine: LLMEngine, max_steps: int = 10000, check_deltas: bool = True) -> dict:
    """Step until done; request id -> final RequestOutput. Checks that each completion's
    deltas add up to its text and token ids (when every output was seen)."""
    finals, texts, ids = {}, defaultdict(str), defaultdict(list)
    for _ in range(max_steps):
        if not engine.has_unfinished_requests():
            break
        for o in engine.step():
            assert o.request_id not in finals, "output after the final one"
            for c in o.outputs if isinstance(o.outputs, list) else ():  # a pooling output has no completions
                texts[o.request_id, c.index] += c.delta_text
                ids[o.request_id, c.index] += c.delta_token_ids
                if check_deltas:
                    assert texts[o.request_id, c.index] == c.text
                    assert ids[o.request_id, c.index] == c.token_ids
            if o.finished:
                finals[o.request_id] = o
    else:
        raise AssertionError("engine did not finish")
    return finals


def drain(engine: LLMEngine, max_steps: int = 10000) -> None:
    """Step until nothing is left (outputs ignored)."""
    for _ in range(max_steps):
        if not engine.has_unfinished_requests():
            return
        engine.step()
    raise AssertionError("engine did not finish")
