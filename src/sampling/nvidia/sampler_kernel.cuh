// The GPU sampler's kernel: one block per row runs steps 1-9 of include/llaisys/sampler.h
// the way src/sampling/sampler.cpp does, phase by phase.
#pragma once

#include "block_ops.cuh"

#include <cstdint>

namespace llaisys::sampling::nvidia {

// One row's parameters as the host prepared them (in the packed input buffer).
struct RowDesc {
    double u;              // sampling::uniform(seed, step)
    float inv_t;           // 1.0f / temperature, computed on the host as the CPU does
    float top_p;           // (0, 1]; 1: off
    float min_p;           // [0, 1]; 0: off
    float repetition;      // repetition_penalty
    uint32_t greedy;       // temperature == 0
    uint32_t k;            // top-k in effect: vocab when off
    uint32_t n_top;        // top-N raw logprobs to write (0: none)
    uint32_t want_lse;     // the raw log-sum-exp is needed (chosen logprob or top-N)
    uint32_t bias[2];      // [begin, end) of the packed lists: logit bias, stable-sorted by id
    uint32_t repeated[2];  // ids the repetition penalty applies to (sorted, unique)
    uint32_t counted[2];   // output ids (sorted, unique), their presence/frequency subtrahend
    uint32_t touched[2];   // ids steps 1-3 change (sorted, unique); their raw logits land here
    uint32_t has_mask;     // step 0 applies: the row has an allowed mask
    uint32_t first_allowed;  // its first allowed id (the token when every allowed logit is -inf)
    uint64_t mask_off;     // word offset of its mask in KernelArgs::masks ([vocab / 32 rounded up] words)
};

struct KernelArgs {
    float *logits;          // [n_rows, vocab], changed in place by steps 1-3
    uint32_t vocab;
    uint32_t row0;          // first row of this launch; block b samples row row0 + b
    const RowDesc *rows;    // [n_rows]
    const int32_t *list_ids;  // [n_list] ids of the packed lists
    float *list_vals;       // [n_list] bias values, subtrahends; saved raw logits of `touched`
    uint32_t *scratch_keys;  // [blocks of a launch, vocab] candidate keys, then probabilities;
    int32_t *scratch_ids;    // [blocks of a launch, vocab] candidate ids; NULL if no row needs them
    int64_t *token;         // [n_rows] sampled ids
    float *logprob;         // [n_rows] raw logprob of each sampled id (rows with want_lse)
    int64_t *top_ids;       // [n_rows, n_top_max]
    float *top_logprobs;    // [n_rows, n_top_max]
    uint32_t n_top_max;
    const uint32_t *masks;  // [rows with a mask, (vocab + 31) / 32] allowed-id bits; NULL if none
};

// log_softmax's normaliser of the raw row, as the CPU's log_sum_exp: float max, exp of the
// float difference in double, mx + float(log(sum)). The sum's order differs (a tree).
__device__ float log_sum_exp(const float *w, uint32_t n, Shared &sh) {
    const float mx = block_max(w, n, sh);
    double s = 0.0;
    for_each_strided(w, n, [&](float v, uint32_t) { s += exp(double(__fsub_rn(v, mx))); });
    s = block_reduce(s, sh.dbuf, [](double a, double b) { return a + b; });
    return __fadd_rn(mx, float(log(s)));
}

// The CPU's top_logprobs: the n_top largest raw logits (ties by smaller id), descending.
// Select the n_top-th key; take every larger key, then the first `rank` keys equal to it in
// id order; sort those n_top.
__device__ void top_logprobs(const float *w, uint32_t n, float lse, uint32_t n_top, uint32_t *keys, int32_t *ids,
                             int64_t *out_ids, float *out_lps, Shared &sh) {
    auto key_at = [w](uint32_t i) { return key_of(w[i]); };
    uint32_t rank = 0;
    const uint32_t kth = select_kth(n, n_top, key_at, sh, &rank);
    const uint32_t n_greater = n_top - rank;
    compact(n, [&](uint32_t i) { return key_at(i) > kth; }, key_at, keys, ids, n_greater, sh);
    compact(n, [&](uint32_t i) { return key_at(i) == kth; }, key_at, keys + n_greater, ids + n_greater, rank, sh);
    sort_candidates(keys, ids, n_top, sh);
    for (uint32_t i = threadIdx.x; i < n_top; i += kThreads) {
        out_ids[i] = ids[i];
        out_lps[i] = __fsub_rn(float_of(keys[i]), lse);  // float_of(key_of(x)) == x but for -0
    }
    __syncthreads();
}

// Step 0 on w in place: ids the mask leaves out become -inf.
__device__ void apply_mask(float *w, uint32_t n, const uint32_t *mask) {
    for (uint32_t i = threadIdx.x; i < n; i += kThreads) {
        if (!((mask[i / 32] >> (i % 32)) & 1u)) w[i] = -INFINITY;
    }
    __syncthreads();
}

// Steps 1-3 on w in place, with the CPU's float operations (no contraction into FMAs).
__device__ void apply_penalties(float *w, const RowDesc &d, const int32_t *ids, const float *vals) {
    // 1. bias: equal ids are adjacent in the caller's order; the first of each run adds them all
    for (uint32_t j = d.bias[0] + threadIdx.x; j < d.bias[1]; j += kThreads) {
        if (j > d.bias[0] && ids[j - 1] == ids[j]) continue;
        float l = w[ids[j]];
        for (uint32_t q = j; q < d.bias[1] && ids[q] == ids[j]; q++) l = __fadd_rn(l, vals[q]);
        w[ids[j]] = l;
    }
    __syncthreads();
    // 2. repetition penalty over unique ids
    for (uint32_t j = d.repeated[0] + threadIdx.x; j < d.repeated[1]; j += kThreads) {
        float l = w[ids[j]];
        w[ids[j]] = l > 0.0f ? __fdiv_rn(l, d.repetition) : __fmul_rn(l, d.repetition);
    }
    __syncthreads();
    // 3. presence / frequency: the subtrahend was computed on the host by sampling::penalties
    for (uint32_t j = d.counted[0] + threadIdx.x; j < d.counted[1]; j += kThreads) {
        w[ids[j]] = __fsub_rn(w[ids[j]], vals[j]);
    }
    __syncthreads();
}

// Candidates in the order the CPU's draw walks them, their probabilities in `keys`:
// top-p sorts by logit (ties by id), otherwise id order. Returns the chosen token.
struct DrawCtx {
    const float *w;  // [vocab] logits after steps 1-3
    uint32_t n;      // vocab
    float mx;        // max of w: the max is a candidate whatever the filters
    float inv_t;
    float min_p;
    bool top_k;       // top-k is on
    uint32_t floor;   // candidates have key_of(w) >= floor (top-k's k-th key; 0: all)
    uint32_t n_cand;  // how many
    uint32_t *keys;   // [vocab] scratch
    int32_t *ids;     // [vocab] scratch
    // The CPU's probability: exp of the float (l - mx) * inv_t. The CPU calls expf; here the
    // double exp rounded to float, the correctly rounded value that glibc's expf returns but
    // in rare near-halfway cases.
    __device__ float prob(float f) const { return float(exp(double(__fmul_rn(__fsub_rn(f, mx), inv_t)))); }
};

__device__ uint32_t draw_sorted(const DrawCtx &c, const RowDesc &d, Shared &sh) {
    // Up to kExact candidates: sort them all and sum in the CPU's order. Otherwise the total is
    // a tree sum, and only the prefix down to a threshold key theta whose mass exceeds the
    // target (with a margin for the approximate expf of the search) is gathered and sorted.
    const bool exact = c.n_cand <= kExact;
    uint32_t theta = c.floor;
    double target = 0.0;
    if (!exact) {
        double s = 0.0;
        for (uint32_t i = threadIdx.x; i < c.n; i += kThreads) {
            float f = c.w[i];
            if (key_of(f) >= c.floor) s += double(c.prob(f));
        }
        const double total = block_reduce(s, sh.dbuf, [](double a, double b) { return a + b; });
        target = double(d.top_p) * total;
        const float mx = c.mx, inv_t = c.inv_t;
        auto approx = [mx, inv_t](float f) { return expf(__fmul_rn(__fsub_rn(f, mx), inv_t)); };
        theta = max(theta, select_mass(c.w, c.n, c.floor, approx, target * (1.0 + 1e-5), sh));
    }
    const float *w = c.w;
    auto key_at = [w](uint32_t i) { return key_of(w[i]); };
    const uint32_t n_s = compact(c.n, [&](uint32_t i) { return key_at(i) >= theta; }, key_at, c.keys, c.ids, c.n, sh);
    sort_candidates(c.keys, c.ids, n_s, sh);
    for (uint32_t i = threadIdx.x; i < n_s; i += kThreads) c.keys[i] = __float_as_uint(c.prob(float_of(c.keys[i])));
    __syncthreads();
    uint32_t *keys = c.keys;
    auto p = [keys](uint32_t i) { return __uint_as_float(keys[i]); };
    // 7. top-p: the smallest prefix whose mass >= top_p * total (all of it if rounding says none)
    const Crossing cut = exact ? first_crossing(n_s, p, double(d.top_p), true, false, sh)
                               : first_crossing(n_s, p, target, false, false, sh);
    const uint32_t keep = cut.index < n_s ? cut.index + 1 : n_s;
    // 8. min-p: the max candidate's unnormalised probability is exp(0) = 1
    for (uint32_t i = threadIdx.x; i < keep; i += kThreads) {
        if (p(i) < c.min_p) keys[i] = __float_as_uint(0.0f);
    }
    __syncthreads();
    // 9. draw: u * kept_total against the running sum
    const Crossing hit = first_crossing(keep, p, d.u, true, true, sh);
    const uint32_t at = hit.index < keep ? hit.index : last_positive(keep, p, sh);
    return uint32_t(c.ids[at]);
}

__device__ uint32_t draw_id_order(const DrawCtx &c, const RowDesc &d, Shared &sh) {
    if (c.top_k && c.n_cand <= kExact) {
        // top-k's few candidates, gathered in id order: the CPU's sums exactly
        const float *w = c.w;
        auto key_at = [w](uint32_t i) { return key_of(w[i]); };
        const uint32_t floor = c.floor;
        compact(c.n, [&](uint32_t i) { return key_at(i) >= floor; }, key_at, c.keys, c.ids, c.n_cand, sh);
        for (uint32_t i = threadIdx.x; i < c.n_cand; i += kThreads) {
            float v = c.prob(float_of(c.keys[i]));
            c.keys[i] = __float_as_uint(v < c.min_p ? 0.0f : v);
        }
        __syncthreads();
        uint32_t *keys = c.keys;
        auto p = [keys](uint32_t i) { return __uint_as_float(keys[i]); };
        const Crossing hit = first_crossing(c.n_cand, p, d.u, true, true, sh);
        const uint32_t at = hit.index < c.n_cand ? hit.index : last_positive(c.n_cand, p, sh);
        return uint32_t(c.ids[at]);
    }
    // the whole vocabulary in id order, probabilities computed where needed
    auto p = [c](uint32_t i) {
        float f = c.w[i];
        if (key_of(f) < c.floor) return 0.0f;
        float v = c.prob(f);
        return v < c.min_p ? 0.0f : v;
    };
    const Crossing hit = first_crossing(c.n, p, d.u, true, true, sh);
    return hit.index < c.n ? hit.index : last_positive(c.n, p, sh);
}

// Steps 5-9.
__device__ uint32_t draw(const float *w, uint32_t n, const RowDesc &d, uint32_t *keys, int32_t *ids, Shared &sh) {
    DrawCtx c{w, n, block_max(w, n, sh), d.inv_t, d.min_p, d.k < n, 0u, n, keys, ids};
    if (c.top_k) {
        auto key_at = [w](uint32_t i) { return key_of(w[i]); };
        uint32_t rank = 0;
        c.floor = select_kth(n, d.k, key_at, sh, &rank);  // ties with the k-th stay
        const uint32_t floor = c.floor;
        c.n_cand = block_count(n, [&](uint32_t i) { return key_at(i) >= floor; }, sh);
    }
    return d.top_p < 1.0f ? draw_sorted(c, d, sh) : draw_id_order(c, d, sh);
}

// The raw logit of `id`: saved before steps 1-3 when they touched it, else still in w.
__device__ float raw_logit(const float *w, uint32_t id, const RowDesc &d, const int32_t *ids, const float *vals) {
    uint32_t lo = d.touched[0], hi = d.touched[1];
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (ids[mid] < int32_t(id)) lo = mid + 1;
        else hi = mid;
    }
    return (lo < d.touched[1] && ids[lo] == int32_t(id)) ? vals[lo] : w[id];
}

__global__ void __launch_bounds__(kThreads) sample_rows(KernelArgs a) {
    __shared__ Shared sh;
    const uint32_t row = a.row0 + blockIdx.x;
    const RowDesc d = a.rows[row];
    const uint32_t n = a.vocab;
    float *w = a.logits + size_t(row) * n;
    uint32_t *keys = a.scratch_keys ? a.scratch_keys + size_t(blockIdx.x) * n : nullptr;
    int32_t *ids = a.scratch_ids ? a.scratch_ids + size_t(blockIdx.x) * n : nullptr;

    // Logprobs are of the raw logits: take what they need before steps 1-3 change w.
    const float lse = d.want_lse ? log_sum_exp(w, n, sh) : 0.0f;
    if (d.n_top > 0) {
        top_logprobs(w, n, lse, d.n_top, keys, ids, a.top_ids + size_t(row) * a.n_top_max,
                     a.top_logprobs + size_t(row) * a.n_top_max, sh);
    }
    for (uint32_t j = d.touched[0] + threadIdx.x; j < d.touched[1]; j += kThreads) a.list_vals[j] = w[a.list_ids[j]];
    __syncthreads();

    if (d.has_mask) apply_mask(w, n, a.masks + d.mask_off);  // step 0 (the raw values are taken)
    apply_penalties(w, d, a.list_ids, a.list_vals);  // steps 1-3
    // Step 4, and the NaN rule for every row (include/llaisys/sampler.h): the argmax is a NaN
    // iff the row has one, and then that first NaN is the token whatever the temperature.
    uint32_t top = block_argmax(w, n, sh);
    // every allowed logit is -inf: index 0 may be masked, the CPU takes the first allowed id
    if (d.has_mask && w[top] == -INFINITY) top = d.first_allowed;
    const bool nan_row = isnan(w[top]);  // block-uniform: w is no longer written
    // +inf as the largest value, or a row all -inf: no softmax exists (inf - inf), the draw is the argmax too
    const bool no_softmax = !isfinite(w[top]);
    const uint32_t chosen = d.greedy || no_softmax ? top : draw(w, n, d, keys, ids, sh);  // 5-9

    if (nan_row && d.n_top > 0) {  // a NaN row's logprobs are NaN (also when steps 1-3 made it)
        float *lps = a.top_logprobs + size_t(row) * a.n_top_max;
        for (uint32_t i = threadIdx.x; i < d.n_top; i += kThreads) lps[i] = __uint_as_float(0x7fc00000u);
    }
    if (threadIdx.x == 0) {
        a.token[row] = int64_t(chosen);
        if (d.want_lse) {
            a.logprob[row] = nan_row ? __uint_as_float(0x7fc00000u)
                                     : __fsub_rn(raw_logit(w, chosen, d, a.list_ids, a.list_vals), lse);
        }
    }
}

}  // namespace llaisys::sampling::nvidia
