"""The engine: scheduler, KV block manager with prefix caching, output processing, and the
runner seam. Pure Python + numpy; nothing here imports the native library."""

from .admission import check_fits
from .async_engine import AsyncEngine, EngineDeadError, RequestStream
from .config import EngineConfig
from .executor import ModelRunner, empty_result
from .kv_cache_manager import ComputedBlocks, KVCacheManager, PrefixCacheStats, hash_block_tokens
from .llm import LLM
from .llm_engine import LLMEngine
from .metrics import EngineMetrics
from .output_processor import OutputProcessor
from .outputs import CompletionOutput, PoolingOutput, PoolingRequestOutput, RequestOutput, Usage
from .pooling_params import PoolingParams, PoolingParamsError
from .request import InvalidTransitionError, Request, RequestStatus, RequestTimes
from .sampling_params import SamplingParams, SamplingParamsError
from .scheduler import Scheduler, SchedulerOutput
from .step_input import StepInput, StepResult, unpack_result

__all__ = [
    "AsyncEngine",
    "EngineDeadError",
    "RequestStream",
    "CompletionOutput",
    "ComputedBlocks",
    "EngineConfig",
    "EngineMetrics",
    "InvalidTransitionError",
    "KVCacheManager",
    "LLM",
    "LLMEngine",
    "ModelRunner",
    "OutputProcessor",
    "PoolingOutput",
    "PoolingParams",
    "PoolingParamsError",
    "PoolingRequestOutput",
    "PrefixCacheStats",
    "Request",
    "RequestOutput",
    "RequestStatus",
    "RequestTimes",
    "SamplingParams",
    "SamplingParamsError",
    "Scheduler",
    "SchedulerOutput",
    "StepInput",
    "StepResult",
    "Usage",
    "check_fits",
    "empty_result",
    "hash_block_tokens",
    "unpack_result",
]
