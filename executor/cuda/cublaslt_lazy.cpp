// cuBLASLt, loaded on first use. Linking libcublasLt directly costs every oomb command about
// 210 MB of resident memory at start-up (the library's own initialisers run at load, before
// main), even `oomb models` and `oomb plan`, which never touch a GPU. So the backend does not
// link it: it defines the cuBLASLt entry points it calls (the same C prototypes, from the
// toolkit's header) and each resolves the real one from the library the first time it is called.
// The library is the toolkit's that the build found (OOMB_CUBLASLT_PATH), else its soname on the
// loader's search path. Where neither loads, the calls return CUBLAS_STATUS_NOT_INITIALIZED and
// the reason is printed once; the backend's usual status checks then name the failing call.
#include <cublasLt.h>
#include <dlfcn.h>

#include <cstdio>
#include <string>

#include "executor/cuda/cublaslt_lazy.h"

namespace oomb::cuda {
namespace {

struct Library {
  void* handle = nullptr;
  std::string error;
};

const Library& library() {
  static const Library lib = [] {
    Library l;
    for (const char* path : {OOMB_CUBLASLT_PATH, OOMB_CUBLASLT_SONAME}) {
      l.handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
      if (l.handle) return l;
      const char* e = dlerror();
      l.error += std::string(l.error.empty() ? "" : "; ") + (e ? e : path);
    }
    std::fprintf(stderr, "oomb: cuBLASLt could not be loaded (%s)\n", l.error.c_str());
    return l;
  }();
  return lib;
}

template <class Fn>
Fn resolve(const char* name) {
  const Library& l = library();
  return l.handle ? reinterpret_cast<Fn>(dlsym(l.handle, name)) : nullptr;
}

}  // namespace

bool cublaslt_loaded() {
  void* h = dlopen(OOMB_CUBLASLT_PATH, RTLD_NOW | RTLD_NOLOAD);
  if (!h) h = dlopen(OOMB_CUBLASLT_SONAME, RTLD_NOW | RTLD_NOLOAD);
  if (h) dlclose(h);  // NOLOAD took a reference
  return h != nullptr;
}

size_t cublaslt_version() { return cublasLtGetVersion(); }
std::string cublaslt_status_name(int status) { return cublasLtGetStatusName(static_cast<cublasStatus_t>(status)); }

std::string cublaslt_load_error() { return library().handle ? std::string() : library().error; }

}  // namespace oomb::cuda

// One forwarding definition per entry point the backend calls. A new cuBLASLt call is a link
// error until it is added here.
#define OOMB_CUBLASLT_FORWARD(ret, name, fail, params, args)                 \
  extern "C" ret CUBLASWINAPI name params {                                  \
    using Fn = ret(CUBLASWINAPI*) params;                                    \
    static const Fn fn = oomb::cuda::resolve<Fn>(#name);                     \
    return fn ? fn args : fail;                                              \
  }

OOMB_CUBLASLT_FORWARD(cublasStatus_t, cublasLtCreate, CUBLAS_STATUS_NOT_INITIALIZED, (cublasLtHandle_t * h), (h))
OOMB_CUBLASLT_FORWARD(cublasStatus_t, cublasLtDestroy, CUBLAS_STATUS_NOT_INITIALIZED, (cublasLtHandle_t h), (h))
OOMB_CUBLASLT_FORWARD(const char*, cublasLtGetStatusName, "cuBLASLt not loaded", (cublasStatus_t s), (s))
OOMB_CUBLASLT_FORWARD(const char*, cublasLtGetStatusString, "cuBLASLt not loaded", (cublasStatus_t s), (s))
OOMB_CUBLASLT_FORWARD(cublasStatus_t, cublasLtMatmul, CUBLAS_STATUS_NOT_INITIALIZED,
                      (cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void* alpha, const void* A,
                       cublasLtMatrixLayout_t Ad, const void* B, cublasLtMatrixLayout_t Bd, const void* beta,
                       const void* C, cublasLtMatrixLayout_t Cd, void* D, cublasLtMatrixLayout_t Dd,
                       const cublasLtMatmulAlgo_t* algo, void* ws, size_t ws_bytes, cudaStream_t stream),
                      (h, d, alpha, A, Ad, B, Bd, beta, C, Cd, D, Dd, algo, ws, ws_bytes, stream))
OOMB_CUBLASLT_FORWARD(cublasStatus_t, cublasLtMatmulAlgoGetHeuristic, CUBLAS_STATUS_NOT_INITIALIZED,
                      (cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t Ad,
                       cublasLtMatrixLayout_t Bd, cublasLtMatrixLayout_t Cd, cublasLtMatrixLayout_t Dd,
                       cublasLtMatmulPreference_t pref, int requested, cublasLtMatmulHeuristicResult_t* results,
                       int* returned),
                      (h, d, Ad, Bd, Cd, Dd, pref, requested, results, returned))
OOMB_CUBLASLT_FORWARD(cublasStatus_t, cublasLtMatmulDescCreate, CUBLAS_STATUS_NOT_INITIALIZED,
                      (cublasLtMatmulDesc_t * d, cublasComputeType_t compute, cudaDataType_t scale),
                      (d, compute, scale))
OOMB_CUBLASLT_FORWARD(cublasStatus_t, cublasLtMatmulDescDestroy, CUBLAS_STATUS_NOT_INITIALIZED,
                      (cublasLtMatmulDesc_t d), (d))
OOMB_CUBLASLT_FORWARD(cublasStatus_t, cublasLtMatmulDescSetAttribute, CUBLAS_STATUS_NOT_INITIALIZED,
                      (cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const void* buf, size_t bytes),
                      (d, attr, buf, bytes))
OOMB_CUBLASLT_FORWARD(cublasStatus_t, cublasLtMatmulPreferenceCreate, CUBLAS_STATUS_NOT_INITIALIZED,
                      (cublasLtMatmulPreference_t * p), (p))
OOMB_CUBLASLT_FORWARD(cublasStatus_t, cublasLtMatmulPreferenceDestroy, CUBLAS_STATUS_NOT_INITIALIZED,
                      (cublasLtMatmulPreference_t p), (p))
OOMB_CUBLASLT_FORWARD(cublasStatus_t, cublasLtMatmulPreferenceSetAttribute, CUBLAS_STATUS_NOT_INITIALIZED,
                      (cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                       size_t bytes),
                      (p, attr, buf, bytes))
OOMB_CUBLASLT_FORWARD(cublasStatus_t, cublasLtMatrixLayoutCreate, CUBLAS_STATUS_NOT_INITIALIZED,
                      (cublasLtMatrixLayout_t * l, cudaDataType type, uint64_t rows, uint64_t cols, int64_t ld),
                      (l, type, rows, cols, ld))
OOMB_CUBLASLT_FORWARD(cublasStatus_t, cublasLtMatrixLayoutDestroy, CUBLAS_STATUS_NOT_INITIALIZED,
                      (cublasLtMatrixLayout_t l), (l))
OOMB_CUBLASLT_FORWARD(size_t, cublasLtGetVersion, 0, (void), ())
