#include "cublas_loader.hpp"

#include "../../../device/nvidia/cuda_check.hpp"
#include "../../../utils/error.hpp"

#include <dlfcn.h>

#include <cstddef>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#ifdef LLAISYS_HAVE_CUBLAS_HEADER
#include <cublas_api.h>
#include <type_traits>
// The hand-written declarations must match the real header.
namespace llaisys::ops::nvidia::cublas {
static_assert(std::is_same_v<Handle, cublasHandle_t>);
static_assert(kStatusSuccess == CUBLAS_STATUS_SUCCESS && kOpN == CUBLAS_OP_N && kOpT == CUBLAS_OP_T);
static_assert(kDefaultMath == CUBLAS_DEFAULT_MATH && kGemmDefault == CUBLAS_GEMM_DEFAULT);
static_assert(kCompute32F == CUBLAS_COMPUTE_32F && kCompute32FPedantic == CUBLAS_COMPUTE_32F_PEDANTIC);
static_assert(sizeof(cublasStatus_t) == sizeof(int) && sizeof(cublasOperation_t) == sizeof(int) &&
              sizeof(cublasMath_t) == sizeof(int) && sizeof(cublasComputeType_t) == sizeof(int) &&
              sizeof(cublasGemmAlgo_t) == sizeof(int));
static_assert(std::is_same_v<decltype(&cublasCreate_v2), cublasStatus_t (*)(cublasHandle_t *)>);
static_assert(std::is_same_v<decltype(&cublasSetStream_v2), cublasStatus_t (*)(cublasHandle_t, cudaStream_t)>);
// (compiles only if cublasGemmEx has exactly this overload)
[[maybe_unused]] constexpr auto kGemmExSignature = static_cast<cublasStatus_t (*)(
    cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void *, const void *, cudaDataType, int,
    const void *, cudaDataType, int, const void *, void *, cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t)>(
    &cublasGemmEx);
static_assert(std::is_same_v<decltype(&cublasSetMathMode), cublasStatus_t (*)(cublasHandle_t, cublasMath_t)>);
static_assert(std::is_same_v<decltype(&cublasGetStatusString), const char *(*)(cublasStatus_t)>);
static_assert(std::is_same_v<decltype(&cublasDestroy_v2), cublasStatus_t (*)(cublasHandle_t)>);
static_assert(std::is_same_v<decltype(&cublasSetWorkspace_v2), cublasStatus_t (*)(cublasHandle_t, void *, size_t)>);
}  // namespace llaisys::ops::nvidia::cublas
#endif

namespace llaisys::ops::nvidia::cublas {
namespace {

template <class F>
void resolve(void *lib, const char *name, F &fn, const std::string &from) {
    void *sym = dlsym(lib, name);
    LLAISYS_CHECK(sym != nullptr, LLAISYS_STATUS_UNSUPPORTED, "cuBLAS: ", from, " has no symbol ", name);
    fn = reinterpret_cast<F>(sym);
}

// The entry points the wrapped set_stream calls, and the workspace bound to each handle.
int (*raw_set_stream)(Handle, cudaStream_t) = nullptr;    // cublasSetStream_v2
int (*raw_set_workspace)(Handle, void *, size_t) = nullptr;  // cublasSetWorkspace_v2

struct Binding {
    Handle handle;
    void *workspace;  // [bytes] DEVICE
    size_t bytes;
};

struct Bindings {
    std::mutex mutex;
    std::vector<Binding> list;  // one per handle with a workspace: a few (a handle per thread and device)
};

Bindings &bindings() {
    static Bindings *b = new Bindings;  // never destroyed: threads may unbind during process exit
    return *b;
}

int set_stream_keeping_workspace(Handle h, cudaStream_t stream) {
    const int status = raw_set_stream(h, stream);
    if (status != kStatusSuccess) return status;
    Bindings &b = bindings();
    std::lock_guard<std::mutex> lock(b.mutex);
    for (const Binding &w : b.list) {
        if (w.handle == h) return raw_set_workspace(h, w.workspace, w.bytes);
    }
    return status;
}

Api load() {
    std::string tried;
    void *lib = nullptr;
    std::string from;
    auto attempt = [&](const char *name) {
        if (lib) return;
        lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
        if (lib) {
            from = name;
        } else {
            const char *why = dlerror();
            tried += std::string("\n  ") + name + ": " + (why ? why : "not found");
        }
    };
    if (const char *env = std::getenv("LLAISYS_CUBLAS_LIBRARY"); env && *env) attempt(env);
    attempt("libcublas.so.13");
    attempt("libcublas.so.12");
    attempt("libcublas.so");
    LLAISYS_CHECK(lib != nullptr, LLAISYS_STATUS_UNSUPPORTED,
                  "linear on the NVIDIA device needs cuBLAS (12 or 13), which could not be loaded; put its "
                  "directory on LD_LIBRARY_PATH or set LLAISYS_CUBLAS_LIBRARY. Tried:", tried);
    Api a{};
    resolve(lib, "cublasCreate_v2", a.create, from);
    resolve(lib, "cublasDestroy_v2", a.destroy, from);
    resolve(lib, "cublasSetStream_v2", raw_set_stream, from);
    resolve(lib, "cublasSetWorkspace_v2", raw_set_workspace, from);
    a.set_stream = set_stream_keeping_workspace;
    resolve(lib, "cublasSetMathMode", a.set_math_mode, from);
    resolve(lib, "cublasGetStatusString", a.status_string, from);
    resolve(lib, "cublasGemmEx", a.gemm_ex, from);
    return a;  // the library stays loaded for the life of the process
}

}  // namespace

const Api &api() {
    static const Api loaded = load();  // a failed load throws and is retried on the next call
    return loaded;
}

void bind_workspace(Handle h, void *workspace, size_t bytes) {
    api();  // loads raw_set_workspace
    {
        Bindings &b = bindings();
        std::lock_guard<std::mutex> lock(b.mutex);
        std::vector<Binding> &l = b.list;
        for (size_t i = 0; i < l.size(); i++) {
            if (l[i].handle == h) {
                l.erase(l.begin() + std::ptrdiff_t(i));
                break;
            }
        }
        if (workspace) l.push_back(Binding{h, workspace, bytes});
    }
    if (workspace) check(raw_set_workspace(h, workspace, bytes), "cublasSetWorkspace");
}

void check(int status, const char *what) {
    if (status == kStatusSuccess) return;
    const char *msg = api().status_string ? api().status_string(status) : nullptr;
    // cuBLAS reports a corrupted context as its own status (EXECUTION_FAILED...): the CUDA
    // runtime's last error tells whether the cause is sticky (it stays set when it is)
    const cudaError_t cuda = cudaPeekAtLastError();
    if (device::nvidia::is_sticky(cuda)) {
        fail(LLAISYS_STATUS_DEVICE_LOST, what, " failed: ", msg ? msg : "cuBLAS error", " (status ", status,
             "), after ", cudaGetErrorName(cuda), ": the CUDA context is lost (a sticky error): every later call on "
             "the device fails until the process restarts");
    }
    fail(LLAISYS_STATUS_DEVICE_ERROR, what, " failed: ", msg ? msg : "cuBLAS error", " (status ", status, ")");
}

}  // namespace llaisys::ops::nvidia::cublas
