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
    static const char *names[] = {"EMBED", "FINAL_NORM", "LM_HEAD", "ATTN_NORM", "Q", "K", "V", "Q_BIAS", "K_BIAS",
                                  "V_BIAS", "O", "Q_NORM", "K_NORM", "MLP_NORM", "GATE", "UP", "DOWN"};
    return kind >= 0 && kind <= LLAISYS_WEIGHT_DOWN ? names[kind] : nullptr;
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
    auto make_linear = [&](size_t n, size_t k) {
        LinearWeight lw;  // its storage (packed, quantized, dense) is made by the first weight set into it
        lw.n = n;
        lw.k = k;
        if (device != LLAISYS_DEVICE_CPU) {
            checked_mul(n, k, "linear weight elements");
        } else {  // whichever it will be, its size must fit: rows padded to whole panels, k to pairs
            checked_mul(checked_round_up(n, 32, "linear weight rows (padded to 32-row panels)"),
                        checked_round_up(k, 2, "linear weight width"), "packed linear weight elements");
        }
        return lw;
    };
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
        L.gate_up_w = make_linear(2 * I, H);
        L.down_w = make_linear(H, I);
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
        lin(LLAISYS_WEIGHT_GATE, li, pre + "mlp.gate_proj.weight", L.gate_up_w, 0, {I, H});
        lin(LLAISYS_WEIGHT_UP, li, pre + "mlp.up_proj.weight", L.gate_up_w, I, {I, H});
        lin(LLAISYS_WEIGHT_DOWN, li, pre + "mlp.down_proj.weight", L.down_w, 0, {H, I});
    }
}

void WeightStore::add(llaisysWeightKind_t kind, int32_t layer, std::string name, tensor_t dst, LinearWeight *lin,
                      size_t row0, std::vector<size_t> shape) {
    by_name_[name] = slots_.size();
    by_kind_[{int(kind), layer}] = slots_.size();
    slots_.push_back(Slot{std::move(name), std::move(dst), lin, row0, std::move(shape), false, false});
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
    LLAISYS_CHECK_ARG(it != by_kind_.end(), "this ", arch_, " model has no weight ", kname,
                      k == LLAISYS_WEIGHT_LM_HEAD           ? " (embeddings are tied)"
                      : k >= LLAISYS_WEIGHT_Q_BIAS && k <= LLAISYS_WEIGHT_V_BIAS ? " (qkv_bias is 0)"
                      : k == LLAISYS_WEIGHT_Q_NORM || k == LLAISYS_WEIGHT_K_NORM ? " (qk_norm is 0)"
                                                                                 : "");
    return slots_[it->second];
}

void WeightStore::set(const char *name, llaisysWeightKind_t kind, int32_t layer, const void *data,
                      llaisysDataType_t dtype, const std::vector<size_t> &shape) {
    Slot &s = find(name, kind, layer);
    LLAISYS_CHECK(shape == s.shape, LLAISYS_STATUS_SHAPE_MISMATCH, "weight '", s.name,
                  "' has the wrong shape for this model");
    const bool quant = is_quant_dtype(dtype);
    LLAISYS_CHECK(is_float_dtype(dtype) || quant, LLAISYS_STATUS_DTYPE_MISMATCH, "weight '", s.name,
                  "' must be f32, f16, bf16 or block-quantized (q4_0, q5_0, q8_0, q4_k, q5_k, q6_k), got ",
                  dtype_name(dtype));
    LLAISYS_CHECK_ARG(data != nullptr, "weight '", s.name, "' data is NULL");
    if (quant) {
        const size_t block = quant_block_size(dtype);
        LLAISYS_CHECK(shape.size() == 2 && shape[1] % block == 0, LLAISYS_STATUS_SHAPE_MISMATCH, "weight '", s.name,
                      "' is ", dtype_name(dtype), ", whose rows are blocks of ", block,
                      " elements: it must be 2-D with a row length divisible by ", block);
    }
    if (quant && device_ == LLAISYS_DEVICE_CPU && (s.lin || s.embed)) {
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
    LinearWeight &lw = *s.lin;
    const bool quant = is_quant_dtype(dtype);
    if (!lw.packed && !lw.quant) {
        if (quant) lw.quant = std::make_unique<ops::cpu::QuantWeight>(lw.n, lw.k);
        else lw.packed = std::make_unique<ops::cpu::PackedWeight>(lw.n, lw.k, dtype_);
    }
    LLAISYS_CHECK(quant == bool(lw.quant), LLAISYS_STATUS_DTYPE_MISMATCH, "weight '", s.name, "' is ",
                  dtype_name(dtype), " but the weights it is fused with (q/k/v, or gate/up) were set ",
                  lw.quant ? "block-quantized" : "as floats", ": a fused linear is stored one way, so give them "
                  "all float or all block-quantized types (quantized types may differ between them)");
    if (quant) {
        lw.quant->set_rows(s.row0, s.shape[0], data, dtype);
    } else {
        lw.packed->set_rows(s.row0, s.shape[0], data, dtype);
    }
    if (&lw == &w_.lm_head) {  // the lm_head is one tensor: it is whole now
        const char *env = std::getenv("LLAISYS_GREEDY_SCREEN");
        w_.screen.reset();
        // the screen reads an int8 copy of a packed float lm_head; a quantized one is read as is
        if (lw.packed && !(env && std::strcmp(env, "0") == 0)) {
            w_.screen = std::make_unique<ops::cpu::LogitScreen>(*lw.packed);
        }
    }
}

// GPU linear weights: the first weight set into a fused linear decides its storage. Quantized:
// each part is kept as its GGUF blocks in a device tensor of its own (a part set again is
// replaced), and a float part is refused as on the CPU. Float: the dense [n, k] tensor in the
// model dtype, into which later quantized parts are dequantized.
void WeightStore::set_linear_gpu(Slot &s, const void *data, llaisysDataType_t dtype) {
    LinearWeight &lw = *s.lin;
    const bool quant = is_quant_dtype(dtype);
    if (!lw.dense && lw.qparts.empty() && !quant) lw.dense = Tensor::create({lw.n, lw.k}, dtype_, device_, device_id_);
    const size_t elems = s.shape[0] * s.shape[1];
    if (lw.dense) {
        if (!quant) {
            convert_rows(*lw.dense, s.row0, data, dtype, elems);
            return;
        }
        std::vector<float> rows(elems);  // [rows, k]
        quant::dequantize_rows(data, dtype, rows.data(), LLAISYS_DTYPE_F32, s.shape[0], s.shape[1]);
        convert_rows(*lw.dense, s.row0, rows.data(), LLAISYS_DTYPE_F32, elems);
        return;
    }
    LLAISYS_CHECK(quant, LLAISYS_STATUS_DTYPE_MISMATCH, "weight '", s.name, "' is ", dtype_name(dtype),
                  " but the weights it is fused with (q/k/v, or gate/up) were set block-quantized: a fused linear "
                  "is stored one way, so give them all float or all block-quantized types (quantized types may "
                  "differ between them)");
    tensor_t part = Tensor::create({s.shape[0], s.shape[1]}, dtype, device_, device_id_);  // [rows, k] blocks
    part->load(data, part->nbytes());
    const ops::cpu::QuantRows view{s.row0, s.shape[0], dtype, quant::row_bytes(dtype, s.shape[1]), part->data()};
    size_t at = 0;
    while (at < lw.qrows.size() && lw.qrows[at].row0 < s.row0) at++;
    if (at < lw.qrows.size() && lw.qrows[at].row0 == s.row0) {  // the same slot again
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
    }
    return total;
}

}  // namespace llaisys::models
