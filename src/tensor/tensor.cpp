#include "tensor.hpp"

#include "../core/allocator.hpp"
#include "../device/runtime_api.hpp"
#include "../quant/dequant.hpp"
#include "../utils/checked.hpp"
#include "../utils/error.hpp"
#include "../utils/types.hpp"

#include <cstdio>
#include <cstring>
#include <numeric>
#include <optional>

namespace llaisys {

Storage::Storage(llaisysDeviceType_t device, int device_id, size_t size)
    : device_(device), device_id_(device_id), size_(size),
      data_(static_cast<std::byte *>(core::allocate(device, device_id, LLAISYS_MEMORY_DEVICE, size))) {}

Storage::~Storage() {
    try {
        core::release(device_, device_id_, LLAISYS_MEMORY_DEVICE, data_);
    } catch (...) {
        // a destructor must not throw; the registry already vouched for this pointer
    }
}

std::vector<ptrdiff_t> contiguous_strides(const std::vector<size_t> &shape) {
    std::vector<ptrdiff_t> strides(shape.size());
    ptrdiff_t s = 1;
    for (size_t i = shape.size(); i-- > 0;) {
        strides[i] = s;
        s *= ptrdiff_t(shape[i]);
    }
    return strides;
}

namespace {

size_t product(const std::vector<size_t> &shape) {
    size_t n = 1;
    for (size_t d : shape) n = checked_mul(n, d, "tensor shape");
    return n;
}

// A shape a tensor may take: at most MAX_DIMS dims, and strides and byte offsets that fit in
// ptrdiff_t: the product of the dims, zeros counted as ones (a [0, 2^62, 2^62] tensor holds
// nothing but its strides would still overflow), times the element size, is <= PTRDIFF_MAX.
void check_shape(const std::vector<size_t> &shape, size_t elsize) {
    LLAISYS_CHECK_ARG(shape.size() <= LLAISYS_TENSOR_MAX_DIMS, "ndim ", shape.size(), " exceeds the maximum of ",
                      LLAISYS_TENSOR_MAX_DIMS);
    size_t extent = elsize;
    for (size_t d : shape) extent = checked_mul(extent, d == 0 ? 1 : d, "tensor shape");
    LLAISYS_CHECK_ARG(extent <= size_t(PTRDIFF_MAX), "tensor shape of ", extent, " bytes is too large");
}

// Strides for seeing (shape, strides) as new_shape without a copy, if possible
// (the chunk-matching rule torch uses for view()).
std::optional<std::vector<ptrdiff_t>> view_strides(const std::vector<size_t> &shape,
                                                   const std::vector<ptrdiff_t> &strides,
                                                   const std::vector<size_t> &new_shape) {
    if (shape.empty() || product(shape) == 0) return contiguous_strides(new_shape);
    std::vector<ptrdiff_t> out(new_shape.size());
    ptrdiff_t view_d = ptrdiff_t(new_shape.size()) - 1;
    ptrdiff_t chunk_base = strides.back();
    size_t tensor_numel = 1, view_numel = 1;
    for (ptrdiff_t d = ptrdiff_t(shape.size()) - 1; d >= 0; d--) {
        tensor_numel *= shape[d];
        bool chunk_ends = d == 0 || (shape[d - 1] != 1 && strides[d - 1] != ptrdiff_t(tensor_numel) * chunk_base);
        if (!chunk_ends) continue;
        while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
            out[view_d] = ptrdiff_t(view_numel) * chunk_base;
            view_numel *= new_shape[view_d];
            view_d--;
        }
        if (view_numel != tensor_numel) return std::nullopt;
        if (d > 0) {
            chunk_base = strides[d - 1];
            tensor_numel = 1;
            view_numel = 1;
        }
    }
    if (view_d != -1) return std::nullopt;
    return out;
}

template <class V>
std::string join(const char *open, const V &v) {
    std::string s = open;
    for (size_t i = 0; i < v.size(); i++) s += (i ? ", " : "") + std::to_string(v[i]);
    return s + "]";
}

// Copy elements of `elsize` bytes from a strided source to a strided destination (host).
void strided_copy_host(std::byte *dst, const std::vector<ptrdiff_t> &dst_strides, const std::byte *src,
                       const std::vector<ptrdiff_t> &src_strides, const std::vector<size_t> &shape,
                       size_t elsize) {
    size_t n = product(shape);
    if (n == 0) return;
    size_t nd = shape.size();
    std::vector<size_t> idx(nd, 0);
    for (size_t k = 0; k < n; k++) {
        ptrdiff_t so = 0, dof = 0;
        for (size_t d = 0; d < nd; d++) {
            so += ptrdiff_t(idx[d]) * src_strides[d];
            dof += ptrdiff_t(idx[d]) * dst_strides[d];
        }
        std::memcpy(dst + dof * ptrdiff_t(elsize), src + so * ptrdiff_t(elsize), elsize);
        for (size_t d = nd; d-- > 0;) {
            if (++idx[d] < shape[d]) break;
            idx[d] = 0;
        }
    }
}

// A quantized shape: at least one dim, the last a multiple of the block size.
void check_quant_shape(const std::vector<size_t> &shape, llaisysDataType_t dtype) {
    if (!is_quant_dtype(dtype)) return;
    const size_t bs = quant_block_size(dtype);
    LLAISYS_CHECK(!shape.empty(), LLAISYS_STATUS_SHAPE_MISMATCH, "a ", dtype_name(dtype),
                  " tensor needs at least one dim (its rows of blocks)");
    LLAISYS_CHECK(shape.back() % bs == 0, LLAISYS_STATUS_SHAPE_MISMATCH, "last dim ", shape.back(), " of a ",
                  dtype_name(dtype), " tensor ", join("[", shape), " is not a multiple of its block size ", bs);
}

}  // namespace

Tensor::Tensor(std::shared_ptr<Storage> storage, size_t offset, std::vector<size_t> shape,
               std::vector<ptrdiff_t> strides, llaisysDataType_t dtype)
    : storage_(std::move(storage)), offset_(offset), shape_(std::move(shape)), strides_(std::move(strides)),
      dtype_(dtype) {}

tensor_t Tensor::create(const std::vector<size_t> &shape, llaisysDataType_t dtype, llaisysDeviceType_t device,
                        int device_id) {
    const bool quant = is_quant_dtype(dtype);
    size_t elsize = quant ? quant_block_bytes(dtype) : dtype_size(dtype);  // an upper bound per element
    LLAISYS_CHECK_ARG(elsize != 0, "invalid dtype ", int(dtype));
    check_shape(shape, elsize);
    check_quant_shape(shape, dtype);
    const size_t n = product(shape);
    const size_t bytes = quant ? n / quant_block_size(dtype) * elsize : n * elsize;
    auto storage = std::make_shared<Storage>(device, device_id, bytes);
    return tensor_t(new Tensor(std::move(storage), 0, shape, contiguous_strides(shape), dtype));
}

size_t Tensor::numel() const { return product(shape_); }
size_t Tensor::element_size() const {
    LLAISYS_CHECK(!is_quantized(), LLAISYS_STATUS_UNSUPPORTED, "a ", dtype_name(dtype_),
                  " tensor has no element size (its elements are packed in blocks): ", describe());
    return dtype_size(dtype_);
}

bool Tensor::is_quantized() const { return is_quant_dtype(dtype_); }
size_t Tensor::block_size() const { return is_quantized() ? quant_block_size(dtype_) : 1; }
size_t Tensor::block_bytes() const { return is_quantized() ? quant_block_bytes(dtype_) : dtype_size(dtype_); }

size_t Tensor::bytes_of(size_t elems) const {
    // internal invariant: callers count whole blocks
    LLAISYS_CHECK(elems % block_size() == 0, LLAISYS_STATUS_INTERNAL, "bytes_of(", elems, ") is not whole ",
                  dtype_name(dtype_), " blocks");
    return elems / block_size() * block_bytes();
}

bool Tensor::is_contiguous() const {
    if (numel() == 0) return true;  // nothing to lay out (torch and numpy agree)
    ptrdiff_t expected = 1;
    for (size_t i = shape_.size(); i-- > 0;) {
        if (shape_[i] != 1 && strides_[i] != expected) return false;
        expected *= ptrdiff_t(shape_[i]);
    }
    return true;
}

tensor_t Tensor::make_view(size_t offset, std::vector<size_t> shape, std::vector<ptrdiff_t> strides) const {
    return tensor_t(new Tensor(storage_, offset, std::move(shape), std::move(strides), dtype_));
}

tensor_t Tensor::view(const std::vector<size_t> &shape) const {
    check_shape(shape, block_bytes());
    LLAISYS_CHECK(product(shape) == numel(), LLAISYS_STATUS_SHAPE_MISMATCH, "cannot view ", describe(), " as ",
                  join("[", shape), ": element counts differ");
    if (is_quantized()) {
        check_quant_shape(shape, dtype_);
        LLAISYS_CHECK(is_contiguous(), LLAISYS_STATUS_SHAPE_MISMATCH, "cannot view ", describe(), " as ",
                      join("[", shape), ": a quantized tensor must be contiguous to be viewed (use reshape)");
        return make_view(offset_, shape, contiguous_strides(shape));
    }
    auto strides = view_strides(shape_, strides_, shape);
    LLAISYS_CHECK(strides.has_value(), LLAISYS_STATUS_SHAPE_MISMATCH, "cannot view ", describe(), " as ",
                  join("[", shape), " without a copy (use reshape)");
    return make_view(offset_, shape, *strides);
}

tensor_t Tensor::permute(const std::vector<size_t> &order) const {
    LLAISYS_CHECK(order.size() == ndim(), LLAISYS_STATUS_SHAPE_MISMATCH, "permute order has ", order.size(),
                  " entries for a ", ndim(), "-d tensor");
    std::vector<bool> seen(ndim(), false);
    std::vector<size_t> shape(ndim());
    std::vector<ptrdiff_t> strides(ndim());
    for (size_t i = 0; i < order.size(); i++) {
        LLAISYS_CHECK_ARG(order[i] < ndim() && !seen[order[i]], "permute order ", join("[", order),
                          " is not a permutation of 0..", ndim() - 1);
        seen[order[i]] = true;
        shape[i] = shape_[order[i]];
        strides[i] = strides_[order[i]];
    }
    LLAISYS_CHECK(!is_quantized() || order.back() == ndim() - 1, LLAISYS_STATUS_UNSUPPORTED, "permute ",
                  join("[", order), " of ", describe(), ": a quantized tensor keeps its last dim (the blocks) last");
    return make_view(offset_, shape, strides);
}

tensor_t Tensor::slice(size_t dim, size_t start, size_t end) const {
    LLAISYS_CHECK(dim < ndim(), LLAISYS_STATUS_OUT_OF_RANGE, "slice dim ", dim, " out of range for a ", ndim(),
                  "-d tensor");
    LLAISYS_CHECK(start <= end && end <= shape_[dim], LLAISYS_STATUS_OUT_OF_RANGE, "slice [", start, ", ", end,
                  ") out of range for dim ", dim, " of size ", shape_[dim]);
    LLAISYS_CHECK(!is_quantized() || dim + 1 < ndim() || (start == 0 && end == shape_[dim]),
                  LLAISYS_STATUS_UNSUPPORTED, "slice [", start, ", ", end, ") of the last dim of ", describe(),
                  ": a quantized tensor is sliced along whole rows only");
    std::vector<size_t> shape = shape_;
    shape[dim] = end - start;
    // A view without elements keeps the old offset: the new one may lie past the storage
    // (which is NULL for a zero-size tensor), and pointer arithmetic there is undefined.
    size_t offset = product(shape) == 0 ? offset_ : offset_ + bytes_of(start * size_t(strides_[dim]));
    return make_view(offset, shape, strides_);
}

tensor_t Tensor::reshape(const std::vector<size_t> &shape) const {
    check_shape(shape, block_bytes());
    LLAISYS_CHECK(product(shape) == numel(), LLAISYS_STATUS_SHAPE_MISMATCH, "cannot reshape ", describe(), " to ",
                  join("[", shape), ": element counts differ");
    if (is_quantized()) return contiguous()->view(shape);
    if (auto strides = view_strides(shape_, strides_, shape)) return make_view(offset_, shape, *strides);
    return contiguous()->view(shape);
}

tensor_t Tensor::contiguous() const {
    if (is_contiguous()) return make_view(offset_, shape_, strides_);
    auto out = create(shape_, dtype_, device(), device_id());
    out->copy_from(*this);
    return out;
}

void Tensor::copy_from(const Tensor &src) {
    LLAISYS_CHECK(src.shape_ == shape_, LLAISYS_STATUS_SHAPE_MISMATCH, "copy from ", src.describe(), " into ",
                  describe());
    LLAISYS_CHECK(src.dtype_ == dtype_, LLAISYS_STATUS_DTYPE_MISMATCH, "copy from ", src.describe(), " into ",
                  describe());
    LLAISYS_CHECK(src.device() == device() && src.device_id() == device_id(), LLAISYS_STATUS_DEVICE_MISMATCH,
                  "copy from ", src.describe(), " into ", describe());
    if (is_contiguous() && src.is_contiguous()) {
        auto kind = device() == LLAISYS_DEVICE_CPU ? LLAISYS_MEMCPY_H2H : LLAISYS_MEMCPY_D2D;
        device::runtime(device()).memcpy(device_id(), data(), src.data(), nbytes(), kind);
        return;
    }
    LLAISYS_CHECK(device() == LLAISYS_DEVICE_CPU, LLAISYS_STATUS_UNSUPPORTED,
                  "strided copies are only implemented on the CPU");
    if (!is_quantized()) {
        strided_copy_host(data(), strides_, src.data(), src.strides_, shape_, element_size());
        return;
    }
    // Quantized: copy whole rows (the last dim stays contiguous in every view of one), with
    // the other dims' strides counted in rows.
    const size_t k = shape_.back();
    if (k == 0) return;
    std::vector<size_t> rows_shape(shape_.begin(), shape_.end() - 1);
    std::vector<ptrdiff_t> ds(rows_shape.size()), ss(rows_shape.size());
    for (size_t d = 0; d < rows_shape.size(); d++) {
        ds[d] = strides_[d] / ptrdiff_t(k);
        ss[d] = src.strides_[d] / ptrdiff_t(k);
    }
    strided_copy_host(data(), ds, src.data(), ss, rows_shape, bytes_of(k));
}

void Tensor::load(const void *src, size_t size) {
    LLAISYS_CHECK_ARG(src != nullptr || size == 0, "load source is NULL");
    LLAISYS_CHECK_ARG(is_contiguous(), "load needs a contiguous tensor, got ", describe());
    LLAISYS_CHECK(size == nbytes(), LLAISYS_STATUS_SHAPE_MISMATCH, "load of ", size, " bytes into ", describe(),
                  " which holds ", nbytes(), " bytes");
    auto kind = device() == LLAISYS_DEVICE_CPU ? LLAISYS_MEMCPY_H2H : LLAISYS_MEMCPY_H2D;
    device::runtime(device()).memcpy(device_id(), data(), src, size, kind);
}

void Tensor::read(void *dst, size_t capacity) const {
    LLAISYS_CHECK_ARG(dst != nullptr || nbytes() == 0, "read destination is NULL");
    LLAISYS_CHECK(capacity >= nbytes(), LLAISYS_STATUS_BUFFER_TOO_SMALL, "read of ", describe(), " needs ",
                  nbytes(), " bytes, buffer has ", capacity);
    auto src = contiguous();
    auto kind = device() == LLAISYS_DEVICE_CPU ? LLAISYS_MEMCPY_H2H : LLAISYS_MEMCPY_D2H;
    device::runtime(device()).memcpy(device_id(), dst, src->data(), nbytes(), kind);
}

std::string Tensor::describe() const {
    const char *dev = device() == LLAISYS_DEVICE_CPU ? "cpu" : "nvidia";
    return str_cat("Tensor(shape=", join("[", shape_), ", strides=", join("[", strides_),
                   ", dtype=", dtype_name(dtype_), ", device=", dev, ":", device_id(), ")");
}

void Tensor::debug(size_t max_elements) const {
    std::printf("%s\n", describe().c_str());
    size_t n = numel();
    size_t shown = max_elements == 0 ? n : std::min(n, max_elements);
    std::vector<std::byte> host(nbytes());
    read(host.data(), host.size());
    const std::byte *p = host.data();
    std::vector<float> values;  // [numel] a quantized tensor's values, dequantized
    if (is_quantized() && n > 0) {
        values.resize(n);
        quant::dequantize_rows(p, dtype_, values.data(), LLAISYS_DTYPE_F32, n / shape_.back(), shape_.back());
    }
    for (size_t i = 0; i < shown; i++) {
        double v = 0;
        switch (dtype_) {
        case LLAISYS_DTYPE_F32: v = reinterpret_cast<const float *>(p)[i]; break;
        case LLAISYS_DTYPE_F16: v = to_f32(reinterpret_cast<const fp16_t *>(p)[i]); break;
        case LLAISYS_DTYPE_BF16: v = to_f32(reinterpret_cast<const bf16_t *>(p)[i]); break;
        case LLAISYS_DTYPE_F64: v = reinterpret_cast<const double *>(p)[i]; break;
        case LLAISYS_DTYPE_I32: v = reinterpret_cast<const int32_t *>(p)[i]; break;
        case LLAISYS_DTYPE_I64: v = double(reinterpret_cast<const int64_t *>(p)[i]); break;
        case LLAISYS_DTYPE_I8: v = reinterpret_cast<const int8_t *>(p)[i]; break;
        case LLAISYS_DTYPE_U8:
        case LLAISYS_DTYPE_BOOL: v = double(reinterpret_cast<const uint8_t *>(p)[i]); break;
        default: v = values[i]; break;  // quantized
        }
        std::printf("%s%g", i ? " " : "", v);
    }
    std::printf(shown < n ? " ... (%zu more)\n" : "\n", n - shown);
    std::fflush(stdout);
}

}  // namespace llaisys
