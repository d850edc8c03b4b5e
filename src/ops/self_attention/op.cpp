#include "op.hpp"

#include "../check.hpp"
#include "cpu/self_attention_cpu.hpp"

#ifdef LLAISYS_ENABLE_NVIDIA
#include "../nvidia_launch.hpp"
#include "nvidia/self_attention_nvidia.hpp"
#endif

#include <cmath>

namespace llaisys::ops {

void self_attention(Tensor &out, const Tensor &q, const Tensor &k, const Tensor &v, float scale) {
    const char *op = "self_attention";
    check_same_device(op, {&out, &q, &k, &v});
    check_same_dtype(op, {&out, &q, &k, &v});
    check_float(op, out);
    check_ndim(op, "q", q, 3);
    check_ndim(op, "k", k, 3);
    check_ndim(op, "v", v, 3);
    size_t q_len = q.shape()[0], heads = q.shape()[1], d = q.shape()[2];
    size_t kv_len = k.shape()[0], kv_heads = k.shape()[1], dv = v.shape()[2];
    LLAISYS_CHECK(k.shape()[2] == d, LLAISYS_STATUS_SHAPE_MISMATCH, op, ": q ", q.describe(), " and k ",
                  k.describe(), " head dims differ");
    check_shape(op, "v", v, {kv_len, kv_heads, dv});
    check_shape(op, "out", out, {q_len, heads, dv});
    LLAISYS_CHECK(kv_heads > 0 && heads % kv_heads == 0, LLAISYS_STATUS_SHAPE_MISMATCH, op, ": ", heads,
                  " query heads are not a multiple of ", kv_heads, " kv heads");
    LLAISYS_CHECK(q_len <= kv_len, LLAISYS_STATUS_SHAPE_MISMATCH, op, ": query length ", q_len,
                  " exceeds key length ", kv_len);
    check_contiguous(op, {&out, &q, &k, &v});
    LLAISYS_CHECK_ARG(std::isfinite(scale), op, ": scale must be finite");
    if (out.device() == LLAISYS_DEVICE_NVIDIA) {
#ifdef LLAISYS_ENABLE_NVIDIA
        run_nvidia(out.device_id(), [&](cudaStream_t s) {
            nvidia::self_attention(out.data(), q.data(), k.data(), v.data(), out.dtype(), q_len, kv_len, heads, kv_heads,
                                   d, dv, scale, s);
        });
        return;
#endif
    }
    if (out.device() != LLAISYS_DEVICE_CPU) no_kernel(op, out);
    cpu::self_attention(out.data(), q.data(), k.data(), v.data(), out.dtype(), q_len, kv_len, heads, kv_heads, d,
                        dv, scale);
}

}  // namespace llaisys::ops
