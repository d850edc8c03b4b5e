// The per-step activation memory: one arena on the model's device, planned from the step's
// shape (n_tokens, n_sample, n_logit_rows), every buffer at an offset. Grown (never shrunk) when a larger
// step arrives; allocated through the core allocator, so it shows in llaisysMemoryStats.
// Nothing else is allocated per step or per layer.
#pragma once

#include "params.hpp"

#include <cstddef>

namespace llaisys::models {

class Workspace {
public:
    Workspace(const Config &c, llaisysDeviceType_t device, int device_id)
        : c_(c), device_(device), device_id_(device_id) {}
    ~Workspace();
    Workspace(const Workspace &) = delete;
    Workspace &operator=(const Workspace &) = delete;

    // True when a step of this shape fits without growing. n_logit_rows is n_sample when the
    // step computes logits (sampling or logits asked for), else 0: a step that only wants
    // hidden states (pooling 2048 tokens) must not size 2048 x vocab floats of logits.
    bool fits(size_t n_tokens, size_t n_sample, size_t n_logit_rows) const {
        return n_tokens <= tokens_ && n_sample <= samples_ && n_logit_rows <= logit_rows_;
    }
    // Sizes the arena for at least that shape, keeping the larger of the old and new of each;
    // the old arena must no longer be in use (a GPU caller synchronizes first).
    void reserve(size_t n_tokens, size_t n_sample, size_t n_logit_rows);

    size_t bytes() const { return bytes_; }
    size_t tokens() const { return tokens_; }

    // f32 activations (all [rows, width] row-major)
    float *x() const { return at(x_); }              // [n, H] residual stream
    float *h() const { return at(h_); }              // [n, H] normed input of a block
    float *qkv() const { return at(qkv_); }          // [n, (nh + 2 nkv) * hd]
    float *attn() const { return at(attn_); }        // [n, nh * hd]
    float *proj() const { return at(proj_); }        // [n, H] output of o_proj / down_proj
    float *gate_up() const { return at(gate_up_); }  // [n, 2 max(I, Is)] (I of dense layers, Is: shared expert)
    float *act() const { return at(act_); }          // [n, max(I, Is)]
    // mixture of experts (empty for a dense model); k = n_experts_per_tok, rows in expert order
    float *router() const { return at(router_); }    // [n, E] router logits; the shared gate [n, 1]
    float *xg() const { return at(ey_); }            // [n k, H] each (token, choice) row's input; shares
                                                     // ey's memory: dead once the gate/up linear has read it
    float *eg() const { return at(eg_); }            // [n k, 2 Ie] expert gate/up
    float *eact() const { return at(eact_); }        // [n k, Ie]
    float *ey() const { return at(ey_); }            // [n k, H] expert outputs; the shared expert's [n, H]
    float *xs() const { return at(xs_); }            // [n_sample, H] final hidden of the sample rows
    float *logits() const { return at(logits_); }    // [n_logit_rows, V]

private:
    float *at(size_t off) const { return reinterpret_cast<float *>(base_ + off); }

    const Config &c_;
    llaisysDeviceType_t device_;
    int device_id_;
    std::byte *base_ = nullptr;
    size_t bytes_ = 0, tokens_ = 0, samples_ = 0, logit_rows_ = 0;
    size_t x_ = 0, h_ = 0, qkv_ = 0, attn_ = 0, proj_ = 0, gate_up_ = 0, act_ = 0, xs_ = 0, logits_ = 0;  // byte offsets
    size_t router_ = 0, eg_ = 0, eact_ = 0, ey_ = 0;
};

}  // namespace llaisys::models
