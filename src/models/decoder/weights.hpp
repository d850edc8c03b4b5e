// The decoder's weights: storage per layer, and the slot table that maps each settable weight
// (by kind and layer, or by its HF name) onto that storage. q/k/v land in one fused linear
// and gate/up in another; slots exist only for what the config has (biases with qkv_bias,
// q/k norms with qk_norm, lm_head when not tied).
#pragma once

#include "../../ops/linear/cpu/logit_screen.hpp"
#include "../../ops/linear/cpu/packed.hpp"
#include "../../ops/linear/cpu/quant_weight.hpp"
#include "../../tensor/tensor.hpp"
#include "params.hpp"

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace llaisys::models {

// A linear layer's weight W [n, k], stored once in the form its device's GEMM streams. On the
// CPU, float weights are packed at load into panels in the model dtype
// (ops/linear/cpu/packed.hpp) and block-quantized ones (GGUF Q4_K, Q8_0, ...) are kept
// quantized in the quantized kernels' layout (ops/linear/cpu/quant_weight.hpp); which one is
// decided by the first weight set into it, and the HF-layout copy is never kept. On a GPU the
// first weight set decides too: block-quantized parts are kept as GGUF blocks in device memory
// (qparts, read by ops/linear/nvidia/quant_linear_nvidia.hpp), float ones make W the HF layout
// in device memory in the model dtype (dense: cuBLAS reads it as is; quantized parts set into
// a dense W later are dequantized on the way in). Once loaded, exactly one form is set.
struct LinearWeight {
    size_t n = 0, k = 0;
    std::unique_ptr<ops::cpu::PackedWeight> packed;  // CPU, float weights
    std::unique_ptr<ops::cpu::QuantWeight> quant;    // CPU, block-quantized weights
    tensor_t dense;                                  // NVIDIA: [n, k]
    std::vector<tensor_t> qparts;                    // NVIDIA: the quantized parts, [rows_i, k] each
    std::vector<ops::cpu::QuantRows> qrows;          // NVIDIA: their row ranges (device data), by row0
};

// The experts of one sparse layer's projection: E matrices W_e [n, k], the HF 3-D tensor
// [E, n, k] cut along its first axis, each stored as a LinearWeight of its own (packed panels or
// GGUF blocks on the CPU, dense [n, k] or GGUF blocks on a GPU) so that a step streams only the
// chosen experts' bytes.
struct ExpertWeight {
    size_t n = 0, k = 0;               // each expert's rows and inputs
    std::vector<LinearWeight> experts;  // [E]
};

struct LayerWeights {
    tensor_t in_norm;        // [H]
    LinearWeight qkv_w;      // [(nh + 2 nkv) * hd, H]  rows: q heads, then k heads, then v heads
    tensor_t qkv_b;          // [(nh + 2 nkv) * hd]; null without qkv_bias
    tensor_t q_norm;         // [hd]; null without qk_norm
    tensor_t k_norm;         // [hd]; null without qk_norm
    LinearWeight o_w;        // [H, nh * hd]
    tensor_t post_norm;      // [H]
    // dense layers (every layer of a dense model)
    LinearWeight gate_up_w;  // [2 I, H]  rows: gate, then up
    LinearWeight down_w;     // [H, I]
    // sparse layers (Config::sparse[l]): the router, E experts, the optional shared expert
    bool sparse = false;
    LinearWeight router_w;          // [E, H]
    ExpertWeight exp_gate_up;       // [E][2 Ie, H]  rows: gate, then up
    ExpertWeight exp_down;          // [E][H, Ie]
    LinearWeight shared_gate_up_w;  // [2 Is, H]; unset without a shared expert
    LinearWeight shared_down_w;     // [H, Is]
    LinearWeight shared_gate_w;     // [1, H]  the shared expert's sigmoid gate
};

struct Weights {
    tensor_t embed;        // [V, H]; null when tied (the lookup then reads rows of lm_head) or quantized
    // CPU: a block-quantized embedding [V, H] (GGUF token_embd), rows dequantized as looked up
    std::unique_ptr<ops::cpu::QuantWeight> embed_q;
    tensor_t final_norm;   // [H]
    LinearWeight lm_head;  // [V, H]; holds the embedding too when tied (stored once)
    // CPU: an int8 copy of lm_head that finds greedy rows' tokens exactly while reading half
    // its bytes (logit_screen.hpp); null on a GPU or with LLAISYS_GREEDY_SCREEN=0.
    std::unique_ptr<ops::cpu::LogitScreen> screen;
    std::vector<LayerWeights> layers;
};

// The weights of one model plus where each settable weight lands.
class WeightStore {
public:
    WeightStore(const Config &c, llaisysDeviceType_t device, int device_id);

    const Weights &weights() const { return w_; }

    // Copies one host weight into its slot: by `name` when not NULL, else by (kind, layer).
    // Errors name the slot: unknown names, slots this model lacks, wrong shapes and dtypes.
    void set(const char *name, llaisysWeightKind_t kind, int32_t layer, const void *data, llaisysDataType_t dtype,
             const std::vector<size_t> &shape);
    std::vector<std::string> missing() const;  // HF names of the unset slots, in slot order
    size_t bytes() const;                      // weights as stored (packed panels, screen included)

private:
    // Where one weight lands: rows [row0, row0 + shape[0]) of `dst`, or of `lin` when set, or
    // rows [row0, row0 + shape[1]) of every expert of `exp` (shape [E, rows, k]) when set.
    struct Slot {
        std::string name;           // HF name
        tensor_t dst;
        LinearWeight *lin = nullptr;  // owned by w_
        ExpertWeight *exp = nullptr;  // owned by w_
        size_t row0 = 0;
        std::vector<size_t> shape;  // the HF shape
        bool set = false;
        bool embed = false;         // the untied embedding (may be stored quantized)
    };
    void add(llaisysWeightKind_t kind, int32_t layer, std::string name, tensor_t dst, LinearWeight *lin, size_t row0,
             std::vector<size_t> shape);
    Slot &find(const char *name, llaisysWeightKind_t kind, int32_t layer);
    void set_linear(Slot &s, const void *data, llaisysDataType_t dtype);
    void fill_linear(LinearWeight &lw, const std::string &name, size_t row0, size_t rows, const void *data,
                     llaisysDataType_t dtype);
    void set_experts(Slot &s, const void *data, llaisysDataType_t dtype);
    void add_sparse_layer(const llaisysModelParams_t &p, size_t l);
    void set_embed_quant(Slot &s, const void *data, llaisysDataType_t dtype);
    void set_linear_gpu(Slot &s, const void *data, llaisysDataType_t dtype);
    void fill_linear_gpu(LinearWeight &lw, const std::string &name, size_t row0, size_t rows, const void *data,
                         llaisysDataType_t dtype);


    const char *arch_;
    bool tied_;
    size_t n_layers_;
    llaisysDeviceType_t device_;
    int device_id_;
    llaisysDataType_t dtype_;  // the model dtype: float weights are stored in it
    Weights w_;
    std::vector<Slot> slots_;                          // in creation order
    std::map<std::string, size_t> by_name_;            // HF name -> slot
    std::map<std::pair<int, int32_t>, size_t> by_kind_;  // (kind, layer) -> slot
};

}  // namespace llaisys::models
