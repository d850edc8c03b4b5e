"""What a steady decode step reuses from the previous one instead of rebuilding (issue 41, the
engine's own cost): the packed sampling rows (model_runner.SamplingRows) and the one-token
decodes of the detokenizer (detokenizer.MemoDecode). Both must give exactly what a rebuild
gives: the C rows field by field, the same text."""

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


def test_packed_rows_equal_a_fresh_packing_every_step():
    reqs, rows = requests(), SamplingRows()
    previous, reused = None, 0
    for step in range(8):
        packed = rows.pack(reqs)
        fresh = PackedSampling([row_sampling(r) for r in reqs])
        assert len(packed) == len(reqs) and packed.top == fresh.top == 2
        assert [c_row(packed.params[i]) for i in range(len(reqs))] == [c_row(fresh.params[i])
                                                                       for i in range(len(reqs))]
        assert rows.wants_logprobs
        reused += packed is previous
        previous = packed
        for i, r in enumerate(reqs):
            r.append_token(20 + step + i, None, 0.0)
        if step == 2:
            reqs = reqs[1:] + reqs[:1]  # another order: packed again
        if step == 4:  # a request's parameters changed inside the engine: they reach the core
            reqs[0].sampling_params.logit_bias = {5: -3.0}
    # steps 1, 2, 4 and 6, 7 reuse the packing (0: first; 3: new order; 5: changed parameters)
    assert reused == 5


def test_packed_rows_follow_min_tokens_and_penalties_while_reused():
    """The rows that change besides their step (penalties read the output; the min_tokens ban
    lifts) are packed again on a reused packing; the others keep theirs."""
    reqs, rows = [make("min", 1, min_tokens=2), make("rep", 2, repetition_penalty=1.5)], SamplingRows()
    first = rows.pack(reqs)
    assert c_row(first.params[0])["bias_ids"] == [EOS]  # eos banned under min_tokens
    for step in range(3):
        for r in reqs:
            r.append_token(11 + step, None, 0.0)
        packed = rows.pack(reqs)
        assert packed is first
        assert c_row(packed.params[1])["output_tokens"] == [11 + j for j in range(step + 1)]
        assert c_row(packed.params[0])["step"] == c_row(packed.params[1])["step"] == step + 1
    assert c_row(first.params[0])["bias_ids"] is None  # min_tokens reached: no ban


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
