#include "self_attention_nvidia.hpp"

#include "../../paged_attention/nvidia/attention_kernel.cuh"

namespace llaisys::ops::nvidia {

void self_attention(std::byte *out, const std::byte *q, const std::byte *k, const std::byte *v,
                    llaisysDataType_t dtype, size_t q_len, size_t kv_len, size_t heads, size_t kv_heads,
                    size_t d, size_t dv, float scale, cudaStream_t stream) {
    if (q_len == 0 || heads == 0 || dv == 0) return;
    LLAISYS_CHECK_ARG(kv_heads > 0 && heads % kv_heads == 0 && q_len <= kv_len, "self_attention: bad shape (",
                      heads, " heads over ", kv_heads, " kv heads, ", q_len, " queries over ", kv_len, " keys)");
    const attention::DenseSource src{q_len, kv_len};
    attention::Params p{out, heads * dv, q, heads * d, k, v, heads, kv_heads, d, dv, scale, 0, 0, 0, 0};
    const size_t tt = q_len == 1 ? 1 : attention::prefill_tile_tokens(heads / kv_heads);
    attention::launch(p, src, dtype, dtype, 1, tt, attention::ceil_div(q_len, tt), 0, SIZE_MAX, stream);
}

}  // namespace llaisys::ops::nvidia
