// The one place where C++ exceptions become C status codes. Every exported function body
// runs inside guard() / guard_value(), so nothing throws across the C ABI.
#pragma once

#include "../core/threads.hpp"
#include "../tensor/tensor.hpp"
#include "../utils/error.hpp"
#include "../utils/types.hpp"
#include "handles.hpp"
#include "llaisys.h"
#include "llaisys/kv_cache.h"
#include "llaisys/models/qwen2.h"
#include "llaisys/runtime.h"
#include "llaisys/tensor.h"

#include <cstring>
#include <new>
#include <string>
#include <type_traits>

// A tensor handle is a registered tensor_t (a view: its own shape and strides over shared storage).
LLAISYS_HANDLE_TYPE(llaisysTensor_t, llaisys::Tensor, llaisys::capi::HandleKind::Tensor);

namespace llaisys::capi {

llaisysStatus_t report(llaisysStatus_t status, const std::string &message);

// Run f(); map exceptions to a status and the thread's last error. The calling thread's
// OpenMP team size follows llaisysSetNumThreads first (core/threads.hpp).
template <class F>
llaisysStatus_t guard(F &&f) noexcept {
    try {
        core::apply_threads();
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

// The one constructor convention: `llaisysStatus_t llaisys<Noun>Create(<inputs>, H *out)`.
// *out is set to NULL before anything else (so it is NULL on every error), a NULL `out` is
// INVALID_ARGUMENT "out is NULL", and `make()` returns the new handle on success.
template <class H, class F>
llaisysStatus_t create_into(H *out, F &&make) noexcept {
    if (out) *out = nullptr;
    return guard([&] {
        LLAISYS_CHECK_ARG(out != nullptr, "out is NULL");
        *out = make();
    });
}

// The one destroy convention: `llaisysStatus_t llaisys<Noun>Destroy(H h)`. NULL is a no-op
// returning OK; a destroyed, foreign or wrong-kind handle is INVALID_ARGUMENT naming `what`
// and is left alone. The object goes with the last reference (a call still using it on
// another thread keeps it until that call returns).
template <class H>
llaisysStatus_t destroy(H h, const char *what) noexcept {
    return guard([&] {
        if (h) take(h, what);
    });
}

// The tensor behind a handle, kept alive by the returned pointer (use it as `*tensor_of(...)`
// within one expression, or hold it); INVALID_ARGUMENT naming `what` for NULL or dead handles.
inline tensor_t tensor_of(llaisysTensor_t h, const char *what) { return live(h, what); }

// The integer a C caller passed for an enum parameter. C lets any int stand where the ABI
// names an enum, but in C++ an enum holding a value outside its enumerators' range is
// undefined (UBSan: "load of value 42, which is not a valid value for type ..."), so entry
// points read enum arguments by their bytes, never by an enum-typed load, before checking them.
template <class E>
int enum_bits(const E &e) {
    static_assert(std::is_enum_v<E> && sizeof(E) == sizeof(int), "a C enum is an int");
    int v;
    std::memcpy(&v, &e, sizeof v);
    return v;
}

// `e` when it is one of lo..hi, else INVALID_ARGUMENT "unknown <what> <value>".
template <class E>
E enum_in_range(const E &e, E lo, E hi, const char *what) {
    int v = enum_bits(e);
    LLAISYS_CHECK_ARG(v >= int(lo) && v <= int(hi), "unknown ", what, " ", v);
    return static_cast<E>(v);
}

// Every enum argument of the C ABI goes through one of these first: `x = enum_arg(x);`.
// dtypes: the plain ones (INVALID..BOOL) and the block-quantized ones (100 + a GGML type id,
// a sparse range); a function that cannot take a quantized dtype refuses it by its own check.
inline llaisysDataType_t enum_arg(const llaisysDataType_t &x) {
    const int v = enum_bits(x);
    if (v > int(LLAISYS_DTYPE_BOOL) && v <= int(LLAISYS_DTYPE_IQ1_M) && is_quant_dtype(llaisysDataType_t(v))) {
        return llaisysDataType_t(v);
    }
    return enum_in_range(x, LLAISYS_DTYPE_INVALID, LLAISYS_DTYPE_BOOL, "dtype");
}
inline llaisysDeviceType_t enum_arg(const llaisysDeviceType_t &x) {
    return enum_in_range(x, LLAISYS_DEVICE_CPU, LLAISYS_DEVICE_NVIDIA, "device type");
}
inline llaisysMemoryKind_t enum_arg(const llaisysMemoryKind_t &x) {
    return enum_in_range(x, LLAISYS_MEMORY_HOST, LLAISYS_MEMORY_DEVICE, "memory kind");
}
inline llaisysMemcpyKind_t enum_arg(const llaisysMemcpyKind_t &x) {
    return enum_in_range(x, LLAISYS_MEMCPY_H2H, LLAISYS_MEMCPY_D2D, "memcpy kind");
}
inline llaisysKVLayout_t enum_arg(const llaisysKVLayout_t &x) {
    return enum_in_range(x, LLAISYS_KV_LAYOUT_BLOCK, LLAISYS_KV_LAYOUT_SLOT, "KV layout");
}

// Structs passed by pointer carry enums too: a copy with every enum field checked.
inline llaisysKVCacheParams_t checked(const llaisysKVCacheParams_t &p) {
    llaisysKVCacheParams_t c = p;
    c.layout = enum_arg(p.layout);
    c.dtype = enum_arg(p.dtype);
    c.device = enum_arg(p.device);
    return c;
}
inline llaisysQwen2Meta_t checked(const llaisysQwen2Meta_t &m) {
    llaisysQwen2Meta_t c = m;
    c.dtype = enum_arg(m.dtype);
    return c;
}

inline llaisysTensor_t new_handle(tensor_t t) { return make_handle<llaisysTensor_t>(std::move(t)); }

}  // namespace llaisys::capi
