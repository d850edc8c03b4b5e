// Weight storage and loading by HF name or by (kind, layer).
#include "weights.hpp"

#include "../../device/runtime_api.hpp"
#include "../../quant/dequant.hpp"
#include "../../utils/checked.hpp"
#include "../../utils/error.hpp"
#include "../../utils/types.hpp"

#include <cstdlib>
#include <cstring>

namespace llaisys::models {
namespace {

// Copy n elements of dtype src_dt into dst (its dtype) at row offset row0.
void convert_rows(Tensor &dst, size_t row0, const void *src, llaisysDataType_t src_dt, size_t n) {
    std::byte *out = dst.data() + row0 * (dst.numel() / dst.shape()[0]) * dst.element_size();
    const llaisysMemcpyKind_t kind = dst.device() == LLAISYS_DEVICE_CPU ? LLAISYS_MEMCPY_H2H : LLAISYS_MEMCPY_H2D;
    if (src_dt == dst.dtype()) {
        device::runtime(dst.device()).memcpy(dst.device_id(), out, src, n * dst.element_size(), kind);
        return;
    }
    std::vector<std::byte> tmp(n * dst.element_size());  // convert on the host, then copy
    dispatch_float(src_dt, [&](auto stag) {
        using TS = decltype(stag);
        dispatch_float(dst.dtype(), [&](auto dtag) {
            using TD = decltype(dtag);
            auto *s = static_cast<const TS *>(src);
            auto *d = reinterpret_cast<TD *>(tmp.data());
#pragma omp parallel for schedule(static) if (n > 65536)
            for (ptrdiff_t i = 0; i < ptrdiff_t(n); i++) d[i] = from_f32<TD>(to_f32(s[i]));
        });
    });
    device::runtime(dst.device()).memcpy(dst.device_id(), out, tmp.data(), tmp.size(), kind);
}

const char *kind_name(int kind) {
    static const char *names[] = {"EMBED",       "FINAL_NORM",  "LM_HEAD",     "ATTN_NORM",   "Q",
                                  "K",           "V",           "Q_BIAS",      "K_BIAS",      "V_BIAS",
                                  "O",           "Q_NORM",      "K_NORM",      "MLP_NORM",    "GATE",
                                  "UP",          "DOWN",        "ROUTER",      "EXPERT_GATE", "EXPERT_UP",
                                  "EXPERT_DOWN", "SHARED_GATE", "SHARED_UP",   "SHARED_DOWN", "SHARED_EXPERT_GATE"};
    return kind >= 0 && kind <= LLAISYS_WEIGHT_SHARED_EXPERT_GATE ? names[kind] : nullptr;
}

// Why a model lacks a weight kind, for the error that names it.
const char *absent_reason(int k) {
    if (k == LLAISYS_WEIGHT_LM_HEAD) return " (embeddings are tied)";
    if (k >= LLAISYS_WEIGHT_Q_BIAS && k <= LLAISYS_WEIGHT_V_BIAS) return " (qkv_bias is 0)";
    if (k == LLAISYS_WEIGHT_Q_NORM || k == LLAISYS_WEIGHT_K_NORM) return " (qk_norm is 0)";
    if (k >= LLAISYS_WEIGHT_GATE && k <= LLAISYS_WEIGHT_DOWN) return " in this layer (a sparse layer: its FFN is experts)";
    if (k >= LLAISYS_WEIGHT_ROUTER && k <= LLAISYS_WEIGHT_EXPERT_DOWN) return " in this layer (n_experts is 0 or the layer is dense)";
    if (k >= LLAISYS_WEIGHT_SHARED_GATE) return " in this layer (no shared expert, or a dense layer)";
    return "";
}

// A linear weight [n, k] whose storage (packed, quantized, dense) is made by the first weight
// set into it; whichever it will be, its size must fit.
LinearWeight new_linear(size_t n, size_t k, llaisysDeviceType_t device) {
    LinearWeight lw;
    lw.n = n;
    lw.k = k;
    if (device != LLAISYS_DEVICE_CPU) {
        checked_mul(n, k, "linear weight elements");
    } else {  // rows padded to whole panels, k to pairs
        checked_mul(checked_round_up(n, 32, "linear weight rows (padded to 32-row panels)"),
                    checked_round_up(k, 2, "linear weight width"), "packed linear weight elements");
    }
    return lw;
}

bool per_layer(int kind) { return kind >= LLAISYS_WEIGHT_ATTN_NORM; }

}  // namespace

WeightStore::WeightStore(const Config &c, llaisysDeviceType_t device, int device_id)
    : arch_(arch_name(c.p.arch)), tied_(c.p.tie_word_embeddings != 0), n_layers_(c.p.n_layers), device_(device),
      device_id_(device_id), dtype_(c.p.dtype) {
    const llaisysModelParams_t &p = c.p;
    const size_t H = p.hidden_size, I = p.intermediate_size, V = p.vocab_size, hd = p.head_dim;
    const size_t nq = c.q_dim, nkv = c.kv_dim;
    auto make = [&](std::vector<size_t> shape) { return Tensor::create(shape, p.dtype, device, device_id); };
    auto make_linear = [&](size_t n, size_t k) { return new_linear(n, k, device); };
    LLAISYS_CHECK(device == LLAISYS_DEVICE_CPU || device == LLAISYS_DEVICE_NVIDIA || !c.moe,
                  LLAISYS_STATUS_UNSUPPORTED, arch_,
                  ": mixture-of-experts models run on the CPU and NVIDIA devices only; load it with one of those");
    auto lin = [&](llaisysWeightKind_t kind, int32_t layer, std::string name, LinearWeight &dst, size_t row0,
                   std::vector<size_t> shape) {
        add(kind, layer, std::move(name), dst.dense, &dst, row0, std::move(shape));
    };

    w_.final_norm = make({H});
    w_.lm_head = make_linear(V, H);
    add(LLAISYS_WEIGHT_FINAL_NORM, -1, "model.norm.weight", w_.final_norm, nullptr, 0, {H});
    if (tied_) {
        lin(LLAISYS_WEIGHT_EMBED, -1, "model.embed_tokens.weight", w_.lm_head, 0, {V, H});
    } else {
        w_.embed = make({V, H});
        add(LLAISYS_WEIGHT_EMBED, -1, "model.embed_tokens.weight", w_.embed, nullptr, 0, {V, H});
        slots_.back().embed = true;
        lin(LLAISYS_WEIGHT_LM_HEAD, -1, "lm_head.weight", w_.lm_head, 0, {V, H});
    }

    w_.layers.resize(p.n_layers);
    for (size_t l = 0; l < p.n_layers; l++) {
        LayerWeights &L = w_.layers[l];
        const int32_t li = int32_t(l);
        L.in_norm = make({H});
        L.qkv_w = make_linear(nq + 2 * nkv, H);
        L.o_w = make_linear(H, nq);
        L.post_norm = make({H});
        const std::string pre = "model.layers." + std::to_string(l) + ".";
        add(LLAISYS_WEIGHT_ATTN_NORM, li, pre + "input_layernorm.weight", L.in_norm, nullptr, 0, {H});
        lin(LLAISYS_WEIGHT_Q, li, pre + "self_attn.q_proj.weight", L.qkv_w, 0, {nq, H});
        lin(LLAISYS_WEIGHT_K, li, pre + "self_attn.k_proj.weight", L.qkv_w, nq, {nkv, H});
        lin(LLAISYS_WEIGHT_V, li, pre + "self_attn.v_proj.weight", L.qkv_w, nq + nkv, {nkv, H});
        if (p.qkv_bias) {
            L.qkv_b = make({nq + 2 * nkv});
            add(LLAISYS_WEIGHT_Q_BIAS, li, pre + "self_attn.q_proj.bias", L.qkv_b, nullptr, 0, {nq});
            add(LLAISYS_WEIGHT_K_BIAS, li, pre + "self_attn.k_proj.bias", L.qkv_b, nullptr, nq, {nkv});
            add(LLAISYS_WEIGHT_V_BIAS, li, pre + "self_attn.v_proj.bias", L.qkv_b, nullptr, nq + nkv, {nkv});
        }
        lin(LLAISYS_WEIGHT_O, li, pre + "self_attn.o_proj.weight", L.o_w, 0, {H, nq});
        if (p.qk_norm) {
            L.q_norm = make({hd});
            L.k_norm = make({hd});
            add(LLAISYS_WEIGHT_Q_NORM, li, pre + "self_attn.q_norm.weight", L.q_norm, nullptr, 0, {hd});
            add(LLAISYS_WEIGHT_K_NORM, li, pre + "self_attn.k_norm.weight", L.k_norm, nullptr, 0, {hd});
        }
        add(LLAISYS_WEIGHT_MLP_NORM, li, pre + "post_attention_layernorm.weight", L.post_norm, nullptr, 0, {H});
        if (c.sparse[l]) {
            add_sparse_layer(p, l);
            continue;
        }
        L.gate_up_w = make_linear(2 * I, H);
        L.down_w = make_linear(H, I);
        lin(LLAISYS_WEIGHT_GATE, li, pre + "mlp.gate_proj.weight", L.gate_up_w, 0, {I, H});
        lin(LLAISYS_WEIGHT_UP, li, pre + "mlp.up_proj.weight", L.gate_up_w, I, {I, H});
        lin(LLAISYS_WEIGHT_DOWN, li, pre + "mlp.down_proj.weight", L.down_w, 0, {H, I});
    }
}

// A sparse layer's slots: the router, the stacked experts (3-D, by expert), the shared expert.
void WeightStore::add_sparse_layer(const llaisysModelParams_t &p, size_t l) {
    const size_t H = p.hidden_size, E = p.n_experts, Ie = p.moe_intermediate_size, Is = p.shared_expert_intermediate_size;
    LayerWeights &L = w_.layers[l];
    const int32_t li = int32_t(l);
    const std::string pre = "model.layers." + std::to_string(l) + ".mlp.";
    L.sparse = true;
    L.router_w = new_linear(E, H, device_);
    add(LLAISYS_WEIGHT_ROUTER, li, pre + "gate.weight", nullptr, &L.router_w, 0, {E, H});
    auto experts = [&](ExpertWeight &ew, size_t n, size_t k) {
        ew.n = n;
        ew.k = k;
        ew.experts.reserve(E);
        for (size_t e = 0; e < E; e++) ew.experts.push_back(new_linear(n, k, device_));
    };
    experts(L.exp_gate_up, 2 * Ie, H);
    experts(L.exp_down, H, Ie);
    auto expert_slot = [&](llaisysWeightKind_t kind, std::string name, ExpertWeight &ew, size_t row0,
                           std::vector<size_t> shape) {
        add(kind, li, std::move(name), nullptr, nullptr, row0, std::move(shape));
        slots_.back().exp = &ew;
    };
    expert_slot(LLAISYS_WEIGHT_EXPERT_GATE, pre + "experts.gate_proj.weight", L.exp_gate_up, 0, {E, Ie, H});
    expert_slot(LLAISYS_WEIGHT_EXPERT_UP, pre + "experts.up_proj.weight", L.exp_gate_up, Ie, {E, Ie, H});
    expert_slot(LLAISYS_WEIGHT_EXPERT_DOWN, pre + "experts.down_proj.weight", L.exp_down, 0, {E, H, Ie});
    if (Is == 0) return;
    L.shared_gate_up_w = new_linear(2 * Is, H, device_);
    L.shared_down_w = new_linear(H, Is, device_);
    L.shared_gate_w = new_linear(1, H, device_);
    add(LLAISYS_WEIGHT_SHARED_GATE, li, pre + "shared_expert.gate_proj.weight", nullptr, &L.shared_gate_up_w, 0, {Is, H});
    add(LLAISYS_WEIGHT_SHARED_UP, li, pre + "shared_expert.up_proj.weight", nullptr, &L.shared_gate_up_w, Is, {Is, H});
    add(LLAISYS_WEIGHT_SHARED_DOWN, li, pre + "shared_expert.down_proj.weight", nullptr, &L.shared_down_w, 0, {H, Is});
    add(LLAISYS_WEIGHT_SHARED_EXPERT_GATE, li, pre + "shared_expert_gate.weight", nullptr, &L.shared_gate_w, 0, {1, H});
}

void WeightStore::add(llaisysWeightKind_t kind, int32_t layer, std::string name, tensor_t dst, LinearWeight *lin,
                      size_t row0, std::vector<size_t> shape) {
    by_name_[name] = slots_.size();
    by_kind_[{int(kind), layer}] = slots_.size();
    Slot s;
    s.name = std::move(name);
    s.dst = std::move(dst);
    s.lin = lin;
    s.row0 = row0;
    s.shape = std::move(shape);
    slots_.push_back(std::move(s));
}

WeightStore::Slot &WeightStore::find(const char *name, llaisysWeightKind_t kind, int32_t layer) {
    if (name) {
        auto it = by_name_.find(name);
        LLAISYS_CHECK_ARG(it != by_name_.end(), "unknown ", arch_, " weight name '", name, "'",
                          tied_ && std::strcmp(name, "lm_head.weight") == 0 ? " (embeddings are tied)" : "",
                          " (or a weight this model's params do not have)");
        return slots_[it->second];
    }
    int k;
    std::memcpy(&k, &kind, sizeof k);  // by its bytes: any int may arrive from C
    const char *kname = kind_name(k);
    LLAISYS_CHECK_ARG(kname, "unknown weight kind ", k);
    if (per_layer(k)) {
        LLAISYS_CHECK_ARG(layer >= 0 && size_t(layer) < n_layers_, "weight ", kname, ": layer ", layer,
                          " is outside [0, ", n_layers_, ")");
    } else {
        LLAISYS_CHECK_ARG(layer == -1, "weight ", kname, " is not per layer: layer must be -1, got ", layer);
    }
    auto it = by_kind_.find({k, layer});
    LLAISYS_CHECK_ARG(it != by_kind_.end(), "this ", arch_, " model has no weight ", kname, absent_reason(k));
    return slots_[it->second];
}

void WeightStore::set(const char *name, llaisysWeightKind_t kind, int32_t layer, const void *data,
                      llaisysDataType_t dtype, const std::vector<size_t> &shape) {
    Slot &s = find(name, kind, layer);
    LLAISYS_CHECK(shape == s.shape, LLAISYS_STATUS_SHAPE_MISMATCH, "weight '", s.name,
                  "' has the wrong shape for this model");
    const bool quant = is_quant_dtype(dtype);
    LLAISYS_CHECK(is_float_dtype(dtype) || quant, LLAISYS_STATUS_DTYPE_MISMATCH, "weight '", s.name,
                  "' must be f32, f16, bf16 or block-quantized (", kQuantDtypeNames, "), got ",
                  dtype_name(dtype));
    LLAISYS_CHECK_ARG(data != nullptr, "weight '", s.name, "' data is NULL");
    if (quant) {
        const size_t block = quant_block_size(dtype);
        const size_t dims = s.exp ? 3 : 2;  // experts: [E, rows, k]
        LLAISYS_CHECK(shape.size() == dims && shape.back() % block == 0, LLAISYS_STATUS_SHAPE_MISMATCH, "weight '",
                      s.name, "' is ", dtype_name(dtype), ", whose rows are blocks of ", block, " elements: it must be ",
                      dims, "-D with a row length divisible by ", block);
    }
    if (s.exp) {
        set_experts(s, data, dtype);
    } else if (quant && device_ == LLAISYS_DEVICE_CPU && (s.lin || s.embed)) {
        if (s.lin) set_linear(s, data, dtype);
        else set_embed_quant(s, data, dtype);
    } else if (s.lin && device_ != LLAISYS_DEVICE_CPU) {
        set_linear_gpu(s, data, dtype);
    } else if (quant) {  // no quantized storage here: dequantize to f32 on the host, then as a float weight
        std::vector<float> rows(shape[0] * shape[1]);  // [rows, k]
        quant::dequantize_rows(data, dtype, rows.data(), LLAISYS_DTYPE_F32, shape[0], shape[1]);
        convert_rows(*s.dst, s.row0, rows.data(), LLAISYS_DTYPE_F32, rows.size());
    } else if (s.lin && device_ == LLAISYS_DEVICE_CPU) {
        set_linear(s, data, dtype);
    } else {
        size_t n = 1;
        for (size_t d : shape) n *= d;
        convert_rows(*s.dst, s.row0, data, dtype, n);
    }
    s.set = true;
}

// CPU linear weights: the first weight set into a fused linear decides its storage (packed in
// the model dtype, or quantized); the other slots of that linear must agree.
void WeightStore::set_linear(Slot &s, const void *data, llaisysDataType_t dtype) {
    fill_linear(*s.lin, s.name, s.row0, s.shape[0], data, dtype);
    LinearWeight &lw = *s.lin;
    if (&lw == &w_.lm_head) {  // the lm_head is one tensor: it is whole now
        const char *env = std::getenv("LLAISYS_GREEDY_SCREEN");
        w_.screen.reset();
        // the screen reads an int8 copy of a packed float lm_head; a quantized one is read as is
        if (lw.packed && !(env && std::strcmp(env, "0") == 0)) {
            w_.screen = std::make_unique<ops::cpu::LogitScreen>(*lw.packed);
        }
    }
}

// Rows [row0, row0 + rows) of a CPU linear from host data [rows, k] of dtype (float or blocks).
void WeightStore::fill_linear(LinearWeight &lw, const std::string &name, size_t row0, size_t rows, const void *data,
                              llaisysDataType_t dtype) {
    const bool quant = is_quant_dtype(dtype);
    if (!lw.packed && !lw.quant) {
        if (quant) lw.quant = std::make_unique<ops::cpu::QuantWeight>(lw.n, lw.k);
        else lw.packed = std::make_unique<ops::cpu::PackedWeight>(lw.n, lw.k, dtype_);
    }
    LLAISYS_CHECK(quant == bool(lw.quant), LLAISYS_STATUS_DTYPE_MISMATCH, "weight '", name, "' is ",
                  dtype_name(dtype), " but the weights it is fused with (q/k/v, or gate/up) were set ",
                  lw.quant ? "block-quantized" : "as floats", ": a fused linear is stored one way, so give them "
                  "all float or all block-quantized types (quantized types may differ between them)");
    if (quant) {
        lw.quant->set_rows(row0, rows, data, dtype);
    } else {
        lw.packed->set_rows(row0, rows, data, dtype);
    }
}

// Expert weights [E, rows, k]: expert e's matrix (rows * k elements, or rows GGUF rows of
// blocks) into rows [row0, row0 + rows) of expert e's linear, stored as any linear of the
// device (packed or quantized on the CPU, dense or GGUF blocks on a GPU).
void WeightStore::set_experts(Slot &s, const void *data, llaisysDataType_t dtype) {
    const size_t E = s.shape[0], rows = s.shape[1], k = s.shape[2];
    const size_t per_expert = is_quant_dtype(dtype) ? rows * quant::row_bytes(dtype, k) : rows * k * dtype_size(dtype);
    const auto *src = static_cast<const std::byte *>(data);
    for (size_t e = 0; e < E; e++) {
        if (device_ == LLAISYS_DEVICE_CPU) {
            fill_linear(s.exp->experts[e], s.name, s.row0, rows, src + e * per_expert, dtype);
        } else {
            fill_linear_gpu(s.exp->experts[e], s.name, s.row0, rows, src + e * per_expert, dtype);
        }
    }
}

// GPU linear weights: the first weight set into a fused linear decides its storage. Quantized:
// each part is kept as its GGUF blocks in a device tensor of its own (a part set again is
// replaced), and a float part is refused as on the CPU. Float: the dense [n, k] tensor in the
// model dtype, into which later quantized parts are dequantized.
void WeightStore::set_linear_gpu(Slot &s, const void *data, llaisysDataType_t dtype) {
    fill_linear_gpu(*s.lin, s.name, s.row0, s.shape[0], data, dtype);
}

// Rows [row0, row0 + rows) of a GPU linear from host data [rows, k] of dtype (float or blocks).
void WeightStore::fill_linear_gpu(LinearWeight &lw, const std::string &name, size_t row0, size_t rows,
                                  const void *data, llaisysDataType_t dtype) {
    const bool quant = is_quant_dtype(dtype);
    if (!lw.dense && lw.qparts.empty() && !quant) lw.dense = Tensor::create({lw.n, lw.k}, dtype_, device_, device_id_);
    const size_t elems = rows * lw.k;
    if (lw.dense) {
        if (!quant) {
            convert_rows(*lw.dense, row0, data, dtype, elems);
            return;
        }
        std::vector<float> tmp(elems);  // [rows, k]
        quant::dequantize_rows(data, dtype, tmp.data(), LLAISYS_DTYPE_F32, rows, lw.k);
        convert_rows(*lw.dense, row0, tmp.data(), LLAISYS_DTYPE_F32, elems);
        return;
    }
    LLAISYS_CHECK(quant, LLAISYS_STATUS_DTYPE_MISMATCH, "weight '", name, "' is ", dtype_name(dtype),
                  " but the weights it is fused with (q/k/v, or gate/up) were set block-quantized: a fused linear "
                  "is stored one way, so give them all float or all block-quantized types (quantized types may "
                  "differ between them)");
    tensor_t part = Tensor::create({rows, lw.k}, dtype, device_, device_id_);  // [rows, k] blocks
    part->load(data, part->nbytes());
    const ops::cpu::QuantRows view{row0, rows, dtype, quant::row_bytes(dtype, lw.k), part->data()};
    size_t at = 0;
    while (at < lw.qrows.size() && lw.qrows[at].row0 < row0) at++;
    if (at < lw.qrows.size() && lw.qrows[at].row0 == row0) {  // the same slot again
        lw.qparts[at] = std::move(part);
        lw.qrows[at] = view;
    } else {
        lw.qparts.insert(lw.qparts.begin() + ptrdiff_t(at), std::move(part));
        lw.qrows.insert(lw.qrows.begin() + ptrdiff_t(at), view);
    }
}

// The untied embedding given block-quantized on the CPU: kept quantized (rows dequantized as
// looked up), replacing the float table.
void WeightStore::set_embed_quant(Slot &s, const void *data, llaisysDataType_t dtype) {
    auto q = std::make_unique<ops::cpu::QuantWeight>(s.shape[0], s.shape[1]);
    q->set_rows(0, s.shape[0], data, dtype);
    w_.embed_q = std::move(q);
    w_.embed.reset();
    s.dst.reset();
}

std::vector<std::string> WeightStore::missing() const {
    std::vector<std::string> out;
    for (const Slot &s : slots_) {
        if (!s.set) out.push_back(s.name);
    }
    return out;
}

size_t WeightStore::bytes() const {
    size_t total = w_.screen ? w_.screen->bytes() : 0;
    auto tensor = [&](const tensor_t &t) { total += t ? t->nbytes() : 0; };
    auto linear = [&](const LinearWeight &lw) {
        total += lw.packed ? lw.packed->bytes() : 0;
        total += lw.quant ? lw.quant->bytes() : 0;
        tensor(lw.dense);
        for (const tensor_t &p : lw.qparts) tensor(p);
    };
    tensor(w_.embed);
    total += w_.embed_q ? w_.embed_q->bytes() : 0;
    tensor(w_.final_norm);
    linear(w_.lm_head);
    for (const LayerWeights &L : w_.layers) {
        tensor(L.in_norm);
        linear(L.qkv_w);
        tensor(L.qkv_b);
        tensor(L.q_norm);
        tensor(L.k_norm);
        linear(L.o_w);
        tensor(L.post_norm);
        linear(L.gate_up_w);
        linear(L.down_w);
        linear(L.router_w);
        for (const LinearWeight &e : L.exp_gate_up.experts) linear(e);
        for (const LinearWeight &e : L.exp_down.experts) linear(e);
        linear(L.shared_gate_up_w);
        linear(L.shared_down_w);
        linear(L.shared_gate_w);
    }
    return total;
}

}  // namespace llaisys::models
