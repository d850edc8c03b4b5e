// The one forward of every architecture on every device: validate the flat batch, place its
// K/V, run every layer over all tokens at once, then final norm + lm_head + sampling for the
// sample rows only. The backend (backend.hpp) supplies the device's kernels.
#include "decoder.hpp"

#include "../../sampling/sampler.hpp"
#include "../../utils/error.hpp"

#include <algorithm>
#include <cstring>

namespace llaisys::models {

namespace {
// Runs fn; when it throws, waits for the work it queued before rethrowing: that work may still
// read the workspace and the step's index buffers, which the next step reuses or regrows (a GPU
// stream). The original error is the one reported.
template <class F>
void drained(Backend &be, F &&fn) {
    try {
        fn();
    } catch (...) {
        try {
            be.finish();
        } catch (...) {
        }
        throw;
    }
}
}  // namespace

Model::Model(const Config &config, llaisysDeviceType_t device, int device_id)
    : c_(config), device_(device), device_id_(device_id), store_(c_, device, device_id), ws_(c_, device, device_id),
      pad_ws_(c_, device, device_id) {
    be_ = device_ == LLAISYS_DEVICE_CPU ? make_cpu_backend(c_, store_.weights())
                                        : make_nvidia_backend(c_, store_.weights(), device_id_);
}

// be_ goes first (declared after ws_): a GPU backend drains its stream in its destructor, so
// nothing still reads the workspace when it is released.
Model::~Model() = default;

llaisysModelStats_t Model::stats() const {
    llaisysModelStats_t s{};
    s.weight_bytes = store_.bytes();
    s.workspace_bytes = ws_.bytes();
    s.workspace_tokens = ws_.tokens();
    s.graphs = be_->graphs();
    s.graph_capture_us = size_t(be_->graph_capture_seconds() * 1e6);
    s.padded_bytes = pad_ws_.bytes() + be_->padded_bytes();
    return s;
}

std::shared_ptr<kv::KVCache> Model::create_kv_cache(llaisysKVLayout_t layout, llaisysDataType_t dtype,
                                                    size_t n_slots, size_t block_size) const {
    llaisysKVCacheParams_t p{};
    p.layout = layout;
    p.dtype = dtype;
    p.n_layers = c_.p.n_layers;
    p.n_kv_heads = c_.p.n_kv_heads;
    p.head_dim = c_.p.head_dim;
    p.n_slots = n_slots;
    p.block_size = block_size;
    p.rope_theta = c_.p.rope_theta;
    p.device = device_;
    p.device_id = device_id_;
    auto cache = std::make_shared<kv::KVCache>(p);
    cache->set_rope(c_.inv_freq);  // seq_add re-rotates keys with the model's (scaled) frequencies
    return cache;
}

void Model::check_cache(const kv::KVCache &cache) const {
    const auto &cp = cache.params();
    LLAISYS_CHECK(cp.n_layers == c_.p.n_layers && cp.n_kv_heads == c_.p.n_kv_heads && cp.head_dim == c_.p.head_dim,
                  LLAISYS_STATUS_SHAPE_MISMATCH, "the KV cache was shaped for another model");
    LLAISYS_CHECK(cp.device == device_ && cp.device_id == device_id_, LLAISYS_STATUS_DEVICE_MISMATCH,
                  "the KV cache is on another device than the model");
}

llaisysStatus_t Model::step(kv::KVCache &cache, const llaisysBatch_t &batch, const llaisysSamplingParams_t *params,
                            const llaisysStepOutput_t &out, const llaisysBatchEmbeds_t *embeds) {
    check_cache(cache);
    const auto scope = be_->enter();  // the model's device is current until the step returns
    auto missing = missing_weights();
    LLAISYS_CHECK_ARG(missing.empty(), missing.size(), " weight(s) are not set, e.g. '",
                      missing.empty() ? "" : missing.front(), "'");
    const llaisysBatch_t b = with_embeds(batch, embeds);  // the embedded tokens' ids ignored
    validate_batch(cache, b);
    if (embeds && embeds->n_rows == 0) embeds = nullptr;
    if (params && b.n_sample) {
        sampling::check_output(out.sample, b.n_sample);
        for (size_t i = 0; i < b.n_sample; i++) sampling::check_params(params[i], c_.p.vocab_size, out.sample.top_capacity);
    }
    if (const PaddedShape shape = padded_shape(cache, b, params, embeds); shape.rows) {
        padded_step(cache, b, shape, params, out);
        return LLAISYS_STATUS_OK;
    }
    const size_t logit_rows = params || out.logits ? b.n_sample : 0;  // hidden-only steps need no logits
    if (!ws_.fits(b.n_tokens, b.n_sample, logit_rows)) {
        be_->finish();  // the old arena may still be read by queued work
        ws_.reserve(b.n_tokens, b.n_sample, logit_rows);
    }
    if (!plan_kv(cache, b)) return LLAISYS_STATUS_NO_KV_SPACE;  // the last check: it changes SLOT cells
    drained(*be_, [&] {
        be_->begin_step(b, plan_);
        forward(ws_, cache, b.n_tokens, embeds);
        finish_rows(b, params, out);
    });
    return LLAISYS_STATUS_OK;
}

// Whether this backend pads decode steps over cache: a BLOCK layout, a dense model.
bool Model::pads(const kv::KVCache &cache) const {
    if (cache.layout() != LLAISYS_KV_LAYOUT_BLOCK || !be_->pads_decode()) return false;
    for (const LayerWeights &L : store_.weights().layers) {
        if (L.sparse) return false;  // the experts' route waits for the host (Backend::moe_route)
    }
    return true;
}

// A pure decode step of a dense model, sampled, on a backend that pads (a GPU replaying CUDA
// graphs): its shape padded to (padded_decode.hpp); else {0, 0}.
PaddedShape Model::padded_shape(const kv::KVCache &cache, const llaisysBatch_t &b,
                                const llaisysSamplingParams_t *params, const llaisysBatchEmbeds_t *embeds) const {
    if (!params || embeds || !pads(cache)) return {};
    return PaddedDecode::shape_of(b, cache.params().block_size);
}

// The step padded to `shape`, in pad_ws_: the layers, the final norm and the lm_head over all
// shape.rows rows (one graph on a GPU), then the real rows' hidden states and sampling. The
// real rows come first, so their logits are the first b.n_sample rows.
void Model::padded_step(kv::KVCache &cache, const llaisysBatch_t &b, PaddedShape shape,
                        const llaisysSamplingParams_t *params, const llaisysStepOutput_t &out) {
    const size_t ns = b.n_sample;
    drained(*be_, [&] {
        padded_forward(cache, pad_.pad(b, shape), shape);
        if (out.hidden) be_->to_host(out.hidden, pad_ws_.xs(), ns * c_.p.hidden_size * sizeof(float));
        be_->sample_logits(pad_ws_.logits(), ns, params, out);
    });
}

// pad_ws_ sized for padded steps of `rows` rows; graphs captured over the old arena go with it.
void Model::reserve_padded(size_t rows) {
    if (pad_ws_.fits(rows, rows, rows)) return;
    be_->finish();
    be_->drop_graphs();
    pad_ws_.reserve(rows, rows, rows);
}

void Model::padded_forward(kv::KVCache &cache, const llaisysBatch_t &pb, PaddedShape shape) {
    const size_t B = shape.rows, H = c_.p.hidden_size;
    reserve_padded(B);
    plan_kv(cache, pb);  // the BLOCK layout: never short of space
    be_->begin_padded_step(pb, plan_, shape);
    float *xs = pad_ws_.xs(), *logits = pad_ws_.logits();
    be_->run_padded(shape, cache, [&] {
        forward(pad_ws_, cache, B, nullptr);
        be_->gather_rows(xs, pad_ws_.x(), B);
        be_->rms_norm(xs, xs, *store_.weights().final_norm, B, H);
        be_->linear(logits, xs, store_.weights().lm_head, nullptr, B);
    });
}

size_t Model::capture_graphs(kv::KVCache &cache, size_t max_rows) {
    check_cache(cache);
    LLAISYS_CHECK_ARG(max_rows > 0, "capture_graphs: max_rows must be > 0");
    if (!pads(cache)) return 0;
    const auto scope = be_->enter();
    const auto missing = missing_weights();
    LLAISYS_CHECK_ARG(missing.empty(), missing.size(), " weight(s) are not set, e.g. '", missing.front(), "'");
    const size_t top = PaddedDecode::bucket(std::min(max_rows, PaddedDecode::kMaxRows));
    reserve_padded(top);  // once, at the largest: no graph is dropped on the way
    const llaisysBatch_t none{};  // no real row: every row of each shape is padding
    size_t shapes = 0;
    for (size_t B = 1; B != 0 && B <= top; B = PaddedDecode::bucket(B + 1)) {
        const PaddedShape shape{B, PaddedDecode::kMinWidth};
        drained(*be_, [&] {
            padded_forward(cache, pad_.pad(none, shape), shape);
            be_->finish();
        });
        shapes++;
    }
    return shapes;
}

// Embedding (or the caller's input rows) -> n_layers x block -> residual stream in ws.x(). x is the residual stream, h
// its normalised copy; each residual add is fused with the norm that follows it (post_norm
// of this layer, in_norm of the next). When the backend folds norms (decode steps on a GPU,
// Backend::folds_norms), h is never written: each norm runs inside the GEMV that reads x, and
// each residual add inside the GEMV that produces it.
void Model::forward(Workspace &ws, kv::KVCache &cache, size_t n, const llaisysBatchEmbeds_t *embeds) {
    const Weights &w = store_.weights();
    const llaisysModelParams_t &p = c_.p;
    const size_t H = p.hidden_size, nh = p.n_heads, nkv = p.n_kv_heads, qkv_dim = c_.qkv_dim;
    float *x = ws.x(), *h = ws.h(), *qkv = ws.qkv(), *attn = ws.attn(), *proj = ws.proj();
    float *gate_up = ws.gate_up(), *act = ws.act();
    float *k_rows = qkv + c_.q_dim;  // the k heads of each qkv row
    const bool fold = be_->folds_norms(n);

    be_->embed(x, n);                                                 // [n, H]
    if (embeds) be_->embed_rows(x, embeds->data, embeds->rows, embeds->n_rows);  // given input rows
    if (!fold) be_->rms_norm(h, x, *w.layers[0].in_norm, n, H);       // h = in_norm(x)
    for (size_t l = 0; l < p.n_layers; l++) {
        const LayerWeights &L = w.layers[l];
        // attention block (h = in_norm(x) already, unless folded)
        if (fold) {
            be_->norm_linear(qkv, h, x, *L.in_norm, L.qkv_w, L.qkv_b.get(), n);  // [n, qkv_dim]
        } else {
            be_->linear(qkv, h, L.qkv_w, L.qkv_b.get(), n);
        }
        if (p.qk_norm) {  // Qwen3: RMSNorm over each q and k head
            be_->rms_norm_heads(qkv, *L.q_norm, n, nh, qkv_dim);
            be_->rms_norm_heads(k_rows, *L.k_norm, n, nkv, qkv_dim);
        }
        be_->rope_kv_write(cache, l, qkv, n, nh, nkv, c_.q_dim, qkv_dim);  // rope q and k, store k and v
        be_->attention(attn, qkv, cache, l, c_.window[l]);                // [n, nh * hd]
        if (fold) {  // x += o_proj; the MLP reads post_norm(x) inside its GEMV; x += down_proj
            be_->linear_residual(x, proj, attn, L.o_w, n);
            be_->norm_linear_swiglu(act, gate_up, h, x, *L.post_norm, L.gate_up_w, n, p.intermediate_size);
            be_->linear_residual(x, proj, act, L.down_w, n);
            continue;
        }
        be_->linear(proj, attn, L.o_w, nullptr, n);  // [n, H]
        // MLP block: x += o_proj; h = post_norm(x)
        be_->add_rms_norm(h, x, proj, *L.post_norm, n, H);
        if (L.sparse) {
            moe_ffn(ws, L, n);  // proj = experts(h) [n, H]
        } else {
            be_->linear_swiglu(act, gate_up, h, L.gate_up_w, n, p.intermediate_size);  // [n, I]
            be_->linear(proj, act, L.down_w, nullptr, n);       // [n, H]
        }
        if (l + 1 < p.n_layers) {  // x += down_proj; h = next layer's in_norm(x)
            be_->add_rms_norm(h, x, proj, *w.layers[l + 1].in_norm, n, H);
        } else {  // the final norm runs on the sample rows only (finish_rows)
            be_->add(x, proj, n * H);
        }
    }
}

// A sparse layer's FFN over h [n, H] into proj [n, H]: route each token to its top-k experts,
// run each chosen expert's gate/up, SwiGLU and down over the rows routed to it, sum the rows
// back weighted; then Qwen2-MoE's shared expert, scaled by sigmoid(shared_expert_gate . h).
void Model::moe_ffn(Workspace &ws, const LayerWeights &L, size_t n) {
    const llaisysModelParams_t &p = c_.p;
    const size_t H = p.hidden_size, Ie = p.moe_intermediate_size, nk = n * p.n_experts_per_tok;
    float *h = ws.h(), *proj = ws.proj(), *router = ws.router(), *ey = ws.ey();
    be_->linear(router, h, L.router_w, nullptr, n);           // [n, E] router logits
    be_->moe_route(router, n);                                 // top-k, pairs grouped by expert
    be_->moe_gather(ws.xg(), h);                               // [n k, H]
    be_->expert_linear(ws.eg(), ws.xg(), L.exp_gate_up);       // [n k, 2 Ie]
    be_->swiglu(ws.eact(), ws.eg(), nk, Ie);                   // [n k, Ie]
    be_->expert_linear(ey, ws.eact(), L.exp_down);             // [n k, H]
    be_->moe_combine(proj, ey);                                // [n, H] the weighted sum
    if (p.shared_expert_intermediate_size == 0) return;
    const size_t Is = p.shared_expert_intermediate_size;
    be_->linear(ws.gate_up(), h, L.shared_gate_up_w, nullptr, n);   // [n, 2 Is]
    be_->swiglu(ws.act(), ws.gate_up(), n, Is);                     // [n, Is]
    be_->linear(ey, ws.act(), L.shared_down_w, nullptr, n);         // [n, H]
    be_->linear(router, h, L.shared_gate_w, nullptr, n);            // [n, 1] the shared expert's gate
    be_->add_sigmoid_gated(proj, ey, router, n, H);
}

// The sample rows: gather, final norm, hidden states, lm_head, sampling.
void Model::finish_rows(const llaisysBatch_t &b, const llaisysSamplingParams_t *params,
                        const llaisysStepOutput_t &out) {
    const size_t H = c_.p.hidden_size, ns = b.n_sample;
    if (ns == 0) {
        be_->finish();  // the KV writes have landed
        return;
    }
    float *xs = ws_.xs();  // [n_sample, H]
    be_->gather_rows(xs, ws_.x(), ns);
    be_->rms_norm(xs, xs, *store_.weights().final_norm, ns, H);
    if (out.hidden) be_->to_host(out.hidden, xs, ns * H * sizeof(float));
    if (!params && !out.logits) {
        be_->finish();
        return;
    }
    be_->head(xs, ws_.logits(), ns, params, out);
}

#ifndef LLAISYS_ENABLE_NVIDIA
std::unique_ptr<Backend> make_nvidia_backend(const Config &, const Weights &, int) {
    fail(LLAISYS_STATUS_UNSUPPORTED, "this build of libllaisys has no NVIDIA backend (build with -DLLAISYS_NVIDIA=ON)");
}
#endif

}  // namespace llaisys::models
