// LogitScreen: the int8 copy, the bounds, and the screened argmax (method in logit_screen.hpp).
#include "logit_screen.hpp"

#include "../../../utils/cpu_isa.hpp"
#include "../../../utils/checked.hpp"
#include "../../../utils/error.hpp"
#include "../../../utils/host_alloc.hpp"
#include "../../../utils/types.hpp"
#include "gemm.hpp"
#include "linear_cpu.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace llaisys::ops::cpu {
namespace {

constexpr size_t kChunk = 256;  // rows of W per work item (a multiple of 32: whole blocks and mask words)
static_assert(kChunk % 32 == 0);
constexpr double kMargin = 1.0 / (1 << 18);  // relative slack for the f32 arithmetic of the bounds

// Where element (i, kk) of W sits in the screen's blocks of 4 rows (gemm.hpp, kScreenGroup).
inline size_t screen_offset(size_t i, size_t kk, size_t kpad) {
    return (i / 4) * 4 * kpad + (kk / kScreenGroup) * 4 * kScreenGroup + (i % 4) * kScreenGroup + kk % kScreenGroup;
}

// screen_dots as a plain loop (Isa::Scalar): blocks [b0, b1) of w . u into dots [m][4 (b1 - b0)].
void dots_scalar(int32_t *dots, const int16_t *u, const int8_t *w, size_t m, size_t kpad, size_t b0, size_t b1) {
    const size_t ld = 4 * (b1 - b0);
    for (size_t i = 4 * b0; i < 4 * b1; i++) {
        for (size_t a = 0; a < m; a++) {
            const int16_t *ua = u + a * kpad;
            int32_t s = 0;
            for (size_t kk = 0; kk < kpad; kk++) s += int32_t(w[screen_offset(i, kk, kpad)]) * int32_t(ua[kk]);
            dots[a * ld + (i - 4 * b0)] = s;
        }
    }
}

using DotsFn = void (*)(int32_t *, const int16_t *, const int8_t *, size_t, size_t, size_t, size_t);

DotsFn dots_kernel() {
    Isa isa = active_isa();
    if (isa >= Isa::Avx512) return avx512::screen_dots;
    if (isa >= Isa::Avx2) return avx2::screen_dots;
    return dots_scalar;
}

// A float at least x (x >= 0, finite).
float round_up(double x) {
    float f = float(x);
    return double(f) >= x ? f : std::nextafter(f, std::numeric_limits<float>::infinity());
}

// x as the packed GEMM multiplies it: rounded to bf16 (nearest even, subnormals to zero, as
// vcvtne2ps2bf16 does) for bf16 pair panels, else unchanged.
float gemm_input(float x, bool bf16) {
    if (!bf16) return x;
    if (std::fabs(x) < std::numeric_limits<float>::min()) return 0.0f;
    uint32_t u;
    std::memcpy(&u, &x, 4);
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    std::memcpy(&x, &u, 4);
    return x;
}

// Whether mask (a bitmap, bit id % 32 of word id / 32; null: every id) allows id.
inline bool allows(const uint32_t *mask, size_t id) {
    return mask == nullptr || ((mask[id / 32] >> (id % 32)) & 1u) != 0;
}

// Calls f(id) for each id < n that mask allows, ascending, while f returns true.
template <class F>
void for_allowed(const uint32_t *mask, size_t n, F &&f) {
    for (size_t word = 0; word * 32 < n; word++) {
        uint32_t bits = mask[word];
        if (word * 32 + 32 > n) bits &= (1u << (n - word * 32)) - 1u;  // bits at or past n
        for (; bits; bits &= bits - 1u) {
            if (!f(word * 32 + size_t(__builtin_ctz(bits)))) return;
        }
    }
}

// How many panels of nr ids hold an id that mask allows, counting stops past `limit`.
size_t allowed_panels(const uint32_t *mask, size_t n, size_t nr, size_t limit) {
    size_t count = 0, last = SIZE_MAX;
    for_allowed(mask, n, [&](size_t id) {
        if (id / nr != last) {
            last = id / nr;
            count++;
        }
        return count <= limit;
    });
    return count;
}

// The largest of low [len] (ids r0 .. r0 + len, r0 a multiple of 32) over the ids mask
// allows (null: every id); -inf when it allows none of them.
float max_allowed(const float *low, const uint32_t *mask, size_t r0, size_t len) {
    float best = -std::numeric_limits<float>::infinity();
    for (size_t w = 0; w * 32 < len; w++) {
        const size_t j0 = w * 32, j1 = std::min(len, j0 + 32);
        uint32_t bits = mask ? mask[r0 / 32 + w] : ~0u;
        if (j1 - j0 < 32) bits &= (1u << (j1 - j0)) - 1u;  // ids past len
        if (bits == 0) continue;
        if (bits == (j1 - j0 < 32 ? (1u << (j1 - j0)) - 1u : ~0u)) {
            for (size_t j = j0; j < j1; j++) best = std::max(best, low[j]);
        } else {
            for (; bits; bits &= bits - 1u) best = std::max(best, low[j0 + size_t(__builtin_ctz(bits))]);
        }
    }
    return best;
}

// A masked row whose allowed ids lie in at most this many of the n_panels panels has its
// allowed logits computed exactly instead of screened: an eighth of the panels (bf16) is a
// quarter of the screen's int8 bytes.
constexpr size_t direct_panels(size_t n_panels) { return n_panels / 8; }

}  // namespace

void LogitScreen::Free::operator()(int8_t *p) const { host_free(p); }

LogitScreen::LogitScreen(const PackedWeight &w) : w_(w), kpad_(checked_round_up(w.k(), 64, "logit screen: k")) {
    const size_t n = w.n(), k = w.k(), kpad = kpad_, nr = w.nr();
    LLAISYS_CHECK_ARG(k <= (size_t(1) << 20), "logit screen: k = ", k, " is too large for int32 dot products");
    const size_t bytes = checked_mul(checked_round_up(n, 4, "logit screen: rows"), kpad, "logit screen: bytes");
    q_.reset(static_cast<int8_t *>(host_alloc(bytes)));
    std::memset(q_.get(), 0, bytes);  // the padding of k and of the last block
    scale_.resize(n);
    err_.resize(n);
    norm_.resize(n);
    bool all_finite = true;
#pragma omp parallel reduction(&& : all_finite)
    {
        std::vector<float> row(k);
#pragma omp for schedule(static)
        for (ptrdiff_t p = 0; p < ptrdiff_t(w.n_panels()); p++) {  // a panel's rows share its cache lines
            for (size_t i = size_t(p) * nr; i < std::min(n, size_t(p + 1) * nr); i++) {
                w.row_f32(i, row.data());
                float amax = 0.0f;
                for (size_t kk = 0; kk < k; kk++) {
                    all_finite = all_finite && std::isfinite(row[kk]);
                    amax = std::max(amax, std::fabs(row[kk]));
                }
                const float sc = std::isfinite(amax) ? amax / 127.0f : 0.0f;
                // any integer q is sound (e below is the exact remainder); nearest keeps e small
                const float inv = sc > 0 ? 127.0f / amax : 0.0f;
                double e2 = 0, w2 = 0, q2 = 0;
                for (size_t kk = 0; kk < k; kk++) {
                    const float v = row[kk] * inv;  // |v| <= 127 (rounding aside)
                    const float qv = float(std::clamp(int(v + (v >= 0 ? 0.5f : -0.5f)), -127, 127));
                    q_[screen_offset(i, kk, kpad)] = int8_t(qv);
                    const double e = double(row[kk]) - double(sc) * double(qv);  // exact in double
                    e2 += e * e;
                    w2 += double(row[kk]) * row[kk];
                    q2 += double(qv) * qv;
                }
                scale_[i] = sc;
                err_[i] = round_up(std::sqrt(e2) * (1 + kMargin));
                norm_[i] = round_up(std::max(std::sqrt(w2), double(sc) * std::sqrt(q2)) * (1 + kMargin));
            }
        }
    }
    finite_ = all_finite;
}

bool LogitScreen::bounds(float *upper, float *best_lower, const float *x, const size_t *rows, size_t ms,
                         const uint32_t *const *masks) const {
    const PackedWeight &w = w_;
    if (!finite_) return false;
    const size_t n = w.n(), k = w.k(), kpad = kpad_;
    thread_local std::vector<int16_t> xq_buf;  // [ms][kpad] the screened rows' activations as int16
    xq_buf.assign(ms * kpad, 0);
    int16_t *const xq = xq_buf.data();
    const bool bf16 = w.pairs();
    // The activations as int16, u = round(xb / t), with |u| <= umax so that no int32 sum of
    // k products with |q| <= 127 can overflow.
    const double umax = std::min(32767.0, std::floor(double(INT32_MAX) / (127.0 * double(kpad))));
    float t[kMaxRows], xn[kMaxRows], dn[kMaxRows];
    const uint32_t *mask[kMaxRows];  // [ms] the screened rows' masks (null: every id)
    for (size_t s = 0; s < ms; s++) {
        const float *xa = x + rows[s] * k;
        mask[s] = masks ? masks[rows[s]] : nullptr;
        float amax = 0.0f;
        for (size_t kk = 0; kk < k; kk++) {
            if (!std::isfinite(xa[kk]) || std::fabs(xa[kk]) > 1e30f) return false;
            amax = std::max(amax, std::fabs(gemm_input(xa[kk], bf16)));
        }
        t[s] = amax > 0 ? float(double(amax) / umax) : 0.0f;
        double x2 = 0, d2 = 0;
        for (size_t kk = 0; kk < k; kk++) {
            const float xb = gemm_input(xa[kk], bf16);
            const double uv = t[s] > 0 ? std::clamp(std::nearbyint(double(xb) / t[s]), -umax, umax) : 0.0;
            xq[s * kpad + kk] = int16_t(uv);
            const double d = double(xb) - double(t[s]) * uv;  // exact in double
            x2 += double(xb) * xb;
            d2 += d * d;
        }
        xn[s] = round_up(std::sqrt(x2) * (1 + kMargin));
        dn[s] = round_up(std::sqrt(d2) * (1 + kMargin));
    }
    const float gamma = float(4.0 * double(k) / double(1 << 24));
    std::fill(best_lower, best_lower + ms, -std::numeric_limits<float>::infinity());
    const DotsFn dots_fn = dots_kernel();
    const ptrdiff_t chunks = ptrdiff_t((n + kChunk - 1) / kChunk);
#pragma omp parallel
    {
        float lower[kMaxRows];
        std::fill(lower, lower + ms, -std::numeric_limits<float>::infinity());
        alignas(64) int32_t dots[kMaxRows * kChunk];  // [ms][len rounded up to 4]
        alignas(64) float low[kChunk];                // [len] A_i - B_i of one row
#pragma omp for schedule(static)
        for (ptrdiff_t c = 0; c < chunks; c++) {
            const size_t r0 = size_t(c) * kChunk, r1 = std::min(n, r0 + kChunk), len = r1 - r0;
            const size_t ld = (len + 3) / 4 * 4;
            dots_fn(dots, xq, q_.get(), ms, kpad, r0 / 4, r0 / 4 + ld / 4);
            for (size_t s = 0; s < ms; s++) {
                const float c_err = xn[s], c_norm = dn[s] + gamma * xn[s];
                float *up = upper + s * n;
                for (size_t j = 0; j < len; j++) {
                    const size_t i = r0 + j;
                    const float est = scale_[i] * t[s] * float(dots[s * ld + j]);
                    const float b = (c_err * err_[i] + c_norm * norm_[i]) * float(1 + kMargin) +
                                    float(kMargin) * std::fabs(est) + 1e-30f;
                    up[i] = est + b;
                    low[j] = est - b;
                }
                // the largest logit among the allowed ids is at least every allowed lower bound
                lower[s] = std::max(lower[s], max_allowed(low, mask[s], r0, len));
            }
        }
#pragma omp critical
        for (size_t s = 0; s < ms; s++) best_lower[s] = std::max(best_lower[s], lower[s]);
    }
    return true;
}

bool LogitScreen::argmax(int64_t *ids, const float *x, size_t m, float *logits, const uint32_t *const *masks) const {
    const PackedWeight &w = w_;
    if (m == 0 || m > kMaxRows) return false;
    const size_t n = w.n(), nr = w.nr(), n_panels = w.n_panels();
    // Scratch of the calling thread, kept across calls (the team in bounds() reaches it
    // through plain pointers: inside the parallel region each thread has its own thread_locals).
    thread_local std::vector<float> upper_buf;  // [ms][n] A_i + B_i of the screened rows
    thread_local std::vector<uint32_t> cand;    // candidate ids, by row then ascending
    thread_local std::vector<uint32_t> sel;     // their panels, ascending
    // Phase 1: a row whose mask allows ids in few panels has all its allowed logits computed
    // exactly (direct: cheaper than the screen's pass over W); the other rows are screened.
    size_t rows[kMaxRows], ms = 0;  // [ms] the screened rows
    bool direct[kMaxRows];
    for (size_t a = 0; a < m; a++) {
        const uint32_t *mask = masks ? masks[a] : nullptr;
        direct[a] = mask != nullptr && allowed_panels(mask, n, nr, direct_panels(n_panels)) <= direct_panels(n_panels);
        if (!direct[a]) rows[ms++] = a;
    }
    // Phase 2: the screened rows' bounds.
    float best_lower[kMaxRows];  // [ms]
    upper_buf.resize(ms * n);
    if (ms > 0 && !bounds(upper_buf.data(), best_lower, x, rows, ms, masks)) return false;
    // Phase 3: candidates. A screened row's are its allowed ids whose upper bound reaches its
    // best lower bound; a direct row's are all its allowed ids.
    cand.clear();
    size_t cand_start[kMaxRows + 1] = {};  // row a's candidates are cand[cand_start[a], cand_start[a + 1])
    size_t screened_cand = 0;
    for (size_t a = 0, s = 0; a < m; a++) {
        const uint32_t *mask = masks ? masks[a] : nullptr;
        if (direct[a]) {
            for_allowed(mask, n, [&](size_t id) { return cand.push_back(uint32_t(id)), true; });
        } else {
            const float *up = upper_buf.data() + s * n;
            const float lo = best_lower[s++];
            const size_t before = cand.size();
            for (size_t i = 0; i < n; i++)  // a NaN bound (inf - inf in est +- b) is a candidate too
                if (!(up[i] < lo) && allows(mask, i)) cand.push_back(uint32_t(i));
            screened_cand += cand.size() - before;
            if (screened_cand > n / 16) return false;
        }
        cand_start[a + 1] = cand.size();
        if (cand_start[a + 1] == cand_start[a]) return false;  // a mask that allows no id below n
    }
    // Phase 4: the candidates' panels, computed as the full product computes them.
    sel.clear();
    sel.reserve(cand.size());
    for (uint32_t i : cand) sel.push_back(uint32_t(i / nr));
    std::sort(sel.begin(), sel.end());
    sel.erase(std::unique(sel.begin(), sel.end()), sel.end());
    // past this the screen and rescoring would cost more than all (without a screen pass,
    // half the panels cost what the screen's int8 pass does)
    if (sel.size() > (ms > 0 ? n_panels / 4 : n_panels / 2)) return false;
    linear_packed_panels(logits, x, w, nullptr, m, sel.data(), sel.size());
    // Phase 5: each row's first largest candidate.
    for (size_t a = 0; a < m; a++) {
        const float *la = logits + a * n;
        int64_t best = -1;
        for (size_t c = cand_start[a]; c < cand_start[a + 1]; c++) {  // ascending ids: ties keep the first
            const uint32_t i = cand[c];
            // a NaN or infinite logit: the bounds say nothing then, and the argmax rule (NaN
            // wins; all -inf takes the first allowed id) needs every logit; the caller's full
            // product applies it
            if (!std::isfinite(la[i])) return false;
            if (best < 0 || la[i] > la[best]) best = int64_t(i);
        }
        ids[a] = best;
    }
    return true;
}

}  // namespace llaisys::ops::cpu
