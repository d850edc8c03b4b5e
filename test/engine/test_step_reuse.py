"""What a steady decode step reuses from the previous one instead of rebuilding (issue 41, the
engine's own cost): the packed sampling rows (model_runner.SamplingRows) and the one-token
decodes of the detokenizer (detokenizer.MemoDecode). Both must give exactly what a rebuild
gives: the C rows field by field, the same text."""

import numpy as np

from fake_runner import FakeTokenizer
from llaisys.engine import Request, RequestStatus, RequestTimes, SamplingParams
from llaisys.engine.detokenizer import IncrementalDetokenizer, MemoDecode
from llaisys.engine.model_runner import SamplingRows, row_sampling
from llaisys.libllaisys.sampler import SamplingParams as CSamplingParams
from llaisys.models.step_io import PackedSampling

EOS = 9
# pointer field -> its count field
ARRAYS = {"prompt_tokens": "n_prompt", "output_tokens": "n_output", "bias_ids": "n_bias", "bias_values": "n_bias",
          "allowed_mask": "mask_words"}


def c_row(c) -> dict:
    """Every field of one llaisysSamplingParams_t, pointers as the values they point at."""
    row = {}
    for name, _ in CSamplingParams._fields_:
        v = getattr(c, name)
        if name in ARRAYS:
            n = getattr(c, ARRAYS[name])
            v = [v[i] for i in range(n)] if v else None
        row[name] = v
    return row


def make(rid: str, seed: int, **sp) -> Request:
    params = SamplingParams(max_tokens=64, **sp)
    req = Request(rid, rid, 0, [3, 1, 4, 1, 5], params, seed=seed, max_tokens=64, eos_token_ids=frozenset({EOS}),
                  times=RequestTimes(0.0))
    req.status = RequestStatus.RUNNING
    return req


def requests() -> list:
    return [make("greedy", 1, temperature=0.0), make("sampled", 2, temperature=0.8, top_k=5, top_p=0.9),
            make("penalised", 3, repetition_penalty=1.2, presence_penalty=0.5, frequency_penalty=0.25),
            make("min_tokens", 4, min_tokens=3, stop_token_ids=[7]), make("bias", 5, logit_bias={4: 2.0}),
            make("logprobs", 6, logprobs=2, min_p=0.1)]


def steps(reqs, ahead: int = 0) -> np.ndarray:
    """The draws of the rows (StepInput.sample_steps): each output's length, plus `ahead`."""
    return np.array([len(r.output_token_ids) + ahead for r in reqs], np.int64)


def test_packed_rows_equal_a_fresh_packing_every_step():
    """Two packings are kept and used in turn (async scheduling packs a step while the one
    before computes from its own), so a step reuses the packing of the step two before."""
    reqs, rows = requests(), SamplingRows()
    packings, reused = [], 0
    for step in range(8):
        packed = rows.pack(reqs, steps(reqs))
        fresh = PackedSampling([row_sampling(r) for r in reqs])
        assert len(packed) == len(reqs) and packed.top == fresh.top == 2
        assert [c_row(packed.params[i]) for i in range(len(reqs))] == [c_row(fresh.params[i])
                                                                       for i in range(len(reqs))]
        assert rows.wants_logprobs
        assert not packings or packed is not packings[-1], "the packing of the step before may still be in use"
        reused += len(packings) >= 2 and packed is packings[-2]
        packings.append(packed)
        for i, r in enumerate(reqs):
            r.append_token(20 + step + i, None, 0.0)
        if step == 2:
            reqs = reqs[1:] + reqs[:1]  # another order: packed again
        if step == 4:  # a request's parameters changed inside the engine: they reach the core
            reqs[0].sampling_params.logit_bias = {5: -3.0}
    # steps 2 and 7 reuse (0, 1: first of each; 3, 4: new order; 5, 6: changed parameters)
    assert reused == 2


def test_packed_rows_take_the_draw_a_step_in_flight_makes_first():
    """Async scheduling: a row whose previous token is still being sampled draws one step
    further (its seed's step, the min_tokens ban) than its output says, packed fresh or reused;
    a penalised row's output ends with a DEFERRED slot, which the step thread fills before the
    call (SamplingRows.awaiting)."""
    reqs, rows = requests(), SamplingRows()
    penalised = [i for i, r in enumerate(reqs) if r.request_id == "penalised"]
    for step in range(4):
        packed = rows.pack(reqs, steps(reqs, ahead=1))
        assert [i for i, _ in rows.awaiting] == penalised
        for i, fill in rows.awaiting:
            fill(77)  # the id the step in flight sampled
        assert [c_row(packed.params[i]) for i in range(len(reqs))] == [
            c_row(PackedSampling([row_sampling(r, step=len(r.output_token_ids) + 1, awaiting=[])]).params[0]) | (
                {"output_tokens": r.output_token_ids + [77]} if r.request_id == "penalised" else {})
            for r in reqs]
        assert [c_row(packed.params[i])["step"] for i in range(len(reqs))] == [step + 1] * len(reqs)
        assert c_row(packed.params[penalised[0]])["n_output"] == step + 1
        for i, r in enumerate(reqs):
            r.append_token(20 + step + i, None, 0.0)


def test_a_penalised_rows_awaited_slot_is_written_from_the_step_before():
    """step_runner._deferred_ids: the step thread writes the step before's sampled id into the
    deferred token and into the penalised row's output slot, both from that row's sample row."""
    import functools

    import numpy as np
    from llaisys.engine.step_input import StepInput, StepResult
    from llaisys.engine.step_runner import _deferred_ids

    out = np.array([5, 6, -1], np.int64)
    batch = StepInput(token_ids=np.array([-1, -1], np.int64), positions=np.array([3, 4]),
                      seq_of_token=np.array([0, 1], np.int32), query_start=np.array([0, 1, 2], np.int32),
                      context_lens=np.array([4, 5], np.int32), sample_rows=np.array([0, 1], np.int32),
                      req_ids=["a", "b"], sample_requests=[], pooling=np.zeros(2, bool), kv_layout="block",
                      block_size=4, awaiting=[(1, functools.partial(out.__setitem__, -1))])
    ready = _deferred_ids(np.array([0, 1]), np.array([1, 0]), batch)  # the rows swapped places since
    ready((StepResult(token_ids=np.array([40, 41])), 0.0))
    assert batch.token_ids.tolist() == [41, 40] and out.tolist() == [5, 6, 40]


def test_packed_rows_follow_min_tokens_and_penalties_while_reused():
    """The rows that change besides their step (penalties read the output; the min_tokens ban
    lifts) are packed again on a reused packing; the others keep theirs."""
    reqs, rows = [make("min", 1, min_tokens=2), make("rep", 2, repetition_penalty=1.5)], SamplingRows()
    first = [rows.pack(reqs, steps(reqs)), rows.pack(reqs, steps(reqs))]  # the two kept packings
    assert c_row(first[0].params[0])["bias_ids"] == [EOS]  # eos banned under min_tokens
    for step in range(4):
        for r in reqs:
            r.append_token(11 + step, None, 0.0)
        packed = rows.pack(reqs, steps(reqs))
        assert packed is first[step % 2]
        assert c_row(packed.params[1])["output_tokens"] == [11 + j for j in range(step + 1)]
        assert c_row(packed.params[0])["step"] == c_row(packed.params[1])["step"] == step + 1
        assert c_row(packed.params[0])["bias_ids"] == ([EOS] if step + 1 < 2 else None)  # the ban lifts at 2


def test_memo_decode_calls_the_tokenizer_once_per_single_id():
    tok, calls = FakeTokenizer(), []

    def decode(ids, skip_special_tokens=False):
        calls.append(list(ids))
        return tok.decode(ids, skip_special_tokens)

    memo = MemoDecode(decode)
    assert memo([65]) == memo([65]) == tok.decode([65])
    assert memo([65], skip_special_tokens=True) == tok.decode([65], True)
    assert memo([65, 66]) == memo([65, 66]) == tok.decode([65, 66])
    assert calls == [[65], [65], [65, 66], [65, 66]]  # one per (id, skip); longer windows every time


def test_memoised_detokenizer_gives_the_same_deltas():
    tok = FakeTokenizer()
    ids = list("ab é€ z\n€€x".encode())
    plain = IncrementalDetokenizer(tok.decode, list(b"> "), True)
    memo = IncrementalDetokenizer(MemoDecode(tok.decode), list(b"> "), True)
    for _ in range(2):  # the second pass reads the memo
        assert [plain.add(t) for t in ids] + [plain.flush()] == [memo.add(t) for t in ids] + [memo.flush()]


def _byte_level_tokenizer():
    """A byte-level BPE (Qwen2's kind of decoder) trained here on mixed scripts, so that its
    merges cut some characters across tokens, with two special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=["<|end|>", "<|pad|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    text = ["def add(a, b):\n    return a + b  # 加法 €5 ü", "Grüße, 世界! naïve café 🙂🙂 ok", "\t\n  spaces  and\ttabs"]
    tok.train_from_iterator(text * 20, trainer)
    return tok


def test_a_concatenating_decoder_gives_the_window_decodes_deltas():
    """MemoDecode(concatenates=True) lets the detokenizer take a clean token's memoised text
    instead of decoding its window: the deltas must be exactly the window decode's, for random
    ids (pieces of characters, special tokens) with and without skip_special_tokens."""
    import random

    from llaisys.models.tokenizer import Tokenizer

    tok = _byte_level_tokenizer()
    n = tok.get_vocab_size(with_added_tokens=True)
    assert Tokenizer.decode_concatenates.fget(type("T", (), {"_backend": tok})())
    rng = random.Random(5)
    for skip in (False, True):
        decode = lambda ids, skip_special_tokens=False: tok.decode(list(ids), skip_special_tokens=skip_special_tokens)
        memo = MemoDecode(decode, concatenates=True)
        for trial in range(60):
            prompt = [rng.randrange(n) for _ in range(rng.randrange(0, 6))]
            ids = [rng.randrange(n) for _ in range(rng.randrange(1, 40))]
            plain = IncrementalDetokenizer(decode, prompt, skip)
            fast = IncrementalDetokenizer(memo, prompt, skip)
            want = [plain.add(t) for t in ids] + [plain.flush()]
            assert [fast.add(t) for t in ids] + [fast.flush()] == want, (skip, prompt, ids)
    # and the shortcut is taken: a clean token after a clean context is not decoded in a window
    calls = []
    memo = MemoDecode(lambda ids, skip_special_tokens=False: calls.append(list(ids)) or tok.decode(list(ids)), True)
    a, b = tok.encode("def add").ids[:2]
    ta, tb = tok.decode([a]), tok.decode([b])
    d = IncrementalDetokenizer(memo, [a], False)
    assert d.add(b) == tb and d.add(a) == ta and ta + tb == "def add" and all(len(c) == 1 for c in calls), calls


def test_a_sentencepiece_decoder_does_not_concatenate():
    """A decoder that strips the first piece's leading space (SentencePiece's) breaks
    decode(a + b) == decode(a) + decode(b): the tokenizer must not claim it."""
    from tokenizers import Tokenizer as HFTokenizer, decoders, models

    from llaisys.models.tokenizer import Tokenizer

    tok = HFTokenizer(models.BPE(vocab={"▁a": 0, "▁b": 1}, merges=[]))
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(content=" ", left=1, right=0)])
    assert tok.decode([0, 1]) != tok.decode([0]) + tok.decode([1])
    assert not Tokenizer.decode_concatenates.fget(type("T", (), {"_backend": tok})())
