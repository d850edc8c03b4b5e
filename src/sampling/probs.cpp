// The distribution sampler.cpp's draw() samples from, written out per id: the same steps 0-8
// (row.hpp), so a draw from these probabilities has llaisysSample's law.
#include "probs.hpp"

#include "row.hpp"

#include <algorithm>
#include <cmath>

namespace llaisys::sampling {

void processed_probs(const float *logits, size_t n_rows, size_t vocab, const llaisysSamplingParams_t *params,
                     float *probs) {
#pragma omp parallel if (n_rows > 1)
    {
        RowScratch s;
#pragma omp for schedule(dynamic, 1)
        for (ptrdiff_t r = 0; r < ptrdiff_t(n_rows); r++) {
            const llaisysSamplingParams_t &p = params[r];
            float *out = probs + size_t(r) * vocab;  // [vocab]
            std::fill(out, out + vocab, 0.0f);
            const size_t top = prepare_row(s, logits + size_t(r) * vocab, vocab, p);  // steps 0-4
            if (p.temperature == 0.0f || !std::isfinite(s.logits[top])) {  // decided without a draw
                out[top] = 1.0f;
                continue;
            }
            size_t keep = 0;  // steps 5-8, then each candidate's share of the kept weight
            const double kept_total = filter_row(s, vocab, p, keep);
            for (size_t i = 0; i < keep; i++) out[s.cand[i]] = float(double(s.prob[i]) / kept_total);
        }
    }
}

}  // namespace llaisys::sampling
