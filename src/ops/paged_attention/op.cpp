#include "op.hpp"

#include "../check.hpp"

#ifdef LLAISYS_ENABLE_NVIDIA
#include "../nvidia_launch.hpp"
#include "nvidia/paged_attention_nvidia.hpp"

#include <vector>
#endif

#include <cmath>

namespace llaisys::ops {

void check_attention_view(const cpu::AttentionView &v, size_t n_tokens, size_t n_slots) {
    const char *op = "paged_attention";
    LLAISYS_CHECK_ARG(v.query_start[0] == 0 && size_t(v.query_start[v.n_seqs]) == n_tokens, op,
                      ": query_start must run from 0 to n_tokens (", n_tokens, ")");
    LLAISYS_CHECK_ARG(v.kv_start[0] == 0, op, ": kv_start[0] must be 0");
    for (size_t s = 0; s < v.n_seqs; s++) {
        LLAISYS_CHECK_ARG(v.query_start[s] <= v.query_start[s + 1], op, ": query_start decreases at row ", s);
        LLAISYS_CHECK_ARG(v.kv_start[s] <= v.kv_start[s + 1], op, ": kv_start decreases at row ", s);
        for (int32_t j = v.kv_start[s]; j < v.kv_start[s + 1]; j++) {
            LLAISYS_CHECK(v.kv_slots[j] >= 0 && size_t(v.kv_slots[j]) < n_slots, LLAISYS_STATUS_OUT_OF_RANGE, op,
                          ": kv slot ", v.kv_slots[j], " is outside the cache's ", n_slots, " slots");
            LLAISYS_CHECK_ARG(j == v.kv_start[s] || v.kv_pos[j - 1] <= v.kv_pos[j], op,
                              ": kv positions must ascend within row ", s);
        }
    }
}

namespace {

void run(Tensor &out, const Tensor &q, const Tensor &k_cache, const Tensor &v_cache, const Tensor &q_pos,
         const Tensor &query_start, const Tensor &kv_start, const Tensor &kv_slots, const Tensor &kv_pos, float scale,
         int64_t window, bool reference) {
    const char *op = "paged_attention";
    check_same_device(op, {&out, &q, &k_cache, &v_cache, &q_pos, &query_start, &kv_start, &kv_slots, &kv_pos});
    check_same_dtype(op, {&out, &q});
    check_same_dtype(op, {&k_cache, &v_cache});
    check_float(op, out);
    if (k_cache.dtype() == LLAISYS_DTYPE_Q8_0) {  // q8_0 K/V: the CPU kernels only
        LLAISYS_CHECK(k_cache.device() == LLAISYS_DEVICE_CPU, LLAISYS_STATUS_UNSUPPORTED, op,
                      ": a q8_0 KV cache is read on the CPU only, got ", k_cache.describe());
    } else {
        check_float(op, k_cache);
    }
    check_ndim(op, "q", q, 3);
    check_ndim(op, "k_cache", k_cache, 3);
    check_ndim(op, "v_cache", v_cache, 3);
    size_t n = q.shape()[0], heads = q.shape()[1], d = q.shape()[2];
    size_t n_slots = k_cache.shape()[0], kv_heads = k_cache.shape()[1], dv = v_cache.shape()[2];
    LLAISYS_CHECK(k_cache.shape()[2] == d, LLAISYS_STATUS_SHAPE_MISMATCH, op, ": q and k_cache head dims differ");
    check_shape(op, "v_cache", v_cache, {n_slots, kv_heads, dv});
    check_shape(op, "out", out, {n, heads, dv});
    LLAISYS_CHECK(kv_heads > 0 && heads % kv_heads == 0, LLAISYS_STATUS_SHAPE_MISMATCH, op, ": ", heads,
                  " query heads are not a multiple of ", kv_heads, " kv heads");
    check_dtype(op, "q_pos", q_pos, LLAISYS_DTYPE_I64);
    check_dtype(op, "query_start", query_start, LLAISYS_DTYPE_I32);
    check_dtype(op, "kv_start", kv_start, LLAISYS_DTYPE_I32);
    check_dtype(op, "kv_slots", kv_slots, LLAISYS_DTYPE_I32);
    check_dtype(op, "kv_pos", kv_pos, LLAISYS_DTYPE_I64);
    check_shape(op, "q_pos", q_pos, {n});
    check_ndim(op, "query_start", query_start, 1);
    LLAISYS_CHECK(query_start.shape()[0] >= 1, LLAISYS_STATUS_SHAPE_MISMATCH, op, ": query_start is empty");
    size_t n_seqs = query_start.shape()[0] - 1;
    check_shape(op, "kv_start", kv_start, {n_seqs + 1});
    check_ndim(op, "kv_slots", kv_slots, 1);
    check_shape(op, "kv_pos", kv_pos, kv_slots.shape());
    check_contiguous(op, {&out, &q, &k_cache, &v_cache, &q_pos, &query_start, &kv_start, &kv_slots, &kv_pos});
    LLAISYS_CHECK_ARG(std::isfinite(scale), op, ": scale must be finite");
    LLAISYS_CHECK_ARG(window >= 0, op, ": window must be >= 0 (0: no sliding window), got ", window);
    const bool on_gpu = out.device() == LLAISYS_DEVICE_NVIDIA;
#ifndef LLAISYS_ENABLE_NVIDIA
    if (on_gpu) no_kernel(op, out);
#endif
    if (out.device() != LLAISYS_DEVICE_CPU && !on_gpu) no_kernel(op, out);
    LLAISYS_CHECK(!(on_gpu && reference), LLAISYS_STATUS_UNSUPPORTED, op, ": the reference kernel runs on the CPU only");
    // The view as the host validates it: the arrays themselves on the CPU, host copies of the
    // (small) index arrays when they are on a GPU.
    cpu::AttentionView view{n_seqs, query_start.data_as<int32_t>(), q_pos.data_as<int64_t>(),
                            kv_start.data_as<int32_t>(), kv_slots.data_as<int32_t>(), kv_pos.data_as<int64_t>()};
#ifdef LLAISYS_ENABLE_NVIDIA
    std::vector<int32_t> qs, ks, slots;  // host copies (GPU only)
    std::vector<int64_t> pos;
    if (on_gpu) {
        qs = host_copy<int32_t>(query_start), ks = host_copy<int32_t>(kv_start), slots = host_copy<int32_t>(kv_slots);
        pos = host_copy<int64_t>(kv_pos);
        view = cpu::AttentionView{n_seqs, qs.data(), nullptr, ks.data(), slots.data(), pos.data()};
    }
#endif
    LLAISYS_CHECK_ARG(size_t(view.kv_start[n_seqs]) == kv_slots.shape()[0], op,
                      ": kv_start must end at the length of kv_slots");
    check_attention_view(view, n, n_slots);
#ifdef LLAISYS_ENABLE_NVIDIA
    if (on_gpu) {
        const cpu::ViewBounds bounds = cpu::view_bounds(n_seqs, view.query_start, view.kv_start);
        const cpu::AttentionView dev{n_seqs, query_start.data_as<int32_t>(), q_pos.data_as<int64_t>(),
                                     kv_start.data_as<int32_t>(), kv_slots.data_as<int32_t>(),
                                     kv_pos.data_as<int64_t>()};
        run_nvidia(out.device_id(), [&](cudaStream_t st) {
            nvidia::paged_attention(out.data(), heads * dv, q.data(), heads * d, out.dtype(), k_cache.data(),
                                    v_cache.data(), k_cache.dtype(), dev, n, bounds.max_q, bounds.max_kv, heads,
                                    kv_heads, d, dv, scale, st, window);
        });
        return;
    }
#endif
    auto *kernel = reference ? cpu::paged_attention_reference : cpu::paged_attention;
    kernel(out.data(), heads * dv, q.data(), heads * d, out.dtype(), k_cache.data(), v_cache.data(), k_cache.dtype(),
           view, heads, kv_heads, d, dv, scale, window);
}

}  // namespace

void paged_attention(Tensor &out, const Tensor &q, const Tensor &k_cache, const Tensor &v_cache, const Tensor &q_pos,
                     const Tensor &query_start, const Tensor &kv_start, const Tensor &kv_slots, const Tensor &kv_pos,
                     float scale, int64_t window) {
    run(out, q, k_cache, v_cache, q_pos, query_start, kv_start, kv_slots, kv_pos, scale, window, false);
}

void paged_attention_reference(Tensor &out, const Tensor &q, const Tensor &k_cache, const Tensor &v_cache,
                               const Tensor &q_pos, const Tensor &query_start, const Tensor &kv_start,
                               const Tensor &kv_slots, const Tensor &kv_pos, float scale, int64_t window) {
    run(out, q, k_cache, v_cache, q_pos, query_start, kv_start, kv_slots, kv_pos, scale, window, true);
}

}  // namespace llaisys::ops
