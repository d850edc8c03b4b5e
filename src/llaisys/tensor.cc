// C ABI: tensors (include/llaisys/tensor.h).
#include "guard.hpp"

#include "llaisys/tensor.h"

#include "../utils/types.hpp"

#include <vector>

using namespace llaisys;
using capi::guard;
using capi::guard_value;
using capi::new_handle;
using capi::tensor_of;

namespace {

std::vector<size_t> dims(const size_t *values, size_t n, const char *what) {
    LLAISYS_CHECK_ARG(n <= LLAISYS_TENSOR_MAX_DIMS, what, " has ", n, " entries, more than the maximum of ",
                      LLAISYS_TENSOR_MAX_DIMS);
    LLAISYS_CHECK_ARG(values != nullptr || n == 0, what, " is NULL");
    return std::vector<size_t>(values, values + n);
}

}  // namespace

extern "C" {

llaisysStatus_t llaisysTensorCreate2(const size_t *shape, size_t ndim, llaisysDataType_t dtype,
                                     llaisysDeviceType_t device, int device_id, llaisysTensor_t *out) {
    return capi::create_into(out, [&] {
        dtype = capi::enum_arg(dtype);
        device = capi::enum_arg(device);
        return new_handle(Tensor::create(dims(shape, ndim, "shape"), dtype, device, device_id));
    });
}

// Deprecated: llaisysTensorCreate2 with the handle as the return value.
llaisysTensor_t llaisysTensorCreate(const size_t *shape, size_t ndim, llaisysDataType_t dtype,
                                    llaisysDeviceType_t device, int device_id) {
    llaisysTensor_t t = nullptr;
    llaisysTensorCreate2(shape, ndim, dtype, device, device_id, &t);
    return t;
}

llaisysStatus_t llaisysTensorDestroy(llaisysTensor_t tensor) { return capi::destroy(tensor, "tensor"); }

llaisysStatus_t llaisysTensorLoad(llaisysTensor_t tensor, const void *src, size_t size) {
    return guard([&] { tensor_of(tensor, "tensor")->load(src, size); });
}

llaisysStatus_t llaisysTensorRead(llaisysTensor_t tensor, void *dst, size_t capacity) {
    return guard([&] { tensor_of(tensor, "tensor")->read(dst, capacity); });
}

size_t llaisysTensorNdim(llaisysTensor_t tensor) {
    return guard_value<size_t>(0, [&] { return tensor_of(tensor, "tensor")->ndim(); });
}

size_t llaisysTensorNumel(llaisysTensor_t tensor) {
    return guard_value<size_t>(0, [&] { return tensor_of(tensor, "tensor")->numel(); });
}

llaisysDataType_t llaisysTensorDataType(llaisysTensor_t tensor) {
    return guard_value(LLAISYS_DTYPE_INVALID, [&] { return tensor_of(tensor, "tensor")->dtype(); });
}

llaisysDeviceType_t llaisysTensorDeviceType(llaisysTensor_t tensor) {
    return guard_value(LLAISYS_DEVICE_CPU, [&] { return tensor_of(tensor, "tensor")->device(); });
}

int llaisysTensorDeviceId(llaisysTensor_t tensor) {
    return guard_value(-1, [&] { return tensor_of(tensor, "tensor")->device_id(); });
}

int llaisysTensorIsContiguous(llaisysTensor_t tensor) {
    return guard_value(0, [&] { return tensor_of(tensor, "tensor")->is_contiguous() ? 1 : 0; });
}

llaisysStatus_t llaisysTensorShape(llaisysTensor_t tensor, size_t *shape, size_t capacity) {
    return guard([&] {
        const Tensor &t = *tensor_of(tensor, "tensor");
        LLAISYS_CHECK(capacity >= t.ndim(), LLAISYS_STATUS_BUFFER_TOO_SMALL, "shape buffer holds ", capacity,
                      " entries, tensor has ", t.ndim(), " dims");
        LLAISYS_CHECK_ARG(shape != nullptr || t.ndim() == 0, "shape is NULL");
        for (size_t i = 0; i < t.ndim(); i++) shape[i] = t.shape()[i];
    });
}

llaisysStatus_t llaisysTensorStrides(llaisysTensor_t tensor, ptrdiff_t *strides, size_t capacity) {
    return guard([&] {
        const Tensor &t = *tensor_of(tensor, "tensor");
        LLAISYS_CHECK(capacity >= t.ndim(), LLAISYS_STATUS_BUFFER_TOO_SMALL, "strides buffer holds ", capacity,
                      " entries, tensor has ", t.ndim(), " dims");
        LLAISYS_CHECK_ARG(strides != nullptr || t.ndim() == 0, "strides is NULL");
        for (size_t i = 0; i < t.ndim(); i++) strides[i] = t.strides()[i];
    });
}

void *llaisysTensorData(llaisysTensor_t tensor) {
    return guard_value<void *>(nullptr, [&] { return static_cast<void *>(tensor_of(tensor, "tensor")->data()); });
}

llaisysTensor_t llaisysTensorView(llaisysTensor_t tensor, const size_t *shape, size_t ndim) {
    return guard_value<llaisysTensor_t>(nullptr, [&] {
        return new_handle(tensor_of(tensor, "tensor")->view(dims(shape, ndim, "shape")));
    });
}

llaisysTensor_t llaisysTensorPermute(llaisysTensor_t tensor, const size_t *order, size_t ndim) {
    return guard_value<llaisysTensor_t>(nullptr, [&] {
        return new_handle(tensor_of(tensor, "tensor")->permute(dims(order, ndim, "order")));
    });
}

llaisysTensor_t llaisysTensorSlice(llaisysTensor_t tensor, size_t dim, size_t start, size_t end) {
    return guard_value<llaisysTensor_t>(nullptr,
                                        [&] { return new_handle(tensor_of(tensor, "tensor")->slice(dim, start, end)); });
}

llaisysTensor_t llaisysTensorReshape(llaisysTensor_t tensor, const size_t *shape, size_t ndim) {
    return guard_value<llaisysTensor_t>(nullptr, [&] {
        return new_handle(tensor_of(tensor, "tensor")->reshape(dims(shape, ndim, "shape")));
    });
}

llaisysTensor_t llaisysTensorContiguous(llaisysTensor_t tensor) {
    return guard_value<llaisysTensor_t>(nullptr,
                                        [&] { return new_handle(tensor_of(tensor, "tensor")->contiguous()); });
}

llaisysStatus_t llaisysTensorCopy(llaisysTensor_t dst, llaisysTensor_t src) {
    return guard([&] { tensor_of(dst, "dst")->copy_from(*tensor_of(src, "src")); });
}

llaisysStatus_t llaisysTensorDebug(llaisysTensor_t tensor, size_t max_elements) {
    return guard([&] { tensor_of(tensor, "tensor")->debug(max_elements); });
}

}  // extern "C"
