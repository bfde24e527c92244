// CUDA backend speed, each figure next to a baseline measured in the same run:
//  - paged attention forward + backward at chunk 4096 with Qwen2.5-7B shapes (28 query heads, 4 KV
//    heads, head_dim 128, pages of 128, 16 dense prefix pages), in TFLOP/s, for the fp32 kernels
//    and the bf16 tensor-core kernels (CudaAttentionKernel), against cuBLASLt GEMMs of the same
//    FLOPs: fp32, TF32 and bf16 (fp32 accumulate, the tensor-core kernels' operand precision);
//    ratios printed, and the tensor-core kernels' ratio to the bf16 GEMM against its target (0.5);
//    the tensor-core kernels again on bf16 KV and gradient pages (ratio to their fp32-page rate);
//  - the backend's linear_fwd (y = x W^T) at a Qwen2.5-7B MLP shape (4096 rows x 3584 -> 18944) with
//    each CudaGemmPrecision, in TFLOP/s (bf16 includes converting x and W to bf16), and the bf16 / fp32
//    ratio; then on bf16 storage (no conversion; and dW += into a bf16 gradient);
//  - offload copy bandwidth per direction through CudaBackend::copy_async (one region per page,
//    scattered so that no two merge) against one plain cudaMemcpyAsync of the same bytes between
//    pinned and device memory: ratio printed.
// Without a CUDA device it says so and exits 0.
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "executor/cuda/cuda_backend.h"
#include "executor/cuda/cuda_check.h"
#include "executor/cuda/gemm.h"
#include "executor/runtime/rng.h"

using namespace oomb::executor;

namespace {

// Median milliseconds of `reps` timed runs of f on stream s (after one warm-up run).
double time_ms(cudaStream_t s, int reps, const std::function<void()>& f) {
  cudaEvent_t a, b;
  OOMB_CUDA_CHECK(cudaEventCreate(&a));
  OOMB_CUDA_CHECK(cudaEventCreate(&b));
  f();
  OOMB_CUDA_CHECK(cudaStreamSynchronize(s));
  std::vector<float> ms;
  for (int i = 0; i < reps; ++i) {
    OOMB_CUDA_CHECK(cudaEventRecord(a, s));
    f();
    OOMB_CUDA_CHECK(cudaEventRecord(b, s));
    OOMB_CUDA_CHECK(cudaEventSynchronize(b));
    float t = 0;
    OOMB_CUDA_CHECK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

void fill_random(CudaBackend& b, float* dst, int64_t n, uint64_t seed, float scale) {
  Rng r(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = scale * static_cast<float>(r.normal());
  b.upload(dst, v.data(), n * 4);
}

// Random bf16 values (bit patterns: the top half of the float, rounded to nearest even).
void fill_random_bf16(CudaBackend& b, void* dst, int64_t n, uint64_t seed) {
  Rng r(seed);
  std::vector<uint16_t> v(static_cast<size_t>(n));
  for (auto& x : v) {
    const float f = static_cast<float>(r.normal());
    uint32_t u;
    std::memcpy(&u, &f, 4);
    x = static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
  b.upload(dst, v.data(), n * 2);
}

void lt_check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) throw std::runtime_error(std::string("cuBLASLt ") + what + " failed: status " +
                                                           std::to_string(static_cast<int>(s)));
}

// Median ms of C[m, n] (fp32) = A[m, k] B[k, n] with bf16 A, B (column-major), fp32 compute: the
// tensor-core GEMM rate at the bf16 attention kernels' operand precision.
double bf16_gemm_ms(cudaStream_t s, int reps, int64_t m, int64_t n, int64_t k, const void* A, const void* B, float* C,
                    void* ws, int64_t ws_bytes) {
  cublasLtHandle_t h;
  lt_check(cublasLtCreate(&h), "create");
  cublasLtMatmulDesc_t op;
  lt_check(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul desc");
  cublasLtMatrixLayout_t la, lb, lc;
  lt_check(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, static_cast<uint64_t>(m), static_cast<uint64_t>(k), m), "A");
  lt_check(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, static_cast<uint64_t>(k), static_cast<uint64_t>(n), k), "B");
  lt_check(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, static_cast<uint64_t>(m), static_cast<uint64_t>(n), m), "C");
  cublasLtMatmulPreference_t pref;
  lt_check(cublasLtMatmulPreferenceCreate(&pref), "preference");
  const uint64_t wsb = static_cast<uint64_t>(ws_bytes);
  lt_check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof(wsb)),
           "workspace");
  cublasLtMatmulHeuristicResult_t res{};
  int found = 0;
  lt_check(cublasLtMatmulAlgoGetHeuristic(h, op, la, lb, lc, lc, pref, 1, &res, &found), "heuristic");
  if (found == 0) throw std::runtime_error("cuBLASLt: no bf16 GEMM algorithm");
  const float alpha = 1.0f, beta = 0.0f;
  const double ms = time_ms(s, reps, [&] {
    lt_check(cublasLtMatmul(h, op, &alpha, A, la, B, lb, &beta, C, lc, C, lc, &res.algo, ws,
                            static_cast<size_t>(ws_bytes), s),
             "matmul");
  });
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatmulDescDestroy(op);
  cublasLtDestroy(h);
  return ms;
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    num += d * d;
    den += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

}  // namespace

int main() {
  std::string why;
  if (!cuda_device_available(&why)) {
    std::printf("oomb cuda bench: no CUDA device (%s); nothing measured\n", why.c_str());
    return 0;
  }
  CudaBackend gpu;
  auto compute = static_cast<cudaStream_t>(gpu.stream(CudaStream::compute));
  std::printf("oomb cuda bench on %s\n", gpu.device_name().c_str());

  // ---- attention
  const int64_t T = 4096, qh = 28, kvh = 4, hd = 128, p = 128, U = 16;
  const int64_t qd = qh * hd, kvd = kvh * hd, page = 2 * p * kvd;
  Buffer q(gpu, Tier::device, T * qd * 4), k(gpu, Tier::device, T * kvd * 4), v(gpu, Tier::device, T * kvd * 4);
  Buffer o(gpu, Tier::device, T * qd * 4), lse(gpu, Tier::device, T * qh * 4), dout(gpu, Tier::device, T * qd * 4);
  Buffer dq(gpu, Tier::device, T * qd * 4), dk(gpu, Tier::device, T * kvd * 4), dv(gpu, Tier::device, T * kvd * 4);
  Buffer pages(gpu, Tier::device, U * page * 4), grads(gpu, Tier::device, U * page * 4);
  fill_random(gpu, q.f32(), T * qd, 1, 0.5f);
  fill_random(gpu, k.f32(), T * kvd, 2, 0.5f);
  fill_random(gpu, v.f32(), T * kvd, 3, 1.0f);
  fill_random(gpu, dout.f32(), T * qd, 4, 1.0f);
  fill_random(gpu, pages.f32(), U * page, 5, 0.5f);
  PagedAttention a;
  a.rows = T;
  a.q_heads = qh;
  a.kv_heads = kvh;
  a.head_dim = hd;
  a.page_tokens = p;
  a.q = q.f32();
  a.k_own = k.f32();
  a.v_own = v.f32();
  std::vector<float*> gp;
  for (int64_t u = 0; u < U; ++u) {
    a.prefix_pages.push_back(pages.f32() + u * page);
    gp.push_back(grads.f32() + u * page);
  }
  const double pairs = static_cast<double>(T) * static_cast<double>(U * p) + static_cast<double>(T) * (T + 1) / 2.0;
  const double fwd_flops = 4.0 * hd * qh * pairs, bwd_flops = 10.0 * hd * qh * pairs;  // the driver's counts
  const int reps = 5;
  const double fwd_ms = time_ms(compute, reps, [&] { gpu.attention_fwd(a, o.f32(), lse.f32()); });
  const double bwd_ms = time_ms(compute, reps, [&] {
    gpu.attention_bwd(a, o.f32(), lse.f32(), dout.f32(), dq.f32(), dk.f32(), dv.f32(), gp);
  });
  const double attn_tflops = (fwd_flops + bwd_flops) / ((fwd_ms + bwd_ms) * 1e-3) / 1e12;
  std::printf("attention fwd (T %lld, %lld/%lld heads, hd %lld, %lld prefix pages of %lld): %.2f ms, %.2f TFLOP/s\n",
              static_cast<long long>(T), static_cast<long long>(qh), static_cast<long long>(kvh),
              static_cast<long long>(hd), static_cast<long long>(U), static_cast<long long>(p), fwd_ms,
              fwd_flops / (fwd_ms * 1e-3) / 1e12);
  std::printf("attention bwd: %.2f ms, %.2f TFLOP/s\n", bwd_ms, bwd_flops / (bwd_ms * 1e-3) / 1e12);
  std::printf("attention fwd+bwd: %.2f TFLOP/s (fp32 CUDA cores)\n", attn_tflops);

  // ---- the same attention on bf16 tensor cores: a second backend on the same device and CUDA
  // context (so it can use the buffers above), timed on its own compute stream.
  CudaBackendOptions tc_options;
  tc_options.attention_kernel = CudaAttentionKernel::bf16_tensor_core;
  CudaBackend tc(tc_options);
  auto tc_stream = static_cast<cudaStream_t>(tc.stream(CudaStream::compute));
  Buffer o_tc(gpu, Tier::device, T * qd * 4), lse_tc(gpu, Tier::device, T * qh * 4);
  const double tc_fwd_ms = time_ms(tc_stream, reps, [&] { tc.attention_fwd(a, o_tc.f32(), lse_tc.f32()); });
  const double tc_bwd_ms = time_ms(tc_stream, reps, [&] {
    tc.attention_bwd(a, o.f32(), lse.f32(), dout.f32(), dq.f32(), dk.f32(), dv.f32(), gp);
  });
  // Every call ran the tensor-core kernels (not the fp32 fallback), and o differs from the fp32
  // kernels' by bf16 rounding (~3e-3), not more.
  const bool tc_ran = tc.attention_calls(CudaAttentionKernel::bf16_tensor_core) == 2 * (reps + 1) &&
                      tc.attention_calls(CudaAttentionKernel::fp32) == 0;
  std::vector<float> o_fp32(static_cast<size_t>(T * qd)), o_bf16(o_fp32.size());
  gpu.download(o_fp32.data(), o.f32(), T * qd * 4);
  gpu.download(o_bf16.data(), o_tc.f32(), T * qd * 4);
  const double tc_tflops = (fwd_flops + bwd_flops) / ((tc_fwd_ms + tc_bwd_ms) * 1e-3) / 1e12;
  std::printf("attention fwd (bf16 tensor cores%s): %.2f ms, %.2f TFLOP/s\n", tc_ran ? "" : ", NOT ALL CALLS RAN THEM",
              tc_fwd_ms, fwd_flops / (tc_fwd_ms * 1e-3) / 1e12);
  std::printf("attention bwd (bf16 tensor cores): %.2f ms, %.2f TFLOP/s\n", tc_bwd_ms,
              bwd_flops / (tc_bwd_ms * 1e-3) / 1e12);
  std::printf("attention fwd+bwd: %.2f TFLOP/s (bf16 tensor cores), %.2fx the fp32 kernels; o differs from the fp32 "
              "kernels' by rel. L2 %.2e\n",
              tc_tflops, tc_tflops / attn_tflops, rel_l2(o_bf16, o_fp32));

  // ---- the tensor-core attention on bf16 KV and gradient pages (what `oomb run --backend cuda`
  // runs by default with a plan's bf16 KV pages): the prefix rows' loads halve.
  Buffer pages16(gpu, Tier::device, U * page * 2), grads16(gpu, Tier::device, U * page * 2);
  PagedAttention a16 = a;
  a16.kv_dtype = PageDtype::bf16;
  a16.grad_dtype = PageDtype::bf16;
  std::vector<float*> gp16, kv16;
  for (int64_t u = 0; u < U; ++u) {
    kv16.push_back(reinterpret_cast<float*>(static_cast<char*>(pages16.data()) + u * page * 2));
    gp16.push_back(reinterpret_cast<float*>(static_cast<char*>(grads16.data()) + u * page * 2));
    a16.prefix_pages[static_cast<size_t>(u)] = kv16.back();
  }
  tc.write_kv_pages(k.f32(), v.f32(), U * p, kvd, p, kv16, PageDtype::bf16);  // the chunk's first U * p rows
  const int64_t tc_calls0 = tc.attention_calls(CudaAttentionKernel::bf16_tensor_core);
  const double tc16_fwd_ms = time_ms(tc_stream, reps, [&] { tc.attention_fwd(a16, o_tc.f32(), lse_tc.f32()); });
  const double tc16_bwd_ms = time_ms(tc_stream, reps, [&] {
    tc.attention_bwd(a16, o.f32(), lse.f32(), dout.f32(), dq.f32(), dk.f32(), dv.f32(), gp16);
  });
  const bool tc16_ran = tc.attention_calls(CudaAttentionKernel::bf16_tensor_core) - tc_calls0 == 2 * (reps + 1) &&
                        tc.attention_calls(CudaAttentionKernel::fp32) == 0;
  const double tc16_tflops = (fwd_flops + bwd_flops) / ((tc16_fwd_ms + tc16_bwd_ms) * 1e-3) / 1e12;
  std::printf("attention fwd+bwd (bf16 tensor cores, bf16 KV and gradient pages%s): fwd %.2f ms, bwd %.2f ms, %.2f "
              "TFLOP/s, %.2fx the same kernels on fp32 pages\n",
              tc16_ran ? "" : ", NOT ALL CALLS RAN THEM", tc16_fwd_ms, tc16_bwd_ms, tc16_tflops,
              tc16_tflops / tc_tflops);

  // ---- a GEMM of the same FLOPs: 4096 x 4096 x K
  const int64_t M = 4096, N = 4096;
  const int64_t K = std::max<int64_t>(128, static_cast<int64_t>((fwd_flops + bwd_flops) / (2.0 * M * N)) / 128 * 128);
  const double gemm_flops = 2.0 * static_cast<double>(M) * N * K;
  Buffer ga(gpu, Tier::device, M * K * 4), gb(gpu, Tier::device, K * N * 4), gc(gpu, Tier::device, M * N * 4);
  fill_random(gpu, ga.f32(), M * K, 6, 1.0f);
  fill_random(gpu, gb.f32(), K * N, 7, 1.0f);
  Buffer gws(gpu, Tier::device, int64_t{32} << 20);
  for (bool tf32 : {false, true}) {
    oomb::executor::cuda::Gemm gemm(gws.data(), gws.bytes());
    const double ms = time_ms(compute, reps, [&] {
      gemm.matmul(tf32 ? CudaGemmPrecision::tf32 : CudaGemmPrecision::fp32, false, false, M, N, K, ga.f32(), M,
                  gb.f32(), K, 0.0f, gc.f32(), M, compute);
    });
    const double tflops = gemm_flops / (ms * 1e-3) / 1e12;
    std::printf("cuBLASLt %s GEMM %lldx%lldx%lld (%.2f TFLOP of work, attention %.2f): %.2f ms, %.2f TFLOP/s; "
                "attention / GEMM = %.3f (fp32 kernels), %.3f (bf16 tensor cores)\n",
                tf32 ? "TF32" : "fp32", static_cast<long long>(M), static_cast<long long>(N),
                static_cast<long long>(K), gemm_flops / 1e12, (fwd_flops + bwd_flops) / 1e12, ms, tflops,
                attn_tflops / tflops, tc_tflops / tflops);
  }
  {
    // bf16 operands (2 bytes each), fp32 output and accumulation.
    Buffer ha(gpu, Tier::device, M * K * 2), hb(gpu, Tier::device, K * N * 2);
    fill_random_bf16(gpu, ha.data(), M * K, 8);
    fill_random_bf16(gpu, hb.data(), K * N, 9);
    const double ms = bf16_gemm_ms(compute, reps, M, N, K, ha.data(), hb.data(), gc.f32(), gws.data(), gws.bytes());
    const double tflops = gemm_flops / (ms * 1e-3) / 1e12;
    const double ratio = tc_tflops / tflops;
    std::printf("cuBLASLt bf16 GEMM %lldx%lldx%lld (fp32 accumulate): %.2f ms, %.2f TFLOP/s; attention / GEMM = %.3f "
                "(fp32 kernels), %.3f (bf16 tensor cores)\n",
                static_cast<long long>(M), static_cast<long long>(N), static_cast<long long>(K), ms, tflops,
                attn_tflops / tflops, ratio);
    std::printf("bf16 tensor-core attention / bf16 GEMM = %.3f, target >= 0.500: %s\n", ratio,
                ratio >= 0.5 ? "met" : "NOT met");
  }

  // ---- the backend's linear_fwd at a Qwen2.5-7B MLP shape, per GEMM precision (one backend each,
  // sharing the buffers; bf16 converts x and W into the op scratch at every call, timed with it).
  {
    const int64_t rows = 4096, in = 3584, out = 18944;
    const double flops = 2.0 * rows * in * out;
    Buffer lx(gpu, Tier::device, rows * in * 4), lw(gpu, Tier::device, out * in * 4);
    Buffer ly(gpu, Tier::device, rows * out * 4);
    fill_random(gpu, lx.f32(), rows * in, 10, 1.0f);
    fill_random(gpu, lw.f32(), out * in, 11, 0.02f);
    double tflops[3] = {0, 0, 0};
    for (CudaGemmPrecision prec : {CudaGemmPrecision::fp32, CudaGemmPrecision::tf32, CudaGemmPrecision::bf16}) {
      CudaBackendOptions lo;
      lo.gemm_precision = prec;
      CudaBackend lb(lo);
      auto ls = static_cast<cudaStream_t>(lb.stream(CudaStream::compute));
      const double ms = time_ms(ls, reps, [&] { lb.linear_fwd(lx.f32(), rows, in, lw.f32(), nullptr, out, ly.f32()); });
      const int i = static_cast<int>(prec);
      tflops[i] = flops / (ms * 1e-3) / 1e12;
      const bool ran = lb.gemm_calls(prec) == reps + 1;
      std::printf("linear_fwd %lld x %lld -> %lld, %s GEMM%s: %.2f ms, %.2f TFLOP/s\n", static_cast<long long>(rows),
                  static_cast<long long>(in), static_cast<long long>(out), to_string(prec),
                  ran ? "" : " (NOT EVERY CALL RAN IN THIS PRECISION)", ms, tflops[i]);
    }
    std::printf("linear_fwd bf16 / fp32 = %.2fx, bf16 / tf32 = %.2fx\n", tflops[2] / tflops[0], tflops[2] / tflops[1]);

    // bf16 storage (x, W, y stored as bf16, `--param-dtype` / activations bf16): the bf16 GEMM on the
    // operands as stored, no conversion, y written as bf16 by cuBLASLt; and dW += dy^T x into a bf16
    // gradient (beta = 1, bf16 C / D). Against the bf16 precision on fp32 storage above.
    Buffer bx(gpu, Tier::device, rows * in * 2), bw(gpu, Tier::device, out * in * 2);
    Buffer by(gpu, Tier::device, rows * out * 2), bdw(gpu, Tier::device, out * in * 2);
    fill_random_bf16(gpu, bx.data(), rows * in, 12);
    fill_random_bf16(gpu, bw.data(), out * in, 13);
    fill_random_bf16(gpu, by.data(), rows * out, 14);
    CudaBackend sb(CudaBackendOptions{});
    auto ss = static_cast<cudaStream_t>(sb.stream(CudaStream::compute));
    const ConstTensor x16(bx.data(), DType::bf16), w16(bw.data(), DType::bf16), dy16(by.data(), DType::bf16);
    const double fwd16_ms =
        time_ms(ss, reps, [&] { sb.linear_fwd(x16, rows, in, w16, nullptr, out, Tensor(by.data(), DType::bf16)); });
    const double dw16_ms = time_ms(ss, reps, [&] {
      sb.linear_bwd(x16, rows, in, w16, out, dy16, nullptr, false, Tensor(bdw.data(), DType::bf16), nullptr);
    });
    const bool native = sb.gemm_calls(CudaGemmPrecision::bf16) == 2 * (reps + 1);
    std::printf("linear_fwd on bf16 storage%s: %.2f ms, %.2f TFLOP/s (%.2fx the bf16 GEMM on fp32 storage); dW += on "
                "bf16 storage: %.2f ms, %.2f TFLOP/s; op scratch %lld MiB\n",
                native ? "" : " (NOT EVERY CALL RAN THE NATIVE bf16 GEMM)", fwd16_ms, flops / (fwd16_ms * 1e-3) / 1e12,
                flops / (fwd16_ms * 1e-3) / 1e12 / tflops[2], dw16_ms, flops / (dw16_ms * 1e-3) / 1e12,
                static_cast<long long>(sb.scratch_bytes() >> 20));
  }

  // ---- offload copies: 256 pages of the Qwen2.5-7B page size (128 tokens, fp32 K+V: 512 KiB)
  const int64_t npages = 256, pbytes = page * 4, total = npages * pbytes;
  Buffer host(gpu, Tier::host, total), dev(gpu, Tier::device, total);
  cudaStream_t plain;
  OOMB_CUDA_CHECK(cudaStreamCreateWithFlags(&plain, cudaStreamNonBlocking));
  for (CopyDir dir : {CopyDir::h2d, CopyDir::d2h}) {
    std::vector<double> ours;
    for (int r = 0; r < reps + 1; ++r) {
      CopyRequest req;
      req.dir = dir;
      for (int64_t i = 0; i < npages; ++i) {
        // Page i of one side goes to page (npages - 1 - i) of the other: nothing merges.
        char* h = static_cast<char*>(host.data()) + i * pbytes;
        char* d = static_cast<char*>(dev.data()) + (npages - 1 - i) * pbytes;
        req.regions.push_back(dir == CopyDir::h2d ? CopyRegion{d, h, pbytes} : CopyRegion{h, d, pbytes});
      }
      double dev_ms = 0;
      req.on_done = [&dev_ms](int64_t t0, int64_t t1) { dev_ms = static_cast<double>(t1 - t0) * 1e-6; };
      gpu.copy_async(std::move(req))->wait();
      if (r > 0) ours.push_back(dev_ms);  // the first is a warm-up
    }
    std::sort(ours.begin(), ours.end());
    const double ours_ms = ours[ours.size() / 2];
    const double plain_ms = time_ms(plain, reps, [&] {
      OOMB_CUDA_CHECK(cudaMemcpyAsync(dir == CopyDir::h2d ? dev.data() : host.data(),
                                      dir == CopyDir::h2d ? host.data() : dev.data(), static_cast<size_t>(total),
                                      dir == CopyDir::h2d ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, plain));
    });
    const double gbs = static_cast<double>(total) / (ours_ms * 1e-3) / 1e9;
    const double plain_gbs = static_cast<double>(total) / (plain_ms * 1e-3) / 1e9;
    std::printf("%s copy_async (%lld pages of %lld KiB, one region each): %.1f GB/s; plain cudaMemcpyAsync of the "
                "same %lld MiB: %.1f GB/s; ratio %.3f\n",
                to_string(dir), static_cast<long long>(npages), static_cast<long long>(pbytes >> 10), gbs,
                static_cast<long long>(total >> 20), plain_gbs, gbs / plain_gbs);
  }
  cudaStreamDestroy(plain);
  return 0;
}
