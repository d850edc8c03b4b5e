#include "rope_freqs.hpp"

#include "../../utils/error.hpp"

#include <algorithm>
#include <cmath>

namespace llaisys::ops {
namespace {

constexpr double kPi = 3.141592653589793;

bool finite_pos(float x) { return std::isfinite(x) && x > 0.0f; }

// base ** (arange(0, d, 2).float() / d) in f32, as torch computes it.
float pos_freq(float theta, size_t j, size_t d) { return std::pow(theta, float(2 * j) / float(d)); }

std::vector<float> default_inv_freq(float theta, size_t d) {
    std::vector<float> f(d / 2);  // [d/2]
    for (size_t j = 0; j < f.size(); j++) f[j] = 1.0f / pos_freq(theta, j, d);
    return f;
}

// _compute_llama3_parameters: the f32 tensor ops in order, python scalars cast to f32 where
// torch's type promotion casts them.
std::vector<float> llama3_inv_freq(const RopeSpec &s, size_t d) {
    std::vector<float> f = default_inv_freq(s.theta, d);
    const double old_ctx = double(s.original_max_position);
    const float low_wavelen = float(old_ctx / double(s.low_freq_factor));
    const float high_wavelen = float(old_ctx / double(s.high_freq_factor));
    const float band = float(double(s.high_freq_factor) - double(s.low_freq_factor));
    for (float &x : f) {
        const float wavelen = float(2 * kPi) / x;
        const float scaled = wavelen > low_wavelen ? x / s.factor : x;
        if (!(wavelen < high_wavelen) && !(wavelen > low_wavelen)) {
            const float smooth = (float(old_ctx) / wavelen - s.low_freq_factor) / band;
            x = (1.0f - smooth) * scaled / s.factor + smooth * scaled;
        } else {
            x = scaled;
        }
    }
    return f;
}

// _compute_yarn_parameters with truncate = true.
std::vector<float> yarn_inv_freq(const RopeSpec &s, size_t d) {
    const double base = double(s.theta), orig = double(s.original_max_position);
    auto correction_dim = [&](double rotations) {
        return (double(d) * std::log(orig / (rotations * 2 * kPi))) / (2 * std::log(base));
    };
    const double low = std::max(std::floor(correction_dim(double(s.beta_fast))), 0.0);
    double high = std::min(std::ceil(correction_dim(double(s.beta_slow))), double(d - 1));
    if (low == high) high += 0.001;  // linear_ramp_factor's guard against a zero range
    const float span = float(high - low);
    std::vector<float> f(d / 2);  // [d/2]
    for (size_t j = 0; j < f.size(); j++) {
        const float pf = pos_freq(s.theta, j, d);
        const float extrapolation = 1.0f / pf, interpolation = 1.0f / (s.factor * pf);
        const float ramp = std::clamp((float(j) - float(low)) / span, 0.0f, 1.0f);
        const float extra_factor = 1.0f - ramp;
        f[j] = interpolation * (1.0f - extra_factor) + extrapolation * extra_factor;
    }
    return f;
}

}  // namespace

void check_rope_spec(const RopeSpec &s, size_t head_dim) {
    LLAISYS_CHECK_ARG(head_dim > 0 && head_dim % 2 == 0, "rope: head_dim must be even and > 0, got ", head_dim);
    LLAISYS_CHECK_ARG(finite_pos(s.theta), "rope: rope_theta must be finite and > 0, got ", s.theta);
    switch (s.type) {
    case LLAISYS_ROPE_DEFAULT: return;
    case LLAISYS_ROPE_LINEAR:
    case LLAISYS_ROPE_LLAMA3:
    case LLAISYS_ROPE_YARN: break;
    default: fail(LLAISYS_STATUS_INVALID_ARGUMENT, "rope: unknown rope_scaling ", int(s.type));
    }
    LLAISYS_CHECK_ARG(std::isfinite(s.factor) && s.factor >= 1.0f, "rope: rope_factor must be finite and >= 1, got ",
                      s.factor);
    if (s.type == LLAISYS_ROPE_LLAMA3) {
        LLAISYS_CHECK_ARG(finite_pos(s.low_freq_factor), "rope: rope_low_freq_factor must be finite and > 0, got ",
                          s.low_freq_factor);
        LLAISYS_CHECK_ARG(std::isfinite(s.high_freq_factor) && s.high_freq_factor > s.low_freq_factor,
                          "rope: rope_high_freq_factor (", s.high_freq_factor,
                          ") must be finite and > rope_low_freq_factor (", s.low_freq_factor, ")");
    }
    if (s.type == LLAISYS_ROPE_LLAMA3 || s.type == LLAISYS_ROPE_YARN) {
        LLAISYS_CHECK_ARG(s.original_max_position > 0, "rope: rope_original_max_position must be > 0");
    }
    if (s.type == LLAISYS_ROPE_YARN) {
        LLAISYS_CHECK_ARG(finite_pos(s.beta_fast), "rope: rope_beta_fast must be finite and > 0, got ", s.beta_fast);
        LLAISYS_CHECK_ARG(finite_pos(s.beta_slow), "rope: rope_beta_slow must be finite and > 0, got ", s.beta_slow);
        LLAISYS_CHECK_ARG(s.beta_fast >= s.beta_slow, "rope: rope_beta_fast (", s.beta_fast,
                          ") must be >= rope_beta_slow (", s.beta_slow, ")");
        LLAISYS_CHECK_ARG(std::isfinite(s.attention_factor) && s.attention_factor >= 0.0f,
                          "rope: rope_attention_factor must be finite and >= 0 (0: derived from rope_factor), got ",
                          s.attention_factor);
    }
}

std::vector<float> rope_inv_freq(const RopeSpec &s, size_t head_dim) {
    check_rope_spec(s, head_dim);
    switch (s.type) {
    case LLAISYS_ROPE_LINEAR: {
        std::vector<float> f = default_inv_freq(s.theta, head_dim);
        for (float &x : f) x /= s.factor;
        return f;
    }
    case LLAISYS_ROPE_LLAMA3: return llama3_inv_freq(s, head_dim);
    case LLAISYS_ROPE_YARN: return yarn_inv_freq(s, head_dim);
    default: return default_inv_freq(s.theta, head_dim);
    }
}

float rope_attention_scale(const RopeSpec &s) {
    if (s.type != LLAISYS_ROPE_YARN) return 1.0f;
    if (s.attention_factor > 0.0f) return s.attention_factor;
    if (s.factor <= 1.0f) return 1.0f;
    return float(0.1 * std::log(double(s.factor)) + 1.0);
}

}  // namespace llaisys::ops
