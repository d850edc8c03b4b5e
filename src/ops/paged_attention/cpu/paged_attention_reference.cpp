// The plain reference of paged attention (the kernel before the blocked one; tests and
// tools/bench_attention.py compare paged_attention against it). Work is split over
// (token, kv head): each task streams the visible K/V rows once and serves all query heads
// of its GQA group, keeping a running max, denominator and weighted sum per head (online
// softmax, one exp per score and a rescale whenever the max grows).
#include "paged_attention_cpu.hpp"

#include "../../../quant/dequant.hpp"
#include "../../../utils/types.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

namespace llaisys::ops::cpu {
namespace {

// One head's cache row of TK values (a float type, or quant::BlockQ8_0 blocks) -> f32 [n].
template <class TK>
void widen_row(float *dst, const TK *row, size_t n) {
    if constexpr (std::is_same_v<TK, quant::BlockQ8_0>) {
        for (size_t b = 0; b < n / quant::kBlock32; b++) quant::dequantize_block(row[b], dst + b * quant::kBlock32);
    } else {
        for (size_t p = 0; p < n; p++) dst[p] = to_f32(row[p]);
    }
}

// Elements of TK per value: a q8_0 row of n values is n / 32 blocks.
template <class TK>
constexpr size_t per_value() {
    return std::is_same_v<TK, quant::BlockQ8_0> ? quant::kBlock32 : 1;
}

template <class TA, class TK>
void attention_impl(TA *out, size_t out_stride, const TA *q, size_t q_stride, const TK *k_cache, const TK *v_cache,
                    const AttentionView &view, size_t heads, size_t kv_heads, size_t d, size_t dv, float scale,
                    int64_t window) {
    const size_t group = heads / kv_heads;
    const size_t n_tokens = size_t(view.query_start[view.n_seqs]);
    std::vector<int32_t> row_of(n_tokens);  // [n_tokens] row of each token
    for (size_t s = 0; s < view.n_seqs; s++) {
        for (int32_t t = view.query_start[s]; t < view.query_start[s + 1]; t++) row_of[size_t(t)] = int32_t(s);
    }
#pragma omp parallel
    {
        std::vector<float> qf(group * d);     // [group, d] scaled queries
        std::vector<float> acc(group * dv);   // [group, dv] weighted sums
        std::vector<float> mx(group), den(group);
        std::vector<float> kf(d), vf(dv);     // one K row, one V row in f32
#pragma omp for schedule(dynamic, 1) collapse(2)
        for (ptrdiff_t t = 0; t < ptrdiff_t(n_tokens); t++) {
            for (ptrdiff_t kh = 0; kh < ptrdiff_t(kv_heads); kh++) {
                size_t s = size_t(row_of[size_t(t)]);
                const VisibleRange vis =
                    visible_range(view.kv_pos + view.kv_start[s], size_t(view.kv_start[s + 1] - view.kv_start[s]),
                                  view.q_pos[t], window);
                const int32_t *slots = view.kv_slots + view.kv_start[s];

                for (size_t g = 0; g < group; g++) {
                    const TA *qh = q + size_t(t) * q_stride + (size_t(kh) * group + g) * d;
                    for (size_t p = 0; p < d; p++) qf[g * d + p] = to_f32(qh[p]) * scale;
                }
                std::fill(acc.begin(), acc.end(), 0.0f);
                std::fill(mx.begin(), mx.end(), -std::numeric_limits<float>::infinity());
                std::fill(den.begin(), den.end(), 0.0f);

                for (size_t j = vis.first; j < vis.end; j++) {
                    size_t slot = size_t(slots[j]);
                    const TK *kr = k_cache + (slot * kv_heads + size_t(kh)) * d / per_value<TK>();
                    const TK *vr = v_cache + (slot * kv_heads + size_t(kh)) * dv / per_value<TK>();
                    widen_row(kf.data(), kr, d);
                    widen_row(vf.data(), vr, dv);
                    for (size_t g = 0; g < group; g++) {
                        const float *qg = qf.data() + g * d;
                        float score = 0.0f;
#pragma omp simd reduction(+ : score)
                        for (size_t p = 0; p < d; p++) score += qg[p] * kf[p];
                        float *a = acc.data() + g * dv;
                        if (score > mx[g]) {  // rescale what was summed under the old max
                            float c = std::exp(mx[g] - score);
                            den[g] *= c;
                            for (size_t p = 0; p < dv; p++) a[p] *= c;
                            mx[g] = score;
                        }
                        float w = std::exp(score - mx[g]);
                        den[g] += w;
#pragma omp simd
                        for (size_t p = 0; p < dv; p++) a[p] += w * vf[p];
                    }
                }
                for (size_t g = 0; g < group; g++) {
                    TA *o = out + size_t(t) * out_stride + (size_t(kh) * group + g) * dv;
                    float inv = den[g] > 0.0f ? 1.0f / den[g] : 0.0f;
                    for (size_t p = 0; p < dv; p++) o[p] = from_f32<TA>(acc[g * dv + p] * inv);
                }
            }
        }
    }
}

}  // namespace

void paged_attention_reference(std::byte *out, size_t out_stride, const std::byte *q, size_t q_stride,
                               llaisysDataType_t act, const std::byte *k_cache, const std::byte *v_cache,
                               llaisysDataType_t kvdt, const AttentionView &view, size_t heads, size_t kv_heads,
                               size_t d, size_t dv, float scale, int64_t window) {
    dispatch_float(act, [&](auto atag) {
        using TA = decltype(atag);
        check_kv_dtype(kvdt, d, dv);
        auto run = [&](auto ktag) {
            using TK = decltype(ktag);
            attention_impl(reinterpret_cast<TA *>(out), out_stride, reinterpret_cast<const TA *>(q), q_stride,
                           reinterpret_cast<const TK *>(k_cache), reinterpret_cast<const TK *>(v_cache), view, heads,
                           kv_heads, d, dv, scale, window);
        };
        if (kvdt == LLAISYS_DTYPE_Q8_0) run(quant::BlockQ8_0{});
        else dispatch_float(kvdt, run);
    });
}

}  // namespace llaisys::ops::cpu
