"""A block-quantized matrix as the loaders hold it (QuantTensor), and which weights may be one.

A leaf shared by the loader (loader.py, gguf_model.py) and quantization at load (quantize.py)."""

from dataclasses import dataclass

import numpy as np

from ..dtypes import block_bytes, block_size, is_quantized, quant_byte_shape
from ..libllaisys import DataType

# quant dtype tag -> (elements per block, bytes per block), as the library defines them (GGUF's)
QUANT_BLOCKS = {dt.name.lower(): (block_size(dt), block_bytes(dt)) for dt in DataType if is_quantized(dt)}
# weight kinds (arch WeightSlot.kind) that may hold a quantized matrix: the linear weights (the experts'
# and the shared expert's included; not the routers) and the embedding
QUANTIZABLE_KINDS = frozenset(("EMBED", "LM_HEAD", "Q", "K", "V", "O", "GATE", "UP", "DOWN", "EXPERT_GATE",
                               "EXPERT_UP", "EXPERT_DOWN", "SHARED_GATE", "SHARED_UP", "SHARED_DOWN"))


@dataclass
class QuantTensor:
    """A block-quantized matrix as GGUF stores it: each row is k / block consecutive blocks."""

    name: str  # HF tensor name, e.g. "model.layers.0.mlp.up_proj.weight"
    dtype: str  # one of QUANT_BLOCKS: "q8_0", "q4_k", ...
    shape: tuple  # element shape (rows, k); k a multiple of the block size
    data: np.ndarray  # uint8 [rows, k / block * block bytes], often a read-only memory map

    def __post_init__(self):
        self.shape = tuple(int(d) for d in self.shape)
        if self.dtype not in QUANT_BLOCKS:
            raise ValueError(f"tensor {self.name!r}: unknown quant dtype {self.dtype!r}")
        block = QUANT_BLOCKS[self.dtype][0]
        if len(self.shape) != 2 or self.shape[1] % block:
            raise ValueError(f"tensor {self.name!r}: a {self.dtype} tensor needs 2 dims, the last a multiple of "
                             f"{block}; got {self.shape}")
        want = quant_byte_shape(self.shape, self.dtype)
        if self.data.dtype != np.uint8 or tuple(self.data.shape) != want:
            raise ValueError(f"tensor {self.name!r}: {self.dtype} {self.shape} needs uint8 data {want}, "
                             f"got {self.data.dtype} {tuple(self.data.shape)}")

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes)
