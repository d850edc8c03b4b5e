// Exact greedy argmax over the lm_head without reading all of it: an int8 copy of the weight
// screens the vocabulary, and only the panels that can hold the largest logit are computed.
//
// Decode reads every weight once per step, and the lm_head (vocab x hidden) is 15% of those
// bytes for the 1.5B model and 27% for the 0.5B. A greedy row needs only the index of its
// largest logit. The screen keeps W as int8 with a scale per row (half the bytes of bf16) and
// x as int16; their integer dot products give, for every id i, an estimate A_i and a bound
// B_i with |L_i - A_i| <= B_i, where L_i is the logit exactly as linear_packed computes it
// from the packed weight (the same rounding of x to bf16, its f32 sums):
//
//   B_i = |xb| |e_i| + s_i |q_i| |d| + gamma |xb| |w_i|
//
// with xb the activations the GEMM multiplies (x, or x rounded to bf16), q_i = round(w_i / s_i)
// and e_i = w_i - s_i q_i (the weight's quantisation error), d = xb - t u (the activations'
// int16 quantisation error) and gamma = 4 k 2^-24 covering any order of f32 sums. The largest
// L is then at least M = max_i (A_i - B_i), so it is among the ids with A_i + B_i >= M; their
// panels are computed with linear_packed_panels (bit for bit what the full product gives) and
// the first largest of them is the answer: the id linear_packed + first-index argmax would
// pick, ties included. On the Qwen2 models the candidates are one to a few dozen ids (the
// bound is ~0.8 logit for hidden states of norm ~200).
#pragma once

#include "llaisys.h"
#include "packed.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace llaisys::ops::cpu {

class LogitScreen {
public:
    static constexpr size_t kMaxRows = 8;  // argmax() screens at most this many rows per call

    // The screen of a packed weight, built from the values it holds; `w` must outlive it and
    // keep those values.
    explicit LogitScreen(const PackedWeight &w);

    // ids[r] = the first index of the largest value of x[r] @ W^T as linear_packed(w)
    // computes it, for r < m; logits [m, n] is scratch (only some columns are written).
    // masks: null, or [m] per-row allowed ids, each null (every id) or a bitmap [(n + 31) / 32]
    // (bit id % 32 of word id / 32 allows id; bits at or past n are ignored): ids[r] is then
    // the first index of the largest value among the ids row r allows (the sampler's step 0
    // then greedy, include/llaisys/sampler.h). Rows allowing few panels' ids get those
    // logits computed exactly instead of screened; the others' bounds count allowed ids only.
    // Returns false, with nothing decided, when the screen cannot settle it cheaply: m >
    // kMaxRows, for a screened row x not finite or a row of W not finite, a candidate's
    // logit not finite, too many candidates, or a mask that allows no id below n (the caller
    // then computes every logit and applies the argmax rule of doc/architecture.md, "NaN in
    // argmax": the screen never decides a row that holds a NaN among its candidates).
    bool argmax(int64_t *ids, const float *x, size_t m, float *logits, const uint32_t *const *masks = nullptr) const;

    size_t bytes() const { return (w_.n() + 3) / 4 * 4 * kpad_; }

private:
    // The bounds of the screened rows rows [ms] of x (masks as argmax takes them, indexed by
    // row of x): upper [ms][n] = A_i + B_i, best_lower [ms] = the largest A_i - B_i over each
    // row's allowed ids. False when x or W is not finite.
    bool bounds(float *upper, float *best_lower, const float *x, const size_t *rows, size_t ms,
                const uint32_t *const *masks) const;

    struct Free {
        void operator()(int8_t *p) const;
    };
    const PackedWeight &w_;
    size_t kpad_;                          // k rounded up to 64 (rows are zero-padded)
    std::unique_ptr<int8_t[], Free> q_;    // round(w / scale), blocks of 4 rows (gemm.hpp, kScreenGroup)
    std::vector<float> scale_;             // [n] s_i
    std::vector<float> err_;               // [n] |e_i|, rounded up
    std::vector<float> norm_;              // [n] max(|w_i|, s_i |q_i|), rounded up
    bool finite_ = true;                   // whether every value of W is finite
};

}  // namespace llaisys::ops::cpu
