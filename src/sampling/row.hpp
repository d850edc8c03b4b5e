// One row of the sampler's steps 0-8 (include/llaisys/sampler.h), shared by the draw
// (sampler.cpp) and the explicit distribution (probs.cpp), so that a draw from
// llaisysSampleProbs' probabilities has exactly llaisysSample's law.
#pragma once

#include "sampler.hpp"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace llaisys::sampling {

// Scratch of one thread, reused across rows.
struct RowScratch {
    const float *logits = nullptr;  // [vocab] the row after steps 0-3: the raw row when they change nothing, else w
    std::vector<float> w;       // [vocab] processed logits (steps 0-3), when they change some
    std::vector<int32_t> cand;  // candidate ids, in the order the draw walks them
    std::vector<float> prob;    // [cand] unnormalised weights exp((w - max) / T)
    Penalties pen;              // steps 2-3 as lists
};

// The argmax rule (sampler.h, "NaN"): the first NaN if any, else the first largest value.
size_t first_argmax(const float *v, size_t n);

// Steps 0-4 of the raw row: s.logits is the row they leave (the raw row itself when there is no
// mask, bias or penalty: a plain row is not copied). Returns its argmax (the NaN rule), or the
// first allowed id when the mask leaves only -inf logits.
size_t prepare_row(RowScratch &s, const float *row, size_t vocab, const llaisysSamplingParams_t &p);

// Steps 5-8 on s.logits (temperature, top-k, top-p, min-p): s.cand[0, keep) are the candidates in
// draw order and s.prob[0, keep) their weights (0 where min-p dropped one). Returns their sum.
double filter_row(RowScratch &s, size_t vocab, const llaisysSamplingParams_t &p, size_t &keep);

}  // namespace llaisys::sampling
