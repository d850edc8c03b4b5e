"""Model hyperparameters as data: what a HuggingFace `config.json` is parsed into, and the bounds it is checked
against. Nothing here parses; `models.arch` does (`parse_config`, `read_config`, `hf_config_dict`), with the typed
field readers of `models/arch/fields.py`.

`ModelParams` mirrors `llaisysModelParams_t` (include/llaisys/models/model.h) field for field,
plus what the engine reads from the config (dtype, bos/eos ids). Which parser runs is chosen by
the architecture registry (`models/arch/`) from the config's `architectures` list.

Accepts both the transformers 4.x spelling (`torch_dtype`, top-level `rope_theta`,
`rope_scaling`) and the 5.x spelling (`dtype`, `rope_parameters`). Every value is type- and
range-checked before anything is sized by it (see LIMITS); errors are ModelFileErrors naming
the file and the field.
"""

from dataclasses import dataclass
from typing import Optional

# HF torch dtype names -> our dtype tags
TORCH_DTYPE_TAGS = {"bfloat16": "bf16", "float16": "f16", "float32": "f32"}
# field -> (smallest, largest) accepted value. Far above any released model of the supported
# families (the largest: 80-126 layers, hidden 16384, FFN 53248, 128 heads, vocab 256000,
# 131072 positions), low enough that nothing sized by a config can exhaust memory or time
# before the tensors in the files are compared with it.
LIMITS = {
    "hidden_size": (1, 1 << 16),
    "intermediate_size": (1, 1 << 20),
    "num_hidden_layers": (1, 1 << 12),
    "num_attention_heads": (1, 1 << 10),
    "num_key_value_heads": (1, 1 << 10),
    "head_dim": (2, 1 << 12),
    "vocab_size": (1, 1 << 22),
    "max_position_embeddings": (1, 1 << 26),
    "sliding_window": (1, 1 << 26),
    "rms_norm_eps": (0.0, 0.5),  # exclusive below; the core keeps it as a float32
    "rope_theta": (0.0, 1e12),  # exclusive below; the core keeps it as a float32
    # mixture of experts (Qwen3-235B-A22B: 128 experts, top 8; DeepSeek-V3: 256)
    "num_experts": (1, 1 << 16),
    "num_experts_per_tok": (1, 1 << 16),
    "moe_intermediate_size": (1, 1 << 20),
    "shared_expert_intermediate_size": (0, 1 << 20),
    "decoder_sparse_step": (1, 1 << 12),
}
MAX_EOS_IDS = 256  # end-of-sequence ids one config may list
ROPE_TYPES = ("default", "linear", "llama3", "yarn")  # LLAISYS_ROPE_* in order


@dataclass(frozen=True)
class RopeParams:
    """How RoPE frequencies derive from rope_theta (the rope_* fields of llaisysModelParams_t)."""

    scaling: str = "default"  # one of ROPE_TYPES (LLAISYS_ROPE_DEFAULT, _LINEAR, _LLAMA3, _YARN)
    factor: float = 1.0  # linear, llama3, yarn: context scale factor (> 0)
    low_freq_factor: float = 0.0  # llama3
    high_freq_factor: float = 0.0  # llama3: > low_freq_factor
    original_max_position: int = 0  # llama3, yarn: the pre-scaling context length
    beta_fast: float = 32.0  # yarn
    beta_slow: float = 1.0  # yarn
    attention_factor: float = 0.0  # yarn: cos/sin multiplier (set explicitly by the parser)


@dataclass(frozen=True)
class ModelParams:
    """Hyperparameters of one decoder of a supported family (all validated).

    Field names follow llaisysModelParams_t; the HF names the engine uses
    (num_hidden_layers, num_attention_heads, num_key_value_heads) are properties."""

    architecture: str  # the HF "architectures" name it was parsed as, e.g. "Qwen2ForCausalLM"
    arch: str  # family, the lower-case LLAISYS_ARCH_* name: "qwen2", "llama", "qwen3", "mistral"
    n_layers: int  # decoder blocks
    hidden_size: int  # H, model width
    intermediate_size: int  # I, SwiGLU inner width
    n_heads: int  # nh, query heads
    n_kv_heads: int  # nkv, K/V heads (GQA); divides nh
    head_dim: int  # hd, even; H / nh unless the config says otherwise
    vocab_size: int  # V, rows of the embedding and of lm_head
    max_position_embeddings: int  # longest context the model was trained for
    rms_norm_eps: float  # RMSNorm epsilon
    rope_theta: float  # RoPE base frequency
    rope: RopeParams  # RoPE scaling
    qkv_bias: bool  # q/k/v projections carry a bias (Qwen2)
    qk_norm: bool  # per-head RMSNorm of q and k before RoPE (Qwen3)
    tie_word_embeddings: bool  # lm_head shares model.embed_tokens.weight
    layer_window: tuple  # [n_layers] sliding window of each layer in tokens, 0: full context
    torch_dtype: Optional[str]  # checkpoint dtype as HF names it ("bfloat16"...), None if not stated
    bos_token_id: Optional[int]  # beginning-of-sequence id, None if not stated
    eos_token_ids: tuple  # end-of-sequence id(s) from config.json, () if not stated
    activation: str = "silu"  # the gated MLP's activation (LLAISYS_ACT_SILU)
    # mixture of experts (all 0 / () for a dense model)
    n_experts: int = 0  # E, routed experts of each sparse layer
    n_experts_per_tok: int = 0  # k, experts each token is routed to (1 <= k <= E)
    moe_intermediate_size: int = 0  # Ie, each expert's SwiGLU inner width
    shared_expert_intermediate_size: int = 0  # Is, the shared expert's width (Qwen2-MoE); 0: none
    norm_topk_prob: bool = False  # the k routing weights are renormalised to sum 1
    layer_sparse: tuple = ()  # [n_layers] True: the layer's FFN is the experts, False: the dense MLP

    @property
    def num_hidden_layers(self) -> int:
        return self.n_layers

    @property
    def num_attention_heads(self) -> int:
        return self.n_heads

    @property
    def num_key_value_heads(self) -> int:
        return self.n_kv_heads

    @property
    def dtype_tag(self) -> Optional[str]:
        """torch_dtype as our tag ("bf16", "f16", "f32"), or None."""
        return TORCH_DTYPE_TAGS.get(self.torch_dtype) if self.torch_dtype else None


Qwen2Config = ModelParams  # deprecated alias (one release): the config of every family is a ModelParams
