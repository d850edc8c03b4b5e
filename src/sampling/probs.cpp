// The distribution sampler.cpp's draw() samples from, written out per id. It follows the
// same arithmetic step by step (float weights exp((w - max) / T), double sums, the same
// candidate order and tie rules), so a draw from these probabilities has llaisysSample's law.
#include "probs.hpp"

#include "sampler.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

namespace llaisys::sampling {
namespace {

// The argmax rule of sampler.h: the first NaN if any, else the first largest value.
size_t first_argmax(const float *v, size_t n) {
    size_t best = 0;
    for (size_t i = 0; i < n; i++) {
        if (std::isnan(v[i])) return i;
        if (v[i] > v[best]) best = i;
    }
    return best;
}

struct Scratch {
    std::vector<float> w;       // [vocab] processed logits (steps 1-3)
    std::vector<int32_t> cand;  // candidate ids, in draw() order
    std::vector<float> prob;    // [cand] unnormalised weights
    Penalties pen;              // steps 2-3 as lists
};

void apply_penalties(std::vector<float> &w, const llaisysSamplingParams_t &p, Penalties &pen) {
    for (size_t i = 0; i < p.n_bias; i++) w[size_t(p.bias_ids[i])] += p.bias_values[i];
    penalties(p, pen);
    for (int64_t id : pen.repeated) {
        float &l = w[size_t(id)];
        l = l > 0.0f ? l / p.repetition_penalty : l * p.repetition_penalty;
    }
    for (size_t i = 0; i < pen.counted.size(); i++) w[size_t(pen.counted[i])] -= pen.subtract[i];
}

// Steps 5-8 on s.w into out [vocab] (out is zero on entry).
void row_probs(Scratch &s, size_t vocab, const llaisysSamplingParams_t &p, float *out) {
    std::vector<float> &w = s.w;
    std::vector<int32_t> &cand = s.cand;
    const float inv_t = 1.0f / p.temperature;
    cand.resize(vocab);
    std::iota(cand.begin(), cand.end(), 0);
    auto by_logit = [&](int32_t a, int32_t b) { return w[size_t(a)] > w[size_t(b)] || (w[size_t(a)] == w[size_t(b)] && a < b); };
    size_t k = (p.top_k > 0 && size_t(p.top_k) < vocab) ? size_t(p.top_k) : vocab;
    if (k < vocab) {  // top-k: every id tied with the k-th value stays
        std::nth_element(cand.begin(), cand.begin() + ptrdiff_t(k - 1), cand.end(), by_logit);
        const float kth = w[size_t(cand[k - 1])];
        cand.clear();
        for (size_t i = 0; i < vocab; i++) {
            if (w[i] >= kth) cand.push_back(int32_t(i));
        }
    }
    const bool sorted = p.top_p < 1.0f;
    if (sorted) std::sort(cand.begin(), cand.end(), by_logit);
    float mx = -std::numeric_limits<float>::infinity();
    for (int32_t id : cand) mx = std::max(mx, w[size_t(id)]);
    s.prob.resize(cand.size());
    double total = 0.0;
    for (size_t i = 0; i < cand.size(); i++) {
        s.prob[i] = std::exp((w[size_t(cand[i])] - mx) * inv_t);
        total += s.prob[i];
    }
    size_t keep = cand.size();
    if (sorted) {  // top-p: the smallest sorted prefix whose mass reaches top_p
        double mass = 0.0, target = double(p.top_p) * total;
        for (size_t i = 0; i < cand.size(); i++) {
            mass += s.prob[i];
            if (mass >= target) {
                keep = i + 1;
                break;
            }
        }
    }
    double kept_total = 0.0;  // min-p: relative to the most likely candidate's weight 1
    for (size_t i = 0; i < keep; i++) {
        if (s.prob[i] < p.min_p) s.prob[i] = 0.0f;
        kept_total += s.prob[i];
    }
    for (size_t i = 0; i < keep; i++) out[cand[i]] = float(double(s.prob[i]) / kept_total);
}

}  // namespace

void processed_probs(const float *logits, size_t n_rows, size_t vocab, const llaisysSamplingParams_t *params,
                     float *probs) {
#pragma omp parallel if (n_rows > 1)
    {
        Scratch s;
#pragma omp for schedule(dynamic, 1)
        for (ptrdiff_t r = 0; r < ptrdiff_t(n_rows); r++) {
            const llaisysSamplingParams_t &p = params[r];
            const float *row = logits + size_t(r) * vocab;
            float *out = probs + size_t(r) * vocab;  // [vocab]
            std::fill(out, out + vocab, 0.0f);
            s.w.assign(row, row + vocab);
            if (p.allowed_mask) {  // step 0: ids the mask leaves out become -inf
                for (size_t id = 0; id < vocab; id++) {
                    if (!allowed(p, id)) s.w[id] = -std::numeric_limits<float>::infinity();
                }
            }
            apply_penalties(s.w, p, s.pen);
            size_t top = first_argmax(s.w.data(), vocab);
            if (p.allowed_mask && s.w[top] == -std::numeric_limits<float>::infinity()) top = first_allowed(p, vocab);
            if (p.temperature == 0.0f || !std::isfinite(s.w[top])) {  // decided without a draw
                out[top] = 1.0f;
                continue;
            }
            row_probs(s, vocab, p, out);
        }
    }
}

}  // namespace llaisys::sampling
