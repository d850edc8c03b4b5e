"""Speculative decoding (issue 21): proposers, verification in the batched step, adaptive k.

``make_spec_decoder`` builds the engine's SpecDecoder from a SpeculativeConfig, checking at
start-up what could otherwise give a wrong answer: a draft model with another vocabulary or
tokenizer, a draft whose context is shorter than the target's, a runner that cannot verify."""

from __future__ import annotations

from .config import MAX_SPECULATIVE_TOKENS, SpeculativeConfig, SpeculativeConfigError, parse_speculative
from .decoder import SpecDecoder, SpecStats
from .ngram import NgramProposer
from .proposer import Draft, Proposer

__all__ = ["MAX_SPECULATIVE_TOKENS", "Draft", "NgramProposer", "Proposer", "SpecDecoder", "SpecStats",
           "SpeculativeConfig", "SpeculativeConfigError", "make_spec_decoder", "parse_speculative"]

_PROBE_IDS = 64  # token ids compared between the target's and the draft's tokenizers (plus the ends)


def check_same_tokenizer(target_tok, draft_tok, target_vocab: int, draft_vocab: int, name: str) -> None:
    """SpeculativeConfigError unless the draft shares the target's logits width and tokens."""
    if target_vocab != draft_vocab:
        raise SpeculativeConfigError("speculative", f"draft model {name} has a vocabulary of {draft_vocab} logits, "
                                                    f"the target {target_vocab}: a draft must share the target's "
                                                    f"tokenizer")
    n_t, n_d = getattr(target_tok, "vocab_size", None), getattr(draft_tok, "vocab_size", None)
    if n_t != n_d:
        raise SpeculativeConfigError("speculative", f"draft model {name}'s tokenizer has {n_d} tokens, the "
                                                    f"target's {n_t}: a draft must share the target's tokenizer")
    if n_t and hasattr(target_tok, "id_to_token") and hasattr(draft_tok, "id_to_token"):
        step = max(1, n_t // _PROBE_IDS)
        for i in list(range(0, n_t, step)) + [n_t - 1]:
            if target_tok.id_to_token(i) != draft_tok.id_to_token(i):
                raise SpeculativeConfigError("speculative", f"draft model {name}'s token {i} is "
                                                            f"{draft_tok.id_to_token(i)!r}, the target's "
                                                            f"{target_tok.id_to_token(i)!r}: the tokenizers differ")


def make_spec_decoder(cfg: SpeculativeConfig, runner, target_worker, engine_config, worker_config) -> SpecDecoder:
    """The SpecDecoder for an engine over ``runner`` (target_worker's model). A draft model is
    loaded with the target's device, KV dtype and KV memory budget (its own BLOCK cache)."""
    if not getattr(runner, "supports_speculation", False):
        raise SpeculativeConfigError("speculative", f"the model runner {type(runner).__name__} cannot verify "
                                                    f"speculative tokens")
    if cfg.method == "ngram":
        return SpecDecoder(cfg, NgramProposer(cfg.ngram_max, cfg.ngram_min), engine_config.max_model_len)
    from ...sampling_probs import sample_probs_available
    from ..worker import Worker, WorkerConfig
    from .draft import DraftModelProposer

    if not sample_probs_available():
        raise SpeculativeConfigError("speculative", "the loaded libllaisys has no llaisysSampleProbs, which a "
                                                    "draft model needs to sample (rebuild the library)")
    wc = worker_config
    draft = Worker(WorkerConfig(model=cfg.draft_model, dtype=wc.dtype, device=wc.device, device_id=wc.device_id,
                                kv_layout="block", kv_dtype=wc.kv_dtype, kv_cache_memory=wc.kv_cache_memory,
                                gpu_memory_utilization=wc.gpu_memory_utilization))
    try:
        tc, dc = target_worker.model.config, draft.model.config
        check_same_tokenizer(target_worker.tokenizer, draft.tokenizer, int(tc.vocab_size), int(dc.vocab_size),
                             cfg.draft_model)
        if dc.max_position_embeddings < engine_config.max_model_len:
            raise SpeculativeConfigError("speculative", f"draft model {cfg.draft_model} holds "
                                                        f"{dc.max_position_embeddings} positions, less than "
                                                        f"max_model_len {engine_config.max_model_len}")
        bs = engine_config.block_size
        num_blocks = draft.num_blocks(bs, engine_config.max_num_batched_tokens, engine_config.max_num_seqs)
        proposer = DraftModelProposer(draft, num_blocks, bs, cfg.num_speculative_tokens)
        # the draft's decode steps as CUDA graphs, captured at load as the target's are (a no-op
        # unless LLAISYS_CUDA_GRAPHS=1 on a GPU; Worker.make_runner)
        draft.model.capture_graphs(proposer.cache, engine_config.max_num_seqs)
    except Exception:
        draft.close()
        raise
    return SpecDecoder(cfg, proposer, engine_config.max_model_len)
