// Tensor: a strided n-d view over reference-counted device storage.
#pragma once

#include "llaisys.h"
#include "llaisys/tensor.h"

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace llaisys {

// One allocation on one device; freed when the last tensor using it goes.
class Storage {
public:
    Storage(llaisysDeviceType_t device, int device_id, size_t size);
    ~Storage();
    Storage(const Storage &) = delete;
    Storage &operator=(const Storage &) = delete;

    std::byte *data() const { return data_; }
    size_t size() const { return size_; }
    llaisysDeviceType_t device() const { return device_; }
    int device_id() const { return device_id_; }

private:
    llaisysDeviceType_t device_;
    int device_id_;
    size_t size_;
    std::byte *data_;
};

class Tensor;
using tensor_t = std::shared_ptr<Tensor>;

class Tensor {
public:
    // A new contiguous, uninitialised tensor. A block-quantized dtype needs ndim >= 1 and the
    // last dim a multiple of its block size (else SHAPE_MISMATCH).
    static tensor_t create(const std::vector<size_t> &shape, llaisysDataType_t dtype,
                           llaisysDeviceType_t device, int device_id = 0);

    const std::vector<size_t> &shape() const { return shape_; }
    const std::vector<ptrdiff_t> &strides() const { return strides_; }  // in elements
    size_t ndim() const { return shape_.size(); }
    size_t numel() const;
    llaisysDataType_t dtype() const { return dtype_; }
    // Bytes of one element; a block-quantized tensor has none (UNSUPPORTED): size its
    // memory with nbytes() or bytes_of().
    size_t element_size() const;
    // Block-quantized dtypes (GGUF layouts, src/quant/blocks.hpp) store the last dim as
    // blocks: a row of k elements is k / block_size() blocks of block_bytes() bytes. Other
    // dtypes: block_size() 1, block_bytes() the element size.
    bool is_quantized() const;
    size_t block_size() const;
    size_t block_bytes() const;
    // Bytes of `elems` consecutive elements (a multiple of block_size()).
    size_t bytes_of(size_t elems) const;
    size_t nbytes() const { return bytes_of(numel()); }
    llaisysDeviceType_t device() const { return storage_->device(); }
    int device_id() const { return storage_->device_id(); }
    bool is_contiguous() const;
    std::byte *data() const { return storage_->data() + offset_; }
    template <class T>
    T *data_as() const { return reinterpret_cast<T *>(data()); }

    // Views sharing storage. Views of a quantized tensor keep whole rows: view/reshape need
    // it contiguous and a last dim that is a multiple of the block size, permute keeps the
    // last dim last, slice cuts any dim but the last.
    tensor_t view(const std::vector<size_t> &shape) const;
    tensor_t permute(const std::vector<size_t> &order) const;
    tensor_t slice(size_t dim, size_t start, size_t end) const;
    // A view when the strides allow it, else a contiguous copy.
    tensor_t reshape(const std::vector<size_t> &shape) const;
    // Itself (shared) when contiguous, else a contiguous copy.
    tensor_t contiguous() const;

    // Copy all elements of src (same shape/dtype/device, any strides) into this tensor.
    void copy_from(const Tensor &src);
    // Host bytes in; this tensor must be contiguous and `size` equal nbytes().
    void load(const void *src, size_t size);
    // Elements in row-major order out to host memory of `capacity` bytes.
    void read(void *dst, size_t capacity) const;

    std::string describe() const;  // "Tensor(shape=[..], strides=[..], dtype=.., device=..)"
    void debug(size_t max_elements) const;

private:
    Tensor(std::shared_ptr<Storage> storage, size_t offset, std::vector<size_t> shape,
           std::vector<ptrdiff_t> strides, llaisysDataType_t dtype);
    tensor_t make_view(size_t offset, std::vector<size_t> shape, std::vector<ptrdiff_t> strides) const;

    std::shared_ptr<Storage> storage_;
    size_t offset_;  // bytes from storage start to element 0
    std::vector<size_t> shape_;
    std::vector<ptrdiff_t> strides_;
    llaisysDataType_t dtype_;
};

// Row-major strides of a contiguous tensor of `shape`.
std::vector<ptrdiff_t> contiguous_strides(const std::vector<size_t> &shape);

}  // namespace llaisys
