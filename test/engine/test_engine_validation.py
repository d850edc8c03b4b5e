"""SamplingParams, EngineConfig and admission checks: bad input is a ValueError naming the
field and the allowed range."""

import re

import pytest

from llaisys.engine import EngineConfig, SamplingParams, SamplingParamsError, check_fits

I32 = 2 ** 31 - 1
BAD_PARAMS = [
    ("n", 0, "n must be an integer in [1, 128]"),
    ("n", True, "n must be an integer in [1, 128]"),
    ("n", 129, "n must be an integer in [1, 128]"),
    ("n", 10 ** 9, "n must be an integer in [1, 128]"),
    ("temperature", -0.1, "temperature must be a number >= 0"),
    ("temperature", float("nan"), "temperature must be a number >= 0"),
    ("temperature", 1e39, "temperature must be a number >= 0 (0 = greedy) that fits a float32"),  # f32: inf
    ("top_p", 0.0, "top_p must be a number in (0, 1]"),
    ("top_p", 1.5, "top_p must be a number in (0, 1]"),
    ("top_p", 1e-50, "top_p must be a number in (0, 1] that fits a float32"),  # f32: 0, the core refuses it
    ("top_k", -2, "top_k must be -1 or 0 (off) or an integer in [1, 2147483647]"),
    ("top_k", 2.5, "top_k must be -1 or 0"),
    ("top_k", 2 ** 31, "top_k must be -1 or 0 (off) or an integer in [1, 2147483647]"),  # int32 in the core
    ("min_p", 1.01, "min_p must be a number in [0, 1]"),
    ("presence_penalty", 2.5, "presence_penalty must be a number in [-2, 2]"),
    ("frequency_penalty", -3, "frequency_penalty must be a number in [-2, 2]"),
    ("repetition_penalty", 0.0, "repetition_penalty must be a number > 0"),
    ("repetition_penalty", 1e-50, "repetition_penalty must be a number > 0 (1 = off) that fits a float32"),
    ("repetition_penalty", 1e39, "repetition_penalty must be a number > 0 (1 = off) that fits a float32"),
    ("max_tokens", 0, "max_tokens must be an integer in [1, 2147483647] or None"),
    ("max_tokens", 2 ** 31, "max_tokens must be an integer in [1, 2147483647] or None"),
    ("max_tokens", 10 ** 30, "max_tokens must be an integer in [1, 2147483647] or None"),
    ("min_tokens", -1, "min_tokens must be an integer in [0, 2147483647]"),
    ("stop", "", "stop must be a non-empty string or a list of non-empty strings"),
    ("stop", ["a", ""], "stop must be a non-empty string"),
    ("stop", ["s"] * 17, "stop may hold at most 16 strings"),
    ("stop", 5, "stop must be a non-empty string"),
    ("stop", ["x" * 1025], "stop strings may be at most 1024 characters long"),
    ("stop_token_ids", [1, -1], "stop_token_ids must be a list of integers in [0, 2147483647], got -1"),
    ("stop_token_ids", [2 ** 70], f"stop_token_ids must be a list of integers in [0, {I32}], got {2 ** 70}"),
    ("stop_token_ids", [2 ** 31], "stop_token_ids must be a list of integers in [0, 2147483647]"),
    ("stop_token_ids", [True], "stop_token_ids must be a list of integers"),
    ("stop_token_ids", ["5"], "stop_token_ids must be a list of integers"),
    ("stop_token_ids", [1.0], "stop_token_ids must be a list of integers"),
    ("stop_token_ids", 5, "stop_token_ids must be a list of token ids"),
    ("stop_token_ids", list(range(1025)), "stop_token_ids may hold at most 1024 ids, got 1025"),
    ("ignore_eos", 1, "ignore_eos must be a bool"),
    ("include_stop_str_in_output", "yes", "include_stop_str_in_output must be a bool"),
    ("skip_special_tokens", None, "skip_special_tokens must be a bool"),
    ("seed", 1.5, "seed must be an integer in [0, 2**64) or None"),
    ("seed", -1, "seed must be an integer in [0, 2**64) or None, got -1"),
    ("seed", 2 ** 64, "seed must be an integer in [0, 2**64) or None"),
    ("seed", 10 ** 30, "seed must be an integer in [0, 2**64) or None"),
    ("seed", True, "seed must be an integer in [0, 2**64)"),
    ("logprobs", 21, "logprobs must be None or an integer in [0, 20]"),
    ("logprobs", -1, "logprobs must be None or an integer in [0, 20]"),
    ("logit_bias", {1: 101}, "logit_bias values must be numbers in [-100, 100]"),
    ("logit_bias", {1: float("inf")}, "logit_bias values must be numbers in [-100, 100]"),
    ("logit_bias", {1: float("nan")}, "logit_bias values must be numbers in [-100, 100]"),
    ("logit_bias", {1: True}, "logit_bias values must be numbers"),
    ("logit_bias", {1: "5"}, "logit_bias values must be numbers"),
    ("logit_bias", {-1: 1.0}, "logit_bias keys must be token ids in [0, 2147483647]"),
    ("logit_bias", {str(2 ** 70): 5}, "logit_bias keys must be token ids in [0, 2147483647] (integers or strings "
                                      "of digits), got '1180591620717411303424'"),
    ("logit_bias", {2 ** 70: 5}, "logit_bias keys must be token ids in [0, 2147483647]"),
    ("logit_bias", {"2147483648": 5}, "logit_bias keys must be token ids"),  # just past int32
    ("logit_bias", {"-5": 1}, "logit_bias keys must be token ids"),
    ("logit_bias", {"\u00b2": 1}, "logit_bias keys must be token ids"),  # str.isdigit() says yes, int() says no
    ("logit_bias", {"\u0661\u0662": 1}, "logit_bias keys must be token ids"),  # Arabic-Indic digits
    ("logit_bias", {" 7": 1}, "logit_bias keys must be token ids"),
    ("logit_bias", {"7.0": 1}, "logit_bias keys must be token ids"),
    ("logit_bias", {"9" * 5000: 1}, "logit_bias keys must be token ids"),  # past int()'s digit limit
    ("logit_bias", {1.0: 1}, "logit_bias keys must be token ids"),
    ("logit_bias", {None: 1}, "logit_bias keys must be token ids"),
    ("logit_bias", {"7": 1, 7: 2}, "logit_bias gives token 7 twice"),
    ("logit_bias", {i: 1.0 for i in range(1025)}, "logit_bias may hold at most 1024 entries, got 1025"),
    ("logit_bias", [1], "logit_bias must be a dict"),
]


@pytest.mark.parametrize("field,value,message", BAD_PARAMS)
def test_bad_sampling_params(field, value, message):
    with pytest.raises(SamplingParamsError, match=re.escape(message)) as e:
        SamplingParams(**{field: value})
    assert e.value.param == field
    assert isinstance(e.value, ValueError)


def test_sampling_params_accept_the_edges_of_every_range():
    import numpy as np

    sp = SamplingParams(n=128, top_k=I32, max_tokens=I32, min_tokens=I32, seed=2 ** 64 - 1, logprobs=20,
                        stop_token_ids=[0, I32, np.int64(5)], stop=["x" * 1024] * 16, temperature=3e38,
                        repetition_penalty=1e-30, logit_bias={"0": -100, str(I32): 100, np.int32(9): 0.5,
                                                              **{i: 1.0 for i in range(10, 1031)}})
    assert sp.seed == 2 ** 64 - 1 and sp.stop_token_ids == [0, I32, 5] and type(sp.stop_token_ids[2]) is int
    assert sp.logit_bias[0] == -100.0 and sp.logit_bias[I32] == 100.0 and sp.logit_bias[9] == 0.5
    assert len(sp.logit_bias) == 1024 and all(type(k) is int for k in sp.logit_bias)
    assert SamplingParams(logit_bias={"0007": 1}).logit_bias == {7: 1.0}
    assert SamplingParams(seed=0).seed == 0 and SamplingParams(max_tokens=np.int64(5)).max_tokens == 5


def test_tiny_temperatures_are_greedy():
    # 1 / t overflows float32 for t below ~3e-39; vLLM's threshold (1e-5) makes them greedy
    assert SamplingParams(temperature=1e-6).greedy and SamplingParams(temperature=1e-6).temperature == 0.0
    assert SamplingParams(temperature=1e-40).greedy
    assert not SamplingParams(temperature=1e-5).greedy


def test_sampling_params_defaults_and_normalisation():
    sp = SamplingParams()
    assert sp.greedy and sp.n == 1 and sp.top_k == -1 and sp.skip_special_tokens
    assert sp.stop == [] and sp.stop_token_ids == [] and sp.logit_bias == {}
    sp = SamplingParams(stop="\n\n", logit_bias={"7": 3, 8: -100}, temperature=1, top_k=0, max_tokens=None)
    assert sp.stop == ["\n\n"] and sp.max_stop_len == 2
    assert sp.logit_bias == {7: 3.0, 8: -100.0} and isinstance(sp.temperature, float)
    with pytest.raises(ValueError, match=r"min_tokens \(5\) must be <= max_tokens \(4\)"):
        SamplingParams(min_tokens=5, max_tokens=4)


@pytest.mark.parametrize("kwargs,message", [
    (dict(max_num_seqs=0), "max_num_seqs must be >= 1"),
    (dict(max_num_batched_tokens=4, max_num_seqs=8), r"max_num_batched_tokens \(4\) must be >= max_num_seqs \(8\)"),
    (dict(block_size=0), "block_size must be >= 1"),
    (dict(num_blocks=2.5), "num_blocks must be an integer"),
    (dict(kv_layout="paged"), "kv_layout must be one of"),
    (dict(kv_layout="slot", enable_prefix_caching=True), "enable_prefix_caching needs kv_layout='block'"),
    (dict(kv_layout="slot", max_num_seqs=300, max_num_batched_tokens=300), "max_num_seqs must be <= 256"),
    (dict(long_prefill_token_threshold=-1), "long_prefill_token_threshold must be >= 0"),
])
def test_bad_engine_config(kwargs, message):
    with pytest.raises(ValueError, match=message):
        EngineConfig(**kwargs)


def test_engine_config_prefix_caching_default_follows_layout():
    assert EngineConfig().enable_prefix_caching is True
    assert EngineConfig(kv_layout="slot").enable_prefix_caching is False


def test_admission_rejections_state_both_numbers():
    cfg = EngineConfig(max_model_len=100, block_size=16, num_blocks=4, max_num_seqs=4, max_num_batched_tokens=64)
    with pytest.raises(ValueError, match=r"prompt \(90 tokens\) \+ max_tokens \(20\) = 110 tokens exceeds "
                                         r"max_model_len \(100\)"):
        check_fits(cfg, 90, 20)
    with pytest.raises(ValueError, match=r"= 80 tokens needs 5 KV blocks of 16 but the pool has 4"):
        check_fits(cfg, 70, 10)
    with pytest.raises(ValueError, match=r"prompt has 64 tokens, which leaves no room .* max_model_len \(100\) "
                                         r"and the KV pool \(64 tokens\)"):
        check_fits(cfg, 64, None)
    with pytest.raises(ValueError, match="at least one token"):
        check_fits(cfg, 0, 5)
    assert check_fits(cfg, 30, None) == 34  # max_tokens=None: up to what the pool holds
    assert check_fits(EngineConfig(max_model_len=100), 30, None) == 70


def test_gpu_memory_utilization_is_a_per_instance_share():
    """vLLM's meaning: utilization x total for this instance (weights, step workspace and KV
    together); memory other processes hold does not shrink the share, but the KV cache must
    fit in what is free."""
    from llaisys.engine.worker import kv_budget_from

    GiB = 1 << 30
    # 140 GiB GPU, 8 GiB held by other processes: 0.05 gives 7 GiB - 1 GiB weights - 0.1 GiB step
    assert kv_budget_from(0.05, 140 * GiB, 131 * GiB, 1 * GiB, GiB // 10) == int(0.05 * 140 * GiB) - GiB - GiB // 10
    with pytest.raises(ValueError, match="leaves no room for the KV cache"):
        kv_budget_from(0.05, 140 * GiB, 131 * GiB, 7 * GiB, GiB // 10)
    with pytest.raises(ValueError, match="only 2 GiB|only 2048 MiB.*lower gpu_memory_utilization"):
        kv_budget_from(0.9, 140 * GiB, 2 * GiB, 1 * GiB, GiB // 10)
