// Plain reference attention, parallel over (query, head): scores in f32, max-subtracted
// softmax, weighted sum of values. The paged kernel of the model path is checked against it.
#include "self_attention_cpu.hpp"

#include "../../../utils/types.hpp"

#include <cmath>
#include <limits>
#include <vector>

namespace llaisys::ops::cpu {
namespace {

template <class T>
void attention_impl(T *out, const T *q, const T *k, const T *v, size_t q_len, size_t kv_len, size_t heads,
                    size_t kv_heads, size_t d, size_t dv, float scale) {
    size_t group = heads / kv_heads;
#pragma omp parallel
    {
        std::vector<float> qf(d), scores(kv_len), acc(dv);  // [d], [kv_len], [dv]
#pragma omp for schedule(static) collapse(2)
        for (ptrdiff_t i = 0; i < ptrdiff_t(q_len); i++) {
            for (ptrdiff_t h = 0; h < ptrdiff_t(heads); h++) {
                size_t kh = size_t(h) / group;
                size_t last = kv_len - q_len + size_t(i);  // last key this query may see
                const T *qi = q + (size_t(i) * heads + size_t(h)) * d;
                for (size_t p = 0; p < d; p++) qf[p] = to_f32(qi[p]);
                float mx = -std::numeric_limits<float>::infinity();
                for (size_t j = 0; j <= last; j++) {
                    const T *kj = k + (j * kv_heads + kh) * d;
                    float s = 0.0f;
                    for (size_t p = 0; p < d; p++) s += qf[p] * to_f32(kj[p]);
                    scores[j] = s * scale;
                    mx = std::max(mx, scores[j]);
                }
                float sum = 0.0f;
                for (size_t j = 0; j <= last; j++) {
                    scores[j] = std::exp(scores[j] - mx);
                    sum += scores[j];
                }
                std::fill(acc.begin(), acc.end(), 0.0f);
                for (size_t j = 0; j <= last; j++) {
                    const T *vj = v + (j * kv_heads + kh) * dv;
                    float w = scores[j];
                    for (size_t p = 0; p < dv; p++) acc[p] += w * to_f32(vj[p]);
                }
                T *o = out + (size_t(i) * heads + size_t(h)) * dv;
                for (size_t p = 0; p < dv; p++) o[p] = from_f32<T>(acc[p] / sum);
            }
        }
    }
}

}  // namespace

void self_attention(std::byte *out, const std::byte *q, const std::byte *k, const std::byte *v,
                    llaisysDataType_t dtype, size_t q_len, size_t kv_len, size_t heads, size_t kv_heads,
                    size_t d, size_t dv, float scale) {
    dispatch_float(dtype, [&](auto tag) {
        using T = decltype(tag);
        attention_impl(reinterpret_cast<T *>(out), reinterpret_cast<const T *>(q), reinterpret_cast<const T *>(k),
                       reinterpret_cast<const T *>(v), q_len, kv_len, heads, kv_heads, d, dv, scale);
    });
}

}  // namespace llaisys::ops::cpu
