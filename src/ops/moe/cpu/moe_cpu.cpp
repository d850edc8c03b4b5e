// Mixture-of-experts routing kernels (moe_cpu.hpp). The arrays are small ([n, E], [n k]) next to
// the experts' weights; rows are parallel over tokens where there are enough of them.
#include "moe_cpu.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace llaisys::ops::cpu {

void moe_topk(int32_t *ids, float *weights, const float *logits, size_t n, size_t E, size_t k, bool norm) {
#pragma omp parallel if (n >= 64)
    {
        std::vector<float> p(E);        // [E] softmax of one row
        std::vector<int32_t> order(E);  // [E] expert indices, the first k sorted
#pragma omp for schedule(static)
        for (ptrdiff_t t = 0; t < ptrdiff_t(n); t++) {
            const float *row = logits + size_t(t) * E;
            float mx = row[0];
            for (size_t e = 1; e < E; e++) mx = std::max(mx, row[e]);
            double sum = 0;
            for (size_t e = 0; e < E; e++) {
                p[e] = std::exp(row[e] - mx);
                sum += p[e];
            }
            for (size_t e = 0; e < E; e++) {
                p[e] = float(p[e] / sum);
                order[e] = int32_t(e);
            }
            // larger probability first; equal ones by index. A NaN (from NaN logits) ranks as -1,
            // so the order stays a strict weak one (std::partial_sort needs that) and NaN flows on.
            auto key = [&](int32_t e) { return p[size_t(e)] == p[size_t(e)] ? p[size_t(e)] : -1.0f; };
            std::partial_sort(order.begin(), order.begin() + ptrdiff_t(k), order.end(), [&](int32_t a, int32_t b) {
                return key(a) > key(b) || (key(a) == key(b) && a < b);
            });
            float chosen = 0;
            for (size_t j = 0; j < k; j++) chosen += p[size_t(order[j])];
            const float scale = norm ? 1.0f / chosen : 1.0f;
            for (size_t j = 0; j < k; j++) {
                ids[size_t(t) * k + j] = order[j];
                weights[size_t(t) * k + j] = p[size_t(order[j])] * scale;
            }
        }
    }
}

void moe_group(int32_t *offsets, int32_t *row_of, int32_t *pos, const int32_t *ids, size_t n, size_t E, size_t k) {
    const size_t nk = n * k;
    std::memset(offsets, 0, (E + 1) * sizeof(int32_t));
    for (size_t i = 0; i < nk; i++) offsets[size_t(ids[i]) + 1]++;
    for (size_t e = 0; e < E; e++) offsets[e + 1] += offsets[e];
    std::vector<int32_t> next(offsets, offsets + E);  // [E] the next free position of each expert
    for (size_t i = 0; i < nk; i++) {  // pairs in token order: stable within each expert
        const int32_t at = next[size_t(ids[i])]++;
        pos[i] = at;
        row_of[at] = int32_t(i / k);
    }
}

void moe_gather(float *xg, const float *x, const int32_t *row_of, size_t nk, size_t d) {
#pragma omp parallel for schedule(static) if (nk * d >= 65536)
    for (ptrdiff_t i = 0; i < ptrdiff_t(nk); i++) {
        std::memcpy(xg + size_t(i) * d, x + size_t(row_of[i]) * d, d * sizeof(float));
    }
}

void moe_combine(float *out, const float *y, const float *weights, const int32_t *pos, size_t n, size_t k, size_t d) {
#pragma omp parallel for schedule(static) if (n * k * d >= 65536)
    for (ptrdiff_t t = 0; t < ptrdiff_t(n); t++) {
        float *o = out + size_t(t) * d;
        for (size_t c = 0; c < d; c++) o[c] = 0.0f;
        for (size_t j = 0; j < k; j++) {
            const float w = weights[size_t(t) * k + j];
            const float *r = y + size_t(pos[size_t(t) * k + j]) * d;
            for (size_t c = 0; c < d; c++) o[c] += w * r[c];
        }
    }
}

void add_sigmoid_gated(float *out, const float *y, const float *gate, size_t n, size_t d) {
#pragma omp parallel for schedule(static) if (n * d >= 65536)
    for (ptrdiff_t t = 0; t < ptrdiff_t(n); t++) {
        const float g = 1.0f / (1.0f + std::exp(-gate[t]));
        float *o = out + size_t(t) * d;
        const float *r = y + size_t(t) * d;
        for (size_t c = 0; c < d; c++) o[c] += g * r[c];
    }
}

}  // namespace llaisys::ops::cpu
