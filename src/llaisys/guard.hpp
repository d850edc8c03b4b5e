// The one place where C++ exceptions become C status codes. Every exported function body
// runs inside guard() / guard_value(), so nothing throws across the C ABI.
#pragma once

#include "../tensor/tensor.hpp"
#include "../utils/error.hpp"
#include "llaisys.h"
#include "llaisys/tensor.h"

#include <new>
#include <string>

// A C handle to a tensor: the magic word catches some uses of destroyed handles.
struct LlaisysTensor {
    static constexpr uint32_t kMagic = 0x7e45a11a;
    uint32_t magic = kMagic;
    llaisys::tensor_t tensor;
};

namespace llaisys::capi {

llaisysStatus_t report(llaisysStatus_t status, const std::string &message);

// Run f(); map exceptions to a status and the thread's last error.
template <class F>
llaisysStatus_t guard(F &&f) noexcept {
    try {
        f();
        return LLAISYS_STATUS_OK;
    } catch (const Error &e) {
        return report(e.status(), e.what());
    } catch (const std::bad_alloc &) {
        return report(LLAISYS_STATUS_OUT_OF_MEMORY, "out of memory");
    } catch (const std::exception &e) {
        return report(LLAISYS_STATUS_INTERNAL, std::string("internal error: ") + e.what());
    } catch (...) {
        return report(LLAISYS_STATUS_INTERNAL, "internal error: unknown exception");
    }
}

// Run f() and return its value, or `on_error` (with the last error set) if it throws.
template <class T, class F>
T guard_value(T on_error, F &&f) noexcept {
    T result = on_error;
    guard([&] { result = f(); });
    return result;
}

// The tensor behind a handle; throws INVALID_ARGUMENT naming `what` for NULL/stale handles.
inline Tensor &tensor_of(llaisysTensor_t h, const char *what) {
    LLAISYS_CHECK_ARG(h != nullptr, what, " is NULL");
    LLAISYS_CHECK_ARG(h->magic == LlaisysTensor::kMagic && h->tensor, what, " is not a live tensor handle");
    return *h->tensor;
}

inline llaisysTensor_t new_handle(tensor_t t) { return new LlaisysTensor{LlaisysTensor::kMagic, std::move(t)}; }

}  // namespace llaisys::capi
