// The activation arena (workspace.hpp).
#include "workspace.hpp"

#include "../../core/allocator.hpp"
#include "../../utils/checked.hpp"

#include <algorithm>

namespace llaisys::models {

Workspace::~Workspace() {
    if (base_) core::release(device_, device_id_, LLAISYS_MEMORY_DEVICE, base_);
}

void Workspace::reserve(size_t n_tokens, size_t n_sample, size_t n_logit_rows) {
    if (fits(n_tokens, n_sample, n_logit_rows)) return;
    const size_t n = std::max(n_tokens, tokens_), ns = std::max(n_sample, samples_);
    const size_t nl = std::max(n_logit_rows, logit_rows_);
    const llaisysModelParams_t &p = c_.p;
    size_t at = 0;
    // each buffer starts 256-byte aligned (a full cache line on every device)
    auto take = [&](size_t rows, size_t width) {
        size_t off = at;
        size_t b = checked_mul(checked_mul(rows, width, "workspace (rows * width)"), sizeof(float), "workspace bytes");
        at = checked_round_up(checked_add(at, b, "workspace bytes"), 256, "workspace bytes");
        return off;
    };
    const size_t x = take(n, p.hidden_size), h = take(n, p.hidden_size), qkv = take(n, c_.qkv_dim);
    const size_t attn = take(n, c_.q_dim), proj = take(n, p.hidden_size);
    const size_t gate_up = take(n, 2 * p.intermediate_size), act = take(n, p.intermediate_size);
    const size_t xs = take(ns, p.hidden_size), logits = take(nl, p.vocab_size);
    auto *base = static_cast<std::byte *>(core::allocate(device_, device_id_, LLAISYS_MEMORY_DEVICE, at));
    if (base_) core::release(device_, device_id_, LLAISYS_MEMORY_DEVICE, base_);
    base_ = base;
    bytes_ = at;
    tokens_ = n;
    samples_ = ns;
    logit_rows_ = nl;
    x_ = x, h_ = h, qkv_ = qkv, attn_ = attn, proj_ = proj, gate_up_ = gate_up, act_ = act, xs_ = xs, logits_ = logits;
}

}  // namespace llaisys::models
