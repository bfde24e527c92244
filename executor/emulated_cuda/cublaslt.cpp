// The emulated cuBLASLt: the part of NVIDIA's cuBLASLt API that the CUDA backend calls
// (executor/cuda/gemm.cpp, through cublaslt_lazy.cpp), built as a shared library that the lazy
// loader opens in place of libcublasLt. The C prototypes are the toolkit's (cublasLt.h). The
// semantics are written from NVIDIA's documentation, not from oomb's GEMM code, so that a wrong
// mapping in oomb gives a wrong answer here: the cuBLAS Library guide (docs.nvidia.com/cuda/cublas:
// "Data Layout", "cublasLtMatmul()" and its table of supported data types, "cublasComputeType_t")
// and the same reference text in the toolkit's cublasLt.h / cublas_api.h, quoted below by the
// enumerator it documents.
//
// Surface (anything else returns CUBLAS_STATUS_NOT_SUPPORTED, a malformed call INVALID_VALUE):
//   D = alpha * op(A) * op(B) + beta * C, one matrix (no batches), column-major layouts;
//   TRANSA / TRANSB in {N, T}; host pointer mode; the default epilogue;
//   compute 32F with A/B/C/D all R_32F, or A/B R_16BF with C/D R_16BF or R_32F;
//   compute 32F_FAST_TF32 with A/B/C/D all R_32F; scale type R_32F;
//   preferences MAX_WORKSPACE_BYTES, REDUCTION_SCHEME_MASK, MIN_ALIGNMENT_{A,B,C,D}_BYTES, SEARCH_MODE.
// The GEMM runs in stream order on the emulated device: cublasLtMatmul checks the call, copies
// what the GEMM needs and queues it as a library kernel (launch.h: in stream order, recorded by the
// emulated CUPTI as the kernel "emulated_cublasLt_gemm" under a driver launch, as the real library's
// kernels are), so the caller may destroy its descriptors (and the alpha / beta it pointed at) as
// soon as the call returns.
//
// OOMB_EMULATED_CUBLASLT_NO_BF16=1 makes the heuristic find no algorithm for bf16 operands, as a
// GPU without bf16 kernels for the case would, so that the backend's fp32 fallback runs in tests.
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <vector>

#include "executor/emulated_cuda/launch.h"
#include "executor/emulated_cuda/runtime.h"

// The handle's type is a pointer to this struct, which the header leaves incomplete.
struct cublasLtContext {
  int unused = 0;
};

namespace oomb::emulated_cuda::cublaslt {
namespace {

// CUBLAS_VERSION's encoding (major * 10000 + minor * 100 + patch): 13.99.99 is no release of
// NVIDIA's, so a version printed by oomb says the emulation answered.
constexpr size_t kVersion = 139999;
// The widest access the emulated algorithms make (a 128-bit vector load): an algorithm needs its
// matrices aligned to at most this many bytes.
constexpr uint32_t kWidestAccessBytes = 16;
// workspace: "Must be 256B aligned (i.e. lowest 8 bits of address must be 0)" (cublasLtMatmul()).
constexpr uintptr_t kWorkspaceAlignment = 256;
// The one emulated algorithm family needs no workspace and splits no dot product (no split-K).
constexpr uint64_t kAlgoWorkspaceBytes = 0;
constexpr uint32_t kAlgoReductionScheme = CUBLASLT_REDUCTION_SCHEME_NONE;
constexpr uint64_t kAlgoMagic = 0x6f6f6d62456d4c74;  // "oombEmLt": an algo this library filled in

struct Desc {
  int32_t compute = 0;
  int32_t scale = 0;
  int32_t pointer_mode = CUBLASLT_POINTER_MODE_HOST;
  int32_t trans_a = CUBLAS_OP_N;
  int32_t trans_b = CUBLAS_OP_N;
  int32_t trans_c = CUBLAS_OP_N;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
};

struct Layout {
  int32_t type = 0;
  uint64_t rows = 0;
  uint64_t cols = 0;
  int64_t ld = 0;
};

enum Matrix { kA, kB, kC, kD };

struct Preference {
  uint32_t search_mode = CUBLASLT_SEARCH_BEST_FIT;
  uint64_t max_workspace = 0;                           // "default: 0 - no workspace allowed"
  uint32_t reduction_mask = CUBLASLT_REDUCTION_SCHEME_MASK;
  uint32_t min_alignment[4] = {256, 256, 256, 256};     // "default: 256"
};

// What an algorithm descriptor carries: the problem types it was selected for and the alignment
// (bytes) it needs of each matrix's pointer and leading dimension (CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_*:
// "required for buffer pointer, leading dimension ...").
struct Algo {
  uint64_t magic = kAlgoMagic;
  int32_t compute = 0;
  int32_t scale = 0;
  int32_t type[4] = {};
  uint32_t alignment[4] = {};
};
static_assert(sizeof(Algo) <= sizeof(cublasLtMatmulAlgo_t));

// The descriptors live inside the header's opaque structs (whose sizes are what the *Init calls
// promise callers), so a handle is exactly the pointer type the header names.
template <class Body, class Opaque>
Opaque* create_opaque(const Body& body) {
  static_assert(sizeof(Body) <= sizeof(Opaque::data) && alignof(Body) <= alignof(Opaque));
  auto* o = new (std::nothrow) Opaque{};
  if (o) new (o->data) Body(body);
  return o;
}

template <class Body, class Opaque>
Body& body(Opaque* o) {
  return *std::launder(reinterpret_cast<Body*>(o->data));
}

size_t element_bytes(int32_t type) { return type == CUDA_R_16BF ? 2 : 4; }

// A validated problem: op(A) is m x k, op(B) k x n, C and D m x n.
struct Problem {
  Desc desc;
  Layout layout[4];
  uint64_t m = 0, n = 0, k = 0;
};

bool is_transpose(int32_t op) { return op == CUBLAS_OP_T; }

// Shapes first (a caller's mapping error is INVALID_VALUE, which oomb's status check reports),
// then whether the emulation models the configuration (NOT_SUPPORTED, which the backend may treat
// as "no algorithm").
cublasStatus_t check_problem(const Desc& desc, const Layout& a, const Layout& b, const Layout& c, const Layout& d,
                             Problem* out, const char** why) {
  // A layout's rows / cols are those of the stored matrix, before the op: op(A) = A^T is cols x rows.
  const uint64_t m = is_transpose(desc.trans_a) ? a.cols : a.rows;
  const uint64_t k = is_transpose(desc.trans_a) ? a.rows : a.cols;
  const uint64_t kb = is_transpose(desc.trans_b) ? b.cols : b.rows;
  const uint64_t n = is_transpose(desc.trans_b) ? b.rows : b.cols;
  *why = "op(A) m x k, op(B) k x n and D m x n do not agree";
  if (kb != k || d.rows != m || d.cols != n) return CUBLAS_STATUS_INVALID_VALUE;
  // Out of place, C and D "must have the same data type, number of rows, number of columns, batch
  // size, and memory order"; only their leading dimensions may differ (cublasLtMatmul()).
  *why = "C and D differ in rows, columns or type";
  if (c.rows != d.rows || c.cols != d.cols || c.type != d.type) return CUBLAS_STATUS_INVALID_VALUE;
  // CUBLASLT_MATRIX_LAYOUT_LD: "Currently only non-negative values are supported, must be large
  // enough so that matrix memory locations are not overlapping (e.g. greater or equal to
  // CUBLASLT_MATRIX_LAYOUT_ROWS in case of CUBLASLT_ORDER_COL)".
  *why = "a leading dimension is below its matrix's rows";
  for (const Layout* l : {&a, &b, &c, &d})
    if (l->ld < 0 || static_cast<uint64_t>(l->ld) < std::max<uint64_t>(l->rows, 1)) return CUBLAS_STATUS_INVALID_VALUE;

  // ROWS / COLS: "Usually only values that can be expressed as int32_t are supported."
  constexpr uint64_t kMaxDim = std::numeric_limits<int32_t>::max();
  *why = "a dimension does not fit int32_t";
  for (const Layout* l : {&a, &b, &c, &d})
    if (l->rows > kMaxDim || l->cols > kMaxDim) return CUBLAS_STATUS_NOT_SUPPORTED;
  // A conjugate transpose (OP_C) of real data would be the transpose; the backend never asks for it,
  // so the emulation declines it rather than model it.
  *why = "TRANSA / TRANSB other than N or T";
  for (int32_t op : {desc.trans_a, desc.trans_b})
    if (op != CUBLAS_OP_N && op != CUBLAS_OP_T) return CUBLAS_STATUS_NOT_SUPPORTED;
  // TRANSC: "Currently only CUBLAS_OP_N is supported."
  *why = "TRANSC, pointer mode or epilogue other than the default";
  if (desc.trans_c != CUBLAS_OP_N) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (desc.pointer_mode != CUBLASLT_POINTER_MODE_HOST || desc.epilogue != CUBLASLT_EPILOGUE_DEFAULT)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  // The rows of cublasLtMatmul()'s data-type table that the emulation implements. Every one has
  // scale type R_32F, A and B of one type, and C of D's type (checked above).
  *why = "a compute / scale / data type combination the emulation does not implement";
  if (desc.scale != CUDA_R_32F || a.type != b.type) return CUBLAS_STATUS_NOT_SUPPORTED;
  bool listed = false;
  if (desc.compute == CUBLAS_COMPUTE_32F)
    listed = (a.type == CUDA_R_32F && d.type == CUDA_R_32F) ||
             (a.type == CUDA_R_16BF && (d.type == CUDA_R_16BF || d.type == CUDA_R_32F));
  else if (desc.compute == CUBLAS_COMPUTE_32F_FAST_TF32)
    listed = a.type == CUDA_R_32F && d.type == CUDA_R_32F;
  if (!listed) return CUBLAS_STATUS_NOT_SUPPORTED;

  out->desc = desc;
  out->layout[kA] = a;
  out->layout[kB] = b;
  out->layout[kC] = c;
  out->layout[kD] = d;
  out->m = m;
  out->n = n;
  out->k = k;
  *why = "";
  return CUBLAS_STATUS_SUCCESS;
}

// The alignment an algorithm chosen under `preferred` needs of a matrix: the widest access that the
// preference allows and the leading dimension keeps aligned column after column (the heuristic
// sees the layouts, not the pointers). 0: none, when the preference is below one element.
uint32_t required_alignment(const Layout& l, uint32_t preferred) {
  const auto e = static_cast<uint32_t>(element_bytes(l.type));
  const uint64_t column_bytes = static_cast<uint64_t>(l.ld) * e;
  if (preferred < e) return 0;
  uint32_t r = kWidestAccessBytes;
  while (r > e && (r > preferred || column_bytes % r != 0)) r /= 2;
  return r;
}

bool bf16_disabled() {
  const char* v = std::getenv("OOMB_EMULATED_CUBLASLT_NO_BF16");
  return v && std::strcmp(v, "1") == 0;
}

// The heuristic behind cublasLtMatmulAlgoGetHeuristic (and an implicit query when cublasLtMatmul
// gets no algo): one result or none.
cublasStatus_t heuristic(const Problem& p, const Preference& pref, Algo* algo, bool* found) {
  *found = false;
  if (pref.search_mode != CUBLASLT_SEARCH_BEST_FIT) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (kAlgoWorkspaceBytes > pref.max_workspace) return CUBLAS_STATUS_SUCCESS;
  // The mask "filters heuristic result to only include algo configs that use one of the required
  // modes" of split-K reduction; an algorithm without split-K (NONE, no bit of the mask) passes any.
  if (kAlgoReductionScheme != CUBLASLT_REDUCTION_SCHEME_NONE && (pref.reduction_mask & kAlgoReductionScheme) == 0)
    return CUBLAS_STATUS_SUCCESS;
  if (p.layout[kA].type == CUDA_R_16BF && bf16_disabled()) return CUBLAS_STATUS_SUCCESS;
  Algo a;
  a.compute = p.desc.compute;
  a.scale = p.desc.scale;
  for (int x = kA; x <= kD; ++x) {
    a.type[x] = p.layout[x].type;
    a.alignment[x] = required_alignment(p.layout[x], pref.min_alignment[x]);
    if (a.alignment[x] == 0) return CUBLAS_STATUS_SUCCESS;
  }
  *algo = a;
  *found = true;
  return CUBLAS_STATUS_SUCCESS;
}

// bf16 -> fp32 is exact: bf16 is the upper half of an fp32 bit pattern.
float from_bf16(uint16_t bits) {
  const uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// fp32 -> bf16, round to nearest even (one rounding of a bf16 D, from the fp32 scale-type value).
uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x40);  // stays a (quiet) NaN
  u += 0x7fff + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}

// fp32 -> TF32 (10 explicit mantissa bits, kept in an fp32). cublasComputeType_t says only that
// CUBLAS_COMPUTE_32F_FAST_TF32 "allows down-converting inputs to TF32", not how it rounds. The
// toolkit's own conversion, nvcuda::wmma::__float_to_tf32 (crt/mma.h), is PTX cvt.rna.tf32.f32:
// round to nearest, ties away from zero (PTX ISA, "cvt"), so the emulation rounds that way, and
// always (the least precise of what the library may do). Inf and NaN pass through.
float to_tf32(float f) {
  if (!std::isfinite(f)) return f;
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  u = (u + 0x1000u) & 0xffffe000u;  // add half of the 13 dropped bits' weight to the magnitude
  float r;
  std::memcpy(&r, &u, sizeof r);
  return r;
}

// Everything one queued GEMM needs, owned by the host function that runs it.
struct Job {
  Problem p;
  const void* a = nullptr;
  const void* b = nullptr;
  const void* c = nullptr;
  void* d = nullptr;
  float alpha = 0.0f;
  float beta = 0.0f;
};

// Element (r, c) of a column-major matrix sits at ptr[r + c * ld] ("Data Layout").
float load(const void* ptr, const Layout& l, uint64_t r, uint64_t c) {
  const uint64_t i = r + c * static_cast<uint64_t>(l.ld);
  if (l.type == CUDA_R_16BF) return from_bf16(static_cast<const uint16_t*>(ptr)[i]);
  return static_cast<const float*>(ptr)[i];
}

void store(void* ptr, const Layout& l, uint64_t r, uint64_t c, float v) {
  const uint64_t i = r + c * static_cast<uint64_t>(l.ld);
  if (l.type == CUDA_R_16BF) static_cast<uint16_t*>(ptr)[i] = to_bf16(v);
  else static_cast<float*>(ptr)[i] = v;
}

// The GEMM. op(A) and op(B) are first copied out (as the fp32 values the multiply reads: bf16
// exactly, fp32 rounded to TF32 under FAST_TF32), so D may share memory with C element by element.
// Products and their sum are formed in double and rounded once to fp32, the compute type: cuBLAS
// fixes no summation order (tiles, split-K), and "default types ... guarantee internal storage
// precision with at least the same precision and range" (cublasComputeType_t), so the emulation
// gives the order-free answer. alpha * acc + beta * C is then evaluated in fp32, the scale type
// ("Accumulator and value from matrix C are typically converted to scale type before final
// scaling. Value is then converted from scale type to type of matrix D", SCALE_TYPE), with
// beta == 0 not reading C (BLAS: C "does not have to be a valid input" then).
void run_gemm(const Job& job) {
  const Problem& p = job.p;
  const bool tf32 = p.desc.compute == CUBLAS_COMPUTE_32F_FAST_TF32;
  const uint64_t m = p.m, n = p.n, k = p.k;
  std::vector<float> op_a(m * k), op_b(n * k);  // op(A) row by row, op(B) column by column
  for (uint64_t i = 0; i < m; ++i)
    for (uint64_t q = 0; q < k; ++q) {
      const float v = is_transpose(p.desc.trans_a) ? load(job.a, p.layout[kA], q, i) : load(job.a, p.layout[kA], i, q);
      op_a[i * k + q] = tf32 ? to_tf32(v) : v;
    }
  for (uint64_t j = 0; j < n; ++j)
    for (uint64_t q = 0; q < k; ++q) {
      const float v = is_transpose(p.desc.trans_b) ? load(job.b, p.layout[kB], j, q) : load(job.b, p.layout[kB], q, j);
      op_b[j * k + q] = tf32 ? to_tf32(v) : v;
    }
  for (uint64_t j = 0; j < n; ++j)
    for (uint64_t i = 0; i < m; ++i) {
      double acc = 0.0;
      const float* ra = op_a.data() + i * k;
      const float* cb = op_b.data() + j * k;
      for (uint64_t q = 0; q < k; ++q) acc += static_cast<double>(ra[q]) * static_cast<double>(cb[q]);
      float v = job.alpha * static_cast<float>(acc);
      if (job.beta != 0.0f) v = v + job.beta * load(job.c, p.layout[kC], i, j);
      store(job.d, p.layout[kD], i, j, v);
    }
}

void CUDART_CB run_job(void* data) {
  auto* job = static_cast<Job*>(data);
  try {
    run_gemm(*job);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "oomb emulated cuBLASLt: out of host memory in a queued GEMM\n");
    std::abort();
  }
  delete job;
}

// The byte range a column-major matrix spans.
uint64_t extent_bytes(const Layout& l) {
  if (l.rows == 0 || l.cols == 0) return 0;
  return ((l.cols - 1) * static_cast<uint64_t>(l.ld) + l.rows) * element_bytes(l.type);
}

// A GPU kernel handed a pointer outside device-accessible memory faults (later, on the stream); the
// emulation refuses the call instead, naming the matrix, since its GEMM would read host memory.
bool on_device(const void* ptr, const Layout& l, const char* name) {
  const uint64_t bytes = extent_bytes(l);
  if (bytes == 0) return true;
  const auto* first = static_cast<const char*>(ptr);
  if (oomb::emulated_cuda::device_accessible(first) && oomb::emulated_cuda::device_accessible(first + bytes - 1))
    return true;
  std::fprintf(stderr,
               "oomb emulated cuBLASLt: cublasLtMatmul: %s (%p, %llu x %llu, ld %lld) is not all in device memory\n",
               name, ptr, static_cast<unsigned long long>(l.rows), static_cast<unsigned long long>(l.cols),
               static_cast<long long>(l.ld));
  return false;
}

cublasStatus_t refuse(cublasStatus_t status, const char* why) {
  std::fprintf(stderr, "oomb emulated cuBLASLt: cublasLtMatmul: %s\n", why);
  return status;
}

cublasStatus_t matmul(cublasLtMatmulDesc_t desc, const void* alpha, const void* A, cublasLtMatrixLayout_t Adesc,
                      const void* B, cublasLtMatrixLayout_t Bdesc, const void* beta, const void* C,
                      cublasLtMatrixLayout_t Cdesc, void* D, cublasLtMatrixLayout_t Ddesc,
                      const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes,
                      cudaStream_t stream) {
  if (!desc || !Adesc || !Bdesc || !Ddesc || !alpha || !beta) return CUBLAS_STATUS_INVALID_VALUE;
  // "If Cdesc is omitted, this function assumes it to be equal to Ddesc."
  if (!Cdesc) Cdesc = Ddesc;
  Problem p;
  const char* why = "";
  const cublasStatus_t st = check_problem(body<Desc>(desc), body<Layout>(Adesc), body<Layout>(Bdesc),
                                          body<Layout>(Cdesc), body<Layout>(Ddesc), &p, &why);
  if (st != CUBLAS_STATUS_SUCCESS) return refuse(st, why);
  // In place means "C == D and Cdesc == Ddesc"; an out-of-place C may differ from D only in ld.
  if (C == D && p.layout[kC].ld != p.layout[kD].ld)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "C == D with different leading dimensions in Cdesc and Ddesc");

  // Host pointer mode (the default): the scalars are read now, not when the GEMM runs.
  Job job;
  job.p = p;
  std::memcpy(&job.alpha, alpha, sizeof job.alpha);
  std::memcpy(&job.beta, beta, sizeof job.beta);
  const bool reads_ab = p.k > 0;
  const bool reads_c = job.beta != 0.0f;
  if (p.m == 0 || p.n == 0) return CUBLAS_STATUS_SUCCESS;
  if ((reads_ab && (!A || !B)) || (reads_c && !C) || !D)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "a matrix the GEMM reads or writes is null");

  Algo chosen;
  if (algo) {
    std::memcpy(&chosen, algo->data, sizeof chosen);
    if (chosen.magic != kAlgoMagic) return refuse(CUBLAS_STATUS_INVALID_VALUE, "algo is not one the heuristic returned");
    bool same = chosen.compute == p.desc.compute && chosen.scale == p.desc.scale;
    for (int x = kA; x <= kD; ++x) same = same && chosen.type[x] == p.layout[x].type;
    if (!same) return refuse(CUBLAS_STATUS_INVALID_VALUE, "algo was selected for other compute or data types");
  } else {
    // algo == NULL: "an implicit heuristics query with default search preferences".
    bool found = false;
    const cublasStatus_t h = heuristic(p, Preference{}, &chosen, &found);
    if (h != CUBLAS_STATUS_SUCCESS) return h;
    if (!found) return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "no algorithm for the implicit heuristic query");
  }

  // The algorithm's alignment needs (pointer and leading dimension). A GPU kernel would fault on a
  // misaligned access; the documented status for arguments "in conflict" with the configured algo
  // is INVALID_VALUE.
  const void* ptr[4] = {A, B, C, D};
  static const char* const kName[4] = {"A", "B", "C", "D"};
  for (int x = kA; x <= kD; ++x) {
    if ((x == kA || x == kB) && !reads_ab) continue;
    if (x == kC && !reads_c) continue;
    const uint64_t column_bytes = static_cast<uint64_t>(p.layout[x].ld) * element_bytes(p.layout[x].type);
    if (reinterpret_cast<uintptr_t>(ptr[x]) % chosen.alignment[x] != 0 || column_bytes % chosen.alignment[x] != 0) {
      char message[160];
      std::snprintf(message, sizeof message, "%s (%p, ld %lld) is less aligned than the %u bytes its algorithm was selected for",
                    kName[x], ptr[x], static_cast<long long>(p.layout[x].ld), chosen.alignment[x]);
      return refuse(CUBLAS_STATUS_INVALID_VALUE, message);
    }
    if (!on_device(ptr[x], p.layout[x], kName[x])) return CUBLAS_STATUS_INVALID_VALUE;
  }
  // The emulated algorithms need no workspace, but a workspace given must be valid as documented.
  if (workspace_bytes > 0 && (!workspace || reinterpret_cast<uintptr_t>(workspace) % kWorkspaceAlignment != 0))
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "the workspace is null or not 256-byte aligned");

  auto* queued = new (std::nothrow) Job(job);
  if (!queued) return CUBLAS_STATUS_ALLOC_FAILED;
  queued->a = A;
  queued->b = B;
  queued->c = reads_c ? C : nullptr;
  queued->d = D;
  if (submit_library_kernel("emulated_cublasLt_gemm", stream, run_job, queued) != cudaSuccess) {
    delete queued;
    return CUBLAS_STATUS_EXECUTION_FAILED;  // "if cuda reported execution error from the device"
  }
  return CUBLAS_STATUS_SUCCESS;
}

// *SetAttribute: "CUBLAS_STATUS_INVALID_VALUE if buf is NULL or sizeInBytes doesn't match size of
// internal storage for selected attribute".
template <class T>
cublasStatus_t set(T* field, const void* buf, size_t bytes) {
  if (!buf || bytes != sizeof(T)) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(field, buf, sizeof(T));
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace
}  // namespace oomb::emulated_cuda::cublaslt

using namespace oomb::emulated_cuda::cublaslt;

extern "C" {

cublasStatus_t CUBLASWINAPI cublasLtCreate(cublasLtHandle_t* lightHandle) {
  if (!lightHandle) return CUBLAS_STATUS_INVALID_VALUE;
  *lightHandle = new (std::nothrow) cublasLtContext{};
  return *lightHandle ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

cublasStatus_t CUBLASWINAPI cublasLtDestroy(cublasLtHandle_t lightHandle) {
  if (!lightHandle) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete lightHandle;
  return CUBLAS_STATUS_SUCCESS;
}

size_t CUBLASWINAPI cublasLtGetVersion(void) { return kVersion; }

const char* CUBLASWINAPI cublasLtGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "<unknown>";
}

const char* CUBLASWINAPI cublasLtGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "the operation completed successfully";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid value was used as an argument";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "an absent device architectural feature is required";
    case CUBLAS_STATUS_MAPPING_ERROR: return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported (emulated cuBLASLt)";
    case CUBLAS_STATUS_LICENSE_ERROR: return "an error was detected when checking the current licensing";
  }
  return "unknown status";
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* matmulDesc, cublasComputeType_t computeType,
                                                     cudaDataType_t scaleType) {
  if (!matmulDesc) return CUBLAS_STATUS_INVALID_VALUE;
  Desc d;
  d.compute = computeType;
  d.scale = scaleType;
  *matmulDesc = create_opaque<Desc, cublasLtMatmulDescOpaque_t>(d);
  return *matmulDesc ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc) {
  delete matmulDesc;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc,
                                                           cublasLtMatmulDescAttributes_t attr, const void* buf,
                                                           size_t sizeInBytes) {
  if (!matmulDesc) return CUBLAS_STATUS_INVALID_VALUE;
  Desc& d = body<Desc>(matmulDesc);
  // Storage types as cublasLtMatmulDescAttributes_t lists them.
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: return set(&d.compute, buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE: return set(&d.scale, buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_POINTER_MODE: return set(&d.pointer_mode, buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_TRANSA: return set(&d.trans_a, buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_TRANSB: return set(&d.trans_b, buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_TRANSC: return set(&d.trans_c, buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return set(&d.epilogue, buf, sizeInBytes);
    default: return CUBLAS_STATUS_NOT_SUPPORTED;  // bias, scale pointers, fill mode ...: not emulated
  }
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* matLayout, cudaDataType type,
                                                       uint64_t rows, uint64_t cols, int64_t ld) {
  if (!matLayout) return CUBLAS_STATUS_INVALID_VALUE;
  // Checked where it is used (the heuristic, the matmul), as the header documents no check here.
  *matLayout = create_opaque<Layout, cublasLtMatrixLayoutOpaque_t>(Layout{type, rows, cols, ld});
  return *matLayout ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout) {
  delete matLayout;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  if (!pref) return CUBLAS_STATUS_INVALID_VALUE;
  *pref = create_opaque<Preference, cublasLtMatmulPreferenceOpaque_t>(Preference{});
  return *pref ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete pref;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                                 cublasLtMatmulPreferenceAttributes_t attr,
                                                                 const void* buf, size_t sizeInBytes) {
  if (!pref) return CUBLAS_STATUS_INVALID_VALUE;
  Preference& p = body<Preference>(pref);
  // Storage types as cublasLtMatmulPreferenceAttributes_t lists them.
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_SEARCH_MODE: return set(&p.search_mode, buf, sizeInBytes);
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: return set(&p.max_workspace, buf, sizeInBytes);
    case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK: return set(&p.reduction_mask, buf, sizeInBytes);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: return set(&p.min_alignment[kA], buf, sizeInBytes);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: return set(&p.min_alignment[kB], buf, sizeInBytes);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: return set(&p.min_alignment[kC], buf, sizeInBytes);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: return set(&p.min_alignment[kD], buf, sizeInBytes);
    default: return CUBLAS_STATUS_NOT_SUPPORTED;  // wave count, implementation mask: not emulated
  }
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t lightHandle,
                                                           cublasLtMatmulDesc_t operationDesc,
                                                           cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                                           cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                                           cublasLtMatmulPreference_t preference,
                                                           int requestedAlgoCount,
                                                           cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
                                                           int* returnAlgoCount) {
  if (!lightHandle) return CUBLAS_STATUS_NOT_INITIALIZED;
  // "CUBLAS_STATUS_INVALID_VALUE if requestedAlgoCount is less or equal to zero"
  if (!operationDesc || !Adesc || !Bdesc || !Ddesc || !preference || requestedAlgoCount <= 0 ||
      !heuristicResultsArray || !returnAlgoCount)
    return CUBLAS_STATUS_INVALID_VALUE;
  *returnAlgoCount = 0;
  if (!Cdesc) Cdesc = Ddesc;
  Problem p;
  const char* why = "";
  cublasStatus_t st = check_problem(body<Desc>(operationDesc), body<Layout>(Adesc), body<Layout>(Bdesc),
                                    body<Layout>(Cdesc), body<Layout>(Ddesc), &p, &why);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  Algo algo;
  bool found = false;
  st = heuristic(p, body<Preference>(preference), &algo, &found);
  if (st != CUBLAS_STATUS_SUCCESS || !found) return st;
  cublasLtMatmulHeuristicResult_t& r = heuristicResultsArray[0];
  r = cublasLtMatmulHeuristicResult_t{};
  std::memcpy(r.algo.data, &algo, sizeof algo);
  r.workspaceSize = kAlgoWorkspaceBytes;
  r.state = CUBLAS_STATUS_SUCCESS;
  r.wavesCount = 1.0f;  // device utilisation is not modelled
  *returnAlgoCount = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc,
                                           const void* alpha, const void* A, cublasLtMatrixLayout_t Adesc,
                                           const void* B, cublasLtMatrixLayout_t Bdesc, const void* beta,
                                           const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
                                           cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t* algo,
                                           void* workspace, size_t workspaceSizeInBytes, cudaStream_t stream) {
  if (!lightHandle) return CUBLAS_STATUS_NOT_INITIALIZED;
  return matmul(computeDesc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc, algo, workspace,
                workspaceSizeInBytes, stream);
}

}  // extern "C"
