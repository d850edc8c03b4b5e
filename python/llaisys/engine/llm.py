"""LLM: offline generation and embeddings for one or many prompts, batched through the engine."""

from __future__ import annotations

import itertools
import logging
from typing import Iterator, Optional, Sequence, Union

from ..models import hub
from .cache_reuse import CacheReuse, check_cache_reuse
from .config import DEFAULT_DECODE_GAP_MS, DEFAULT_KV_DTYPE, EngineConfig
from .llm_engine import LLMEngine
from .outputs import RequestOutput
from .pooling_params import PoolingParams
from .prompt_cache import DEFAULT_MAX_BYTES, check_options, open_tier
from .prompts import normalize_prompts
from .sampling_params import SamplingParams
from .spec import make_spec_decoder, parse_speculative
from .worker import DEFAULT_KV_CACHE_MEMORY, Worker, WorkerConfig

log = logging.getLogger(__name__)


class LLM:
    """Load a model (a directory, a .gguf file, or a known name, downloaded on first use) and generate.

    >>> llm = LLM()                                   # the default model
    >>> llm.generate("Hello")[0].text
    >>> LLM("model.gguf")                             # a GGUF runs in its stored (quantized) types
    >>> LLM("qwen2.5-coder-0.5b-instruct", quant="q8_0")   # a known model's Q8_0 GGUF
    >>> LLM("path/to/hf_dir", quantize="q4_k")        # quantize a safetensors checkpoint at load
    """

    def __init__(self, model: Optional[str] = None, *, dtype: Optional[str] = None, device: str = "cpu",
                 device_id: int = 0, kv_layout: str = "block", kv_dtype: str = DEFAULT_KV_DTYPE,
                 kv_cache_memory: Union[int, str] = DEFAULT_KV_CACHE_MEMORY, max_num_seqs: int = 32,
                 max_num_batched_tokens: int = 2048, max_model_len: Optional[int] = None, block_size: int = 16,
                 enable_prefix_caching: Optional[bool] = None, long_prefill_token_threshold: int = 0,
                 seed: Optional[int] = None, gpu_memory_utilization: Optional[float] = None,
                 threads: Optional[int] = None, quant: Optional[str] = None, quantize: Optional[str] = None,
                 speculative=None, num_speculative_tokens: Optional[int] = None,
                 decode_gap_ms: float = DEFAULT_DECODE_GAP_MS, prompt_cache_dir: Optional[str] = None,
                 prompt_cache_max_bytes: Union[int, str] = DEFAULT_MAX_BYTES, cache_reuse: int = 0,
                 async_output: bool = False, async_scheduling: bool = False,
                 batch_invariant: Optional[bool] = None):
        # device_id: which GPU with device="nvidia" (0 .. device count - 1; the CPU is 0 only): the
        # model, its KV cache, the sampler and the memory queries all use it (WorkerConfig)
        # threads: CPU kernel threads, for the whole process (llaisys.runtime.set_num_threads);
        # None keeps the current count, by default the physical cores.
        # batch_invariant: True keeps every quantized linear on one path at every batch size, for
        # the whole process (llaisys.runtime.set_batch_invariant; CPU only): a request's greedy
        # answer then does not depend on the load or the prefix cache; None keeps the setting.
        # quant: a known model's format ("q4_k_m", "q8_0", "bf16"; hub.QUANTS); quantize: "q8_0" or
        # "q4_k" quantizes an HF directory's matrices at load (WorkerConfig)
        # speculative: "ngram", "draft:MODEL" or a spec.SpeculativeConfig (doc/engine.md, "Speculative
        # decoding"); num_speculative_tokens: the most draft tokens per row and step (1..16)
        # decode_gap_ms: the step time prefill chunks are cut to while requests decode (EngineConfig)
        # prompt_cache_dir: keep evicted prefix-cache blocks there, and every cached block on close(),
        # for this and later processes, under prompt_cache_max_bytes (doc/engine.md "Prompt cache on disk")
        # cache_reuse: llama-server's --cache-reuse N: a prompt's tokens after its cached prefix are
        # taken from a recent request's cached blocks at another position, in runs of >= N tokens
        # (an approximation; BLOCK layout, CPU or NVIDIA; doc/engine.md "Cache reuse"); 0: off
        # async_output: make a step's outputs while the next step computes (EngineConfig; off: it
        # measured slower on the CPU and did not pay with a simulated device wait, doc/engine.md)
        # async_scheduling: also plan each step while the one before computes (EngineConfig;
        # doc/engine.md "Async scheduling"); not with the disk prompt cache or cache reuse
        spec_cfg = parse_speculative(speculative, num_speculative_tokens)  # checked before the load
        if async_scheduling is True and (prompt_cache_dir is not None or cache_reuse):
            raise ValueError("async_scheduling does not combine with prompt_cache_dir or cache_reuse (they move "
                             "K/V blocks while the next step is planned); turn one of them off")
        check_cache_reuse(cache_reuse, kv_layout, enable_prefix_caching, device)
        cache_cap = None if prompt_cache_dir is None else check_options(prompt_cache_dir, prompt_cache_max_bytes,
                                                                        kv_layout, enable_prefix_caching)
        self.spec = None
        self.prompt_cache = None
        self.worker = Worker(WorkerConfig(model=str(model or hub.DEFAULT_MODEL), dtype=dtype, device=device,
                                          device_id=device_id, quant=quant, quantize=quantize,
                                          kv_layout=kv_layout, kv_dtype=kv_dtype, kv_cache_memory=kv_cache_memory,
                                          gpu_memory_utilization=gpu_memory_utilization, threads=threads,
                                          batch_invariant=batch_invariant))
        try:
            num_blocks = self.worker.num_blocks(block_size, max_num_batched_tokens, max_num_seqs)
            limit = min(self.worker.model.config.max_position_embeddings, num_blocks * block_size)
            if max_model_len is not None and max_model_len > limit:
                raise ValueError(f"max_model_len {max_model_len} exceeds what the model and KV cache allow ({limit})")
            self.config = EngineConfig(max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                                       max_model_len=max_model_len or limit, block_size=block_size,
                                       num_blocks=num_blocks, enable_prefix_caching=enable_prefix_caching,
                                       long_prefill_token_threshold=long_prefill_token_threshold,
                                       decode_gap_ms=decode_gap_ms, kv_layout=self.worker.kv_layout, seed=seed,
                                       cache_reuse=cache_reuse, async_output=async_output,
                                       async_scheduling=async_scheduling)
            runner = self.worker.make_runner(self.config)
            if spec_cfg is not None:
                self.spec = make_spec_decoder(spec_cfg, runner, self.worker, self.config, self.worker.config)
            self.engine = LLMEngine(self.config, runner, self.worker.tokenizer, speculative=self.spec)
            if cache_cap is not None:
                self.prompt_cache = open_tier(prompt_cache_dir, cache_cap, self.worker, runner.cache, block_size)
                self.engine.scheduler.kv.tier = self.prompt_cache
            if cache_reuse:
                self.engine.scheduler.kv.reuse = CacheReuse(cache_reuse, runner.cache)
                self.engine.metrics.cache_reuse = self.engine.scheduler.kv.reuse.stats  # 0s before a step
        except Exception:
            if self.spec is not None:
                self.spec.close()
            self.worker.close()
            raise
        self._ids = itertools.count()

    @property
    def tokenizer(self):
        return self.worker.tokenizer

    def _add(self, prompts, sampling_params, pooling_params: Optional[PoolingParams] = None,
             final_only: bool = False) -> list:
        inputs = normalize_prompts(prompts, self.tokenizer)
        if pooling_params is not None:
            params: Sequence = [None] * len(inputs)
        elif sampling_params is None or isinstance(sampling_params, SamplingParams):
            params: Sequence = [sampling_params or SamplingParams()] * len(inputs)
        else:
            params = list(sampling_params)
            if len(params) != len(inputs):
                raise ValueError(f"{len(params)} sampling params for {len(inputs)} prompts")
        ids = []
        try:
            for inp, sp in zip(inputs, params):
                rid = f"offline-{next(self._ids)}"
                self.engine.add_request(rid, inp.token_ids, sp, prompt=inp.text, pooling_params=pooling_params,
                                        final_only=final_only, prompt_embeds=inp.embeds)
                ids.append(rid)
        except Exception:
            self.engine.abort_request(ids)
            self._drain(set(ids))
            raise
        return ids

    def _drain(self, ids: set) -> None:
        while ids and self.engine.has_unfinished_requests():
            for out in self.engine.step():
                if out.finished:
                    ids.discard(out.request_id)

    def generate(self, prompts, sampling_params: Union[SamplingParams, Sequence[SamplingParams], None] = None
                 ) -> list:
        """Generate for one prompt or many (strings, token-id lists, chat conversations or
        {"prompt_embeds": float32 [n, hidden]} input embeddings, mixed freely); returns one
        finished RequestOutput per prompt, in order. An embeddings prompt's output has
        prompt_token_ids [] (its ids are unknown) and counts n prompt tokens; a bad array
        is a ValueError naming prompt_embeds and its shape (engine/prompt_embeds.py)."""
        return self._run(self._add(prompts, sampling_params, final_only=True))

    def embed(self, prompts, pooling_params: Optional[PoolingParams] = None) -> list:
        """Embed one prompt or many (strings, token-id lists or chat conversations): one
        finished PoolingRequestOutput per prompt, in order, whose ``outputs.data`` is the
        [hidden] float32 mean of the final hidden states (L2-normalised unless
        ``pooling_params.normalize`` is False). Batched with any other request."""
        return self._run(self._add(prompts, None, pooling_params or PoolingParams()))

    def _run(self, ids: list) -> list:
        done = {}
        pending = set(ids)
        while pending:
            for out in self.engine.step():
                if out.finished and out.request_id in pending:
                    done[out.request_id] = out
                    pending.discard(out.request_id)
        return [done[i] for i in ids]

    def chat(self, conversations, sampling_params=None) -> list:
        """generate() for one conversation or a list of conversations."""
        return self.generate(conversations, sampling_params)

    def stream(self, prompt, sampling_params: Optional[SamplingParams] = None) -> Iterator[RequestOutput]:
        """Outputs of one prompt as they are produced; each carries the new text in
        outputs[i].delta_text (never half a UTF-8 character). Closing the iterator early aborts."""
        ids = self._add(prompt, sampling_params)
        if len(ids) != 1:
            self.engine.abort_request(ids)
            self._drain(set(ids))
            raise ValueError(f"stream() takes one prompt, got {len(ids)}")
        rid = ids[0]
        finished = False
        try:
            while not finished:
                for out in self.engine.step():
                    if out.request_id == rid:
                        finished = out.finished
                        yield out
        finally:
            if not finished:
                self.engine.abort_request(rid)
                self._drain({rid})

    def close(self) -> None:
        """Write the prompt cache's blocks (with prompt_cache_dir), free the model and its KV cache."""
        self.engine.close()  # a step still computing (async_output) ends first
        if self.prompt_cache is not None:
            tier, self.prompt_cache = self.prompt_cache, None
            try:
                tier.close(self.engine.scheduler.kv)
            except Exception:  # a failed write must not keep the model's memory
                log.exception("prompt cache: could not write the cached blocks on close")
        if self.spec is not None:
            self.spec.close()
            self.spec = None
        self.worker.close()

    def __enter__(self) -> "LLM":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

