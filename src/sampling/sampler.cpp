#include "sampler.hpp"

#include "row.hpp"

#include "../ops/cpu_simd/row_kernels.hpp"
#include "../utils/error.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

namespace llaisys::sampling {
namespace {

uint64_t splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

// log_softmax of the raw logits: the logprob of `id` is logits[id] - lse.
float log_sum_exp(const float *logits, size_t vocab) {
    float mx = logits[first_argmax(logits, vocab)];
    return mx + float(std::log(ops::cpu::simd::row_kernels().sum_exp(logits, vocab, mx)));
}

// Step 0: every id the mask leaves out gets -inf (whole words at a time; bits past vocab unused).
void apply_mask(std::vector<float> &w, const uint32_t *mask, size_t vocab) {
    const float ninf = -std::numeric_limits<float>::infinity();
    for (size_t word = 0; word * 32 < vocab; word++) {
        const uint32_t bits = mask[word];
        if (bits == 0xffffffffu) continue;
        const size_t end = std::min(vocab, word * 32 + 32);
        for (size_t id = word * 32; id < end; id++) {
            if (!((bits >> (id - word * 32)) & 1u)) w[id] = ninf;
        }
    }
}

// Steps 1-3 (pen: penalties(p, pen) already taken).
void apply_penalties(std::vector<float> &w, const llaisysSamplingParams_t &p, const Penalties &pen) {
    for (size_t i = 0; i < p.n_bias; i++) w[size_t(p.bias_ids[i])] += p.bias_values[i];
    for (int64_t id : pen.repeated) {
        float &l = w[size_t(id)];
        l = l > 0.0f ? l / p.repetition_penalty : l * p.repetition_penalty;
    }
    for (size_t i = 0; i < pen.counted.size(); i++) w[size_t(pen.counted[i])] -= pen.subtract[i];
}

// Step 9: the draw over filter_row's candidates. Returns the chosen id.
int64_t draw(RowScratch &s, size_t vocab, const llaisysSamplingParams_t &p) {
    size_t keep = 0;
    const double kept_total = filter_row(s, vocab, p, keep);
    double u = uniform(p.seed, p.step) * kept_total;
    double acc = 0.0;
    size_t last_nonzero = 0;
    for (size_t i = 0; i < keep; i++) {
        if (s.prob[i] <= 0.0f) continue;
        last_nonzero = i;
        acc += s.prob[i];
        if (u < acc) return s.cand[i];
    }
    return s.cand[last_nonzero];  // rounding left u at the very top
}

}  // namespace

// Vectorised: greedy rows (and every row's NaN check) scan the whole vocabulary.
size_t first_argmax(const float *v, size_t n) { return ops::cpu::simd::row_kernels().argmax(v, n); }

size_t prepare_row(RowScratch &s, const float *row, size_t vocab, const llaisysSamplingParams_t &p) {
    penalties(p, s.pen);
    s.logits = row;
    // A plain row (greedy decode's, most sampled ones) is read where it is, not copied (a 152k
    // vocabulary is 608 KB a row a step).
    if (p.allowed_mask || p.n_bias || !s.pen.repeated.empty() || !s.pen.counted.empty()) {
        s.w.assign(row, row + vocab);
        if (p.allowed_mask) apply_mask(s.w, p.allowed_mask, vocab);  // step 0
        apply_penalties(s.w, p, s.pen);
        s.logits = s.w.data();
    }
    // Step 4, and the NaN rule for every row: the argmax is a NaN iff the row has one.
    size_t top = first_argmax(s.logits, vocab);
    // every allowed logit is -inf: the argmax (index 0) may be masked; take the first allowed
    if (p.allowed_mask && s.logits[top] == -std::numeric_limits<float>::infinity()) top = first_allowed(p, vocab);
    return top;
}

double filter_row(RowScratch &s, size_t vocab, const llaisysSamplingParams_t &p, size_t &keep) {
    const float *w = s.logits;
    std::vector<int32_t> &cand = s.cand;
    float inv_t = 1.0f / p.temperature;
    cand.resize(vocab);
    std::iota(cand.begin(), cand.end(), 0);
    auto by_logit = [&](int32_t a, int32_t b) { return w[size_t(a)] > w[size_t(b)] || (w[size_t(a)] == w[size_t(b)] && a < b); };
    size_t k = (p.top_k > 0 && size_t(p.top_k) < vocab) ? size_t(p.top_k) : vocab;
    if (k < vocab) {
        std::nth_element(cand.begin(), cand.begin() + ptrdiff_t(k - 1), cand.end(), by_logit);
        float kth = w[size_t(cand[k - 1])];
        // keep every token tied with the k-th value, in id order (the order the draw walks
        // when top-p is off; the GPU sampler walks the same order)
        cand.clear();
        for (size_t i = 0; i < vocab; i++) {
            if (w[i] >= kth) cand.push_back(int32_t(i));
        }
    }
    bool need_sorted = p.top_p < 1.0f;
    if (need_sorted) std::sort(cand.begin(), cand.end(), by_logit);
    // softmax over the candidates at temperature T
    float mx = -std::numeric_limits<float>::infinity();
    for (int32_t id : cand) mx = std::max(mx, w[size_t(id)]);
    s.prob.resize(cand.size());
    double total = 0.0;
    for (size_t i = 0; i < cand.size(); i++) {
        s.prob[i] = std::exp((w[size_t(cand[i])] - mx) * inv_t);
        total += s.prob[i];
    }
    keep = cand.size();
    if (need_sorted) {
        double mass = 0.0, target = double(p.top_p) * total;
        for (size_t i = 0; i < cand.size(); i++) {
            mass += s.prob[i];
            if (mass >= target) {
                keep = i + 1;
                break;
            }
        }
    }
    // min-p: the most likely candidate has probability proportional to exp(0) = 1
    float floor_p = p.min_p;  // relative to the max, whose unnormalised weight is 1
    double kept_total = 0.0;
    for (size_t i = 0; i < keep; i++) {
        if (s.prob[i] < floor_p) s.prob[i] = 0.0f;
        kept_total += s.prob[i];
    }
    return kept_total;
}

namespace {

// The n largest raw logits with their logprobs, in the argmax rule's order: NaNs first (by
// id), then larger logits first, ties by smaller id (a strict weak order even with NaNs).
void top_logprobs(const float *logits, size_t vocab, float lse, int32_t n, int64_t *ids, float *lps,
                  std::vector<int32_t> &cand) {
    cand.resize(vocab);
    std::iota(cand.begin(), cand.end(), 0);
    auto by_logit = [&](int32_t a, int32_t b) {
        const float la = logits[a], lb = logits[b];
        const bool na = std::isnan(la), nb = std::isnan(lb);
        if (na || nb) return na && (!nb || a < b);
        return la > lb || (la == lb && a < b);
    };
    std::partial_sort(cand.begin(), cand.begin() + n, cand.end(), by_logit);
    for (int32_t i = 0; i < n; i++) {
        ids[i] = cand[size_t(i)];
        lps[i] = logits[cand[size_t(i)]] - lse;
    }
}

}  // namespace

void penalties(const llaisysSamplingParams_t &p, Penalties &out) {
    out.repeated.clear();
    out.counted.clear();
    out.subtract.clear();
    if (p.repetition_penalty != 1.0f && (p.n_prompt + p.n_output) > 0) {
        out.repeated.assign(p.prompt_tokens, p.prompt_tokens + p.n_prompt);
        out.repeated.insert(out.repeated.end(), p.output_tokens, p.output_tokens + p.n_output);
        std::sort(out.repeated.begin(), out.repeated.end());
        out.repeated.erase(std::unique(out.repeated.begin(), out.repeated.end()), out.repeated.end());
    }
    if ((p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) && p.n_output > 0) {
        std::vector<int64_t> ids(p.output_tokens, p.output_tokens + p.n_output);
        std::sort(ids.begin(), ids.end());
        for (size_t i = 0; i < ids.size();) {
            size_t j = i;
            while (j < ids.size() && ids[j] == ids[i]) j++;
            out.counted.push_back(ids[i]);
            out.subtract.push_back(p.presence_penalty + p.frequency_penalty * float(j - i));
            i = j;
        }
    }
}

double uniform(uint64_t seed, uint64_t step) {
    uint64_t x = splitmix64(seed ^ splitmix64(step ^ 0x5851f42d4c957f2dull));
    return double(x >> 11) * (1.0 / 9007199254740992.0);  // 53 random bits
}

size_t first_allowed(const llaisysSamplingParams_t &p, size_t vocab) {
    if (p.allowed_mask == nullptr) return 0;
    for (size_t word = 0; word * 32 < vocab; word++) {
        uint32_t bits = p.allowed_mask[word];
        if (word * 32 + 32 > vocab) bits &= (1u << (vocab - word * 32)) - 1u;  // bits past vocab
        if (bits) return word * 32 + size_t(__builtin_ctz(bits));
    }
    return vocab;
}

bool all_plain_greedy(const llaisysSamplingParams_t *params, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const llaisysSamplingParams_t &p = params[i];
        if (p.temperature != 0.0f || p.n_bias || p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f ||
            p.frequency_penalty != 0.0f || p.n_logprobs)
            return false;
    }
    return true;
}

void check_params(const llaisysSamplingParams_t &p, size_t vocab, size_t top_capacity) {
    LLAISYS_CHECK_ARG(std::isfinite(p.temperature) && p.temperature >= 0.0f, "temperature must be >= 0, got ",
                      p.temperature);
    // draw() scales by 1/temperature: a subnormal temperature would make that infinite (NaN weights)
    LLAISYS_CHECK_ARG(p.temperature == 0.0f || std::isfinite(1.0f / p.temperature),
                      "temperature must be 0 (greedy) or large enough that 1/temperature is finite, got ",
                      p.temperature);
    LLAISYS_CHECK_ARG(std::isfinite(p.top_p) && p.top_p > 0.0f && p.top_p <= 1.0f, "top_p must be in (0, 1], got ",
                      p.top_p);
    LLAISYS_CHECK_ARG(std::isfinite(p.min_p) && p.min_p >= 0.0f && p.min_p <= 1.0f, "min_p must be in [0, 1], got ",
                      p.min_p);
    LLAISYS_CHECK_ARG(std::isfinite(p.repetition_penalty) && p.repetition_penalty > 0.0f,
                      "repetition_penalty must be > 0, got ", p.repetition_penalty);
    LLAISYS_CHECK_ARG(std::isfinite(p.presence_penalty) && std::isfinite(p.frequency_penalty),
                      "presence and frequency penalties must be finite");
    LLAISYS_CHECK_ARG(p.n_logprobs >= 0, "n_logprobs must be >= 0, got ", p.n_logprobs);
    LLAISYS_CHECK(size_t(p.n_logprobs) <= top_capacity && size_t(p.n_logprobs) <= vocab,
                  LLAISYS_STATUS_BUFFER_TOO_SMALL, "n_logprobs ", p.n_logprobs,
                  " exceeds the output capacity of ", top_capacity, " per row");
    auto check_ids = [&](const int64_t *ids, size_t n, const char *what) {
        LLAISYS_CHECK_ARG(n == 0 || ids != nullptr, what, " is NULL with ", n, " entries");
        for (size_t i = 0; i < n; i++) {
            LLAISYS_CHECK_ARG(ids[i] >= 0 && size_t(ids[i]) < vocab, what, "[", i, "] = ", ids[i],
                              " is outside the vocabulary [0, ", vocab, ")");
        }
    };
    check_ids(p.prompt_tokens, p.n_prompt, "prompt_tokens");
    check_ids(p.output_tokens, p.n_output, "output_tokens");
    check_ids(p.bias_ids, p.n_bias, "bias_ids");
    LLAISYS_CHECK_ARG(p.n_bias == 0 || p.bias_values != nullptr, "bias_values is NULL");
    if (p.allowed_mask == nullptr) {
        LLAISYS_CHECK_ARG(p.mask_words == 0, "allowed_mask is NULL with mask_words = ", p.mask_words);
    } else {
        LLAISYS_CHECK_ARG(p.mask_words == (vocab + 31) / 32, "mask_words must be (vocab + 31) / 32 = ",
                          (vocab + 31) / 32, " for vocab ", vocab, ", got ", p.mask_words);
        LLAISYS_CHECK_ARG(first_allowed(p, vocab) < vocab, "allowed_mask allows no token id in [0, ", vocab, ")");
    }
    for (size_t i = 0; i < p.n_bias; i++) {
        LLAISYS_CHECK_ARG(std::isfinite(p.bias_values[i]), "bias_values[", i, "] is not finite");
    }
}

void check_output(const llaisysSampleOutput_t &out, size_t n_rows) {
    LLAISYS_CHECK_ARG(n_rows == 0 || out.token_ids != nullptr, "out.token_ids is NULL");
    LLAISYS_CHECK_ARG(out.top_capacity == 0 || (out.top_ids != nullptr && out.top_logprobs != nullptr),
                      "out.top_capacity is ", out.top_capacity, " but out.top_ids or out.top_logprobs is NULL");
}

void sample(const float *logits, size_t n_rows, size_t vocab, const llaisysSamplingParams_t *params,
            const llaisysSampleOutput_t &out) {
#pragma omp parallel if (n_rows > 1)
    {
        RowScratch s;
#pragma omp for schedule(dynamic, 1)
        for (ptrdiff_t r = 0; r < ptrdiff_t(n_rows); r++) {
            const llaisysSamplingParams_t &p = params[r];
            const float *row = logits + size_t(r) * vocab;
            // steps 0-4; a NaN argmax (the row has one) is the token whatever the temperature
            const int64_t top = int64_t(prepare_row(s, row, vocab, p));
            // The same for a row whose largest value is +inf or which is all -inf: softmax has no
            // value there (inf - inf), so the draw is the argmax too (first +inf; index 0).
            const bool nan_row = std::isnan(s.logits[size_t(top)]);
            const bool no_softmax = !std::isfinite(s.logits[size_t(top)]);
            int64_t chosen = p.temperature == 0.0f || no_softmax ? top : draw(s, vocab, p);
            out.token_ids[r] = chosen;
            bool want_lp = out.logprobs != nullptr || (p.n_logprobs > 0 && out.top_ids != nullptr);
            if (!want_lp) continue;
            // a NaN row's logprobs are NaN (the raw row's log-sum-exp is NaN when it has the
            // NaN; the explicit NaN covers one that steps 1-3 made, e.g. inf - inf)
            const float nan = std::numeric_limits<float>::quiet_NaN();
            float lse = nan_row ? nan : log_sum_exp(row, vocab);
            if (out.logprobs) out.logprobs[r] = row[chosen] - lse;
            if (p.n_logprobs > 0 && out.top_ids && out.top_logprobs) {
                top_logprobs(row, vocab, lse, p.n_logprobs, out.top_ids + size_t(r) * out.top_capacity,
                             out.top_logprobs + size_t(r) * out.top_capacity, s.cand);
            }
        }
    }
}

}  // namespace llaisys::sampling
