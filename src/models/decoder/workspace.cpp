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
    // the MLP's inner width: dense layers' I and the shared expert's Is (a model with no dense layer has no I)
    const size_t inner = std::max(c_.any_dense ? p.intermediate_size : 0, p.shared_expert_intermediate_size);
    const size_t gate_up = take(n, 2 * inner), act = take(n, inner);
    const size_t xs = take(ns, p.hidden_size), logits = take(nl, p.vocab_size);
    const size_t nk = checked_mul(n, p.n_experts_per_tok, "workspace (tokens * n_experts_per_tok)");
    const size_t Ie = p.moe_intermediate_size;
    const size_t router = take(n, std::max<size_t>(p.n_experts, c_.moe ? 1 : 0));
    const size_t eg = take(nk, 2 * Ie), eact = take(nk, Ie), ey = take(nk, p.hidden_size);
    auto *base = static_cast<std::byte *>(core::allocate(device_, device_id_, LLAISYS_MEMORY_DEVICE, at));
    if (base_) core::release(device_, device_id_, LLAISYS_MEMORY_DEVICE, base_);
    base_ = base;
    bytes_ = at;
    tokens_ = n;
    samples_ = ns;
    logit_rows_ = nl;
    x_ = x, h_ = h, qkv_ = qkv, attn_ = attn, proj_ = proj, gate_up_ = gate_up, act_ = act, xs_ = xs, logits_ = logits;
    router_ = router, eg_ = eg, eact_ = eact, ey_ = ey;
}

}  // namespace llaisys::models
