// bf16 KV and KV-gradient pages (PageDtype::bf16) on the CUDA backend against the CPU backend with
// the same page dtypes:
//  - page ops: write_kv_pages (rounding: ties both ways, subnormals, overflow to inf, NaN payloads)
//    and add_from_grad_pages, bit for bit, ragged last pages included;
//  - paged attention forward / backward of both kernel families (fp32 CUDA cores, bf16 tensor
//    cores) with KV pages in bf16 and gradient pages in fp32 or bf16: against the CPU, and bit for
//    bit against the same family on fp32 pages holding the same values (the page loaders read bf16
//    exactly; a bf16 gradient page gets exactly the fp32 result of the call rounded once);
//  - a whole tiny-model Engine step with bf16 pages.
#include <gtest/gtest.h>

#include <cstring>
#include <sstream>
#include <tuple>

#include "../executor/test_util.h"
#include "core/error.h"
#include "cuda_test_util.h"
#include "executor/runtime/bf16.h"
#include "executor/runtime/driver.h"
#include "executor/runtime/tokens.h"

namespace oomb::executor::cudatest {
namespace {

std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> h(v.size());
  f32_to_bf16(v.data(), h.data(), static_cast<int64_t>(v.size()));
  return h;
}

std::vector<float> from_bf16(const std::vector<uint16_t>& h) {
  std::vector<float> v(h.size());
  bf16_to_f32(h.data(), v.data(), static_cast<int64_t>(h.size()));
  return v;
}

std::vector<uint32_t> bits(const std::vector<float>& v) {
  std::vector<uint32_t> b(v.size());
  if (!v.empty()) std::memcpy(b.data(), v.data(), v.size() * 4);
  return b;
}

// Distance from |x| (finite) to the next larger bf16: the spacing a single rounding decision moves a
// stored value by.
double bf16_spacing(float x) {
  const uint16_t h = f32_to_bf16(std::abs(x));
  return static_cast<double>(bf16_to_f32(static_cast<uint16_t>(h + 1))) - bf16_to_f32(h);
}

float from_bits(uint32_t u) { return f32_from_bits(u); }

// ---------------------------------------------------------------- page ops

// fp32 values that take every branch of the rounding (runtime/bf16.h): ties to even downwards and
// upwards, just below / above a tie, the smallest and largest subnormals (the latter rounds into the
// normals), the largest finite bf16 and what rounds past it to inf, infinities, signed zeros, and
// NaNs whose payload is only in the low 16 bits (must stay NaN) or in the high bits (kept).
std::vector<float> special_values() {
  const uint32_t patterns[] = {0x3f808000u, 0x3f818000u, 0x3f807fffu, 0x3f808001u, 0xbf808000u, 0xbf818000u,
                               0x00000001u, 0x00008000u, 0x00018000u, 0x007fffffu, 0x807fffffu, 0x7f7f7fffu,
                               0x7f7f8000u, 0x7f7fffffu, 0xff7fffffu, 0x7f800000u, 0xff800000u, 0x00000000u,
                               0x80000000u, 0x7fc00000u, 0x7f800001u, 0xff800001u, 0x7fa00000u, 0xffe12345u};
  std::vector<float> v;
  for (uint32_t p : patterns) v.push_back(from_bits(p));
  return v;
}

class CudaBf16PageOps : public CudaTest {};

TEST_F(CudaBf16PageOps, WriteKvPagesRoundsBitForBitAsTheCpu) {
  // 45 rows into pages of 8: five full pages and a ragged sixth; kv_dim 24.
  const int64_t rows = 45, kvd = 24, p = 8, npages = 6, page_elems = 2 * p * kvd;
  auto k = random_vec(static_cast<size_t>(rows * kvd), 11), v = random_vec(static_cast<size_t>(rows * kvd), 12, 3.0f);
  const auto sp = special_values();
  for (size_t i = 0; i < sp.size(); ++i) {
    k[7 * i] = sp[i];
    v[static_cast<size_t>(rows * kvd) - 1 - 5 * i] = sp[i];
  }
  for (PageDtype dt : {PageDtype::bf16, PageDtype::f32}) {
    const int64_t bytes = npages * page_elems * page_dtype_bytes(dt);
    std::vector<uint8_t> init(static_cast<size_t>(bytes), 0x7e);  // rows past the ragged end stay as they were
    std::vector<uint8_t> cpu_pages = init;
    std::vector<float*> cp;
    for (int64_t j = 0; j < npages; ++j)
      cp.push_back(reinterpret_cast<float*>(cpu_pages.data() + j * page_elems * page_dtype_bytes(dt)));
    cpu.write_kv_pages(k.data(), v.data(), rows, kvd, p, cp, dt);

    DeviceVec<float> d_k(*gpu, k), d_v(*gpu, v);
    DeviceVec<uint8_t> d_pages(*gpu, init);
    std::vector<float*> gp;
    for (int64_t j = 0; j < npages; ++j)
      gp.push_back(reinterpret_cast<float*>(d_pages.get() + j * page_elems * page_dtype_bytes(dt)));
    gpu->write_kv_pages(d_k.get(), d_v.get(), rows, kvd, p, gp, dt);
    EXPECT_EQ(d_pages.read(), cpu_pages) << to_string(dt) << " pages, byte for byte";
  }
  // The rounding itself, element by element (the pages above mix it with the layout).
  const std::vector<uint16_t> want = to_bf16(sp);
  std::vector<float> row(sp.begin(), sp.end());
  row.resize(32, 0.0f);
  DeviceVec<float> d_row(*gpu, row);
  DeviceVec<uint16_t> d_page(*gpu, std::vector<uint16_t>(64, 0));
  gpu->write_kv_pages(d_row.get(), d_row.get(), 1, 32, 1, {reinterpret_cast<float*>(d_page.get())}, PageDtype::bf16);
  const auto got = d_page.read();
  for (size_t i = 0; i < sp.size(); ++i)
    EXPECT_EQ(got[i], want[i]) << "fp32 bits 0x" << std::hex << f32_bits(sp[i]);
  EXPECT_EQ(got[20], 0x7fc0) << "NaN with only low payload bits stays a (quiet) NaN";
  EXPECT_EQ(got[13], 0x7f80) << "beyond the largest finite bf16: inf";
}

TEST_F(CudaBf16PageOps, AddFromGradPagesReadsBf16Exactly) {
  const int64_t rows = 45, kvd = 24, p = 8, npages = 6, page_elems = 2 * p * kvd;
  auto vals = random_vec(static_cast<size_t>(npages * page_elems), 21);
  // Exactly representable specials (no NaN: dk + NaN is a NaN whose payload the two processors
  // need not agree on): infinities, subnormals, signed zeros, the largest finite bf16.
  const uint32_t specials[] = {0x7f800000u, 0xff800000u, 0x00010000u, 0x807f0000u, 0x80000000u, 0x7f7f0000u};
  for (size_t i = 0; i < std::size(specials); ++i) vals[13 * i + 3] = from_bits(specials[i]);
  const auto dk0 = random_vec(static_cast<size_t>(rows * kvd), 22);
  const auto dv0 = random_vec(static_cast<size_t>(rows * kvd), 23);
  for (PageDtype dt : {PageDtype::bf16, PageDtype::f32}) {
    const std::vector<uint16_t> h = to_bf16(vals);
    const std::vector<float> f = from_bf16(h);  // the same values for the fp32 pages
    std::vector<uint8_t> raw(static_cast<size_t>(npages * page_elems * page_dtype_bytes(dt)));
    std::memcpy(raw.data(), dt == PageDtype::bf16 ? static_cast<const void*>(h.data()) : f.data(), raw.size());
    std::vector<uint8_t> cpu_raw = raw;
    std::vector<float*> cp;
    for (int64_t j = 0; j < npages; ++j)
      cp.push_back(reinterpret_cast<float*>(cpu_raw.data() + j * page_elems * page_dtype_bytes(dt)));
    auto dk = dk0, dv = dv0;
    cpu.add_from_grad_pages(cp, rows, kvd, p, dk.data(), dv.data(), dt);

    DeviceVec<uint8_t> d_pages(*gpu, raw);
    DeviceVec<float> d_dk(*gpu, dk0), d_dv(*gpu, dv0);
    std::vector<float*> gp;
    for (int64_t j = 0; j < npages; ++j)
      gp.push_back(reinterpret_cast<float*>(d_pages.get() + j * page_elems * page_dtype_bytes(dt)));
    gpu->add_from_grad_pages(gp, rows, kvd, p, d_dk.get(), d_dv.get(), dt);
    EXPECT_EQ(bits(d_dk.read()), bits(dk)) << to_string(dt) << ": one fp32 addition per element on both";
    EXPECT_EQ(bits(d_dv.read()), bits(dv)) << to_string(dt);
  }
}

// More pages in one call than the grid's y limit (one-token pages: on a GPU 65,540 of them, a 64K
// chunk's): the page kernels cap y and their blocks stride over the rest (kv_pages.cu), so every
// page is written and read back. Before the cap the launch failed (y = pages).
TEST_F(CudaBf16PageOps, PagesPastTheGridLimitAreAllWrittenAndAdded) {
  const int64_t rows = grid_yz_limit() + 5, kvd = 2, p = 1, page_elems = 2 * p * kvd;
  OOMB_SKIP_AT_THE_HARDWARE_GRID_LIMIT_ON_EMULATED_DEVICE();
  const auto k = random_vec(static_cast<size_t>(rows * kvd), 31), v = random_vec(static_cast<size_t>(rows * kvd), 32);
  for (PageDtype dt : {PageDtype::bf16, PageDtype::f32}) {
    const int64_t page_bytes = page_elems * page_dtype_bytes(dt);
    std::vector<uint8_t> cpu_pages(static_cast<size_t>(rows * page_bytes), 0x7e);
    DeviceVec<uint8_t> d_pages(*gpu, cpu_pages);
    std::vector<float*> cp, gp;
    for (int64_t j = 0; j < rows; ++j) {
      cp.push_back(reinterpret_cast<float*>(cpu_pages.data() + j * page_bytes));
      gp.push_back(reinterpret_cast<float*>(d_pages.get() + j * page_bytes));
    }
    cpu.write_kv_pages(k.data(), v.data(), rows, kvd, p, cp, dt);
    DeviceVec<float> d_k(*gpu, k), d_v(*gpu, v);
    gpu->write_kv_pages(d_k.get(), d_v.get(), rows, kvd, p, gp, dt);
    const std::vector<uint8_t> got = d_pages.read();
    int64_t differing = 0, first = -1;  // pages not byte for byte the CPU's
    for (int64_t j = 0; j < rows; ++j)
      if (!std::equal(got.begin() + j * page_bytes, got.begin() + (j + 1) * page_bytes,
                      cpu_pages.begin() + j * page_bytes)) {
        ++differing;
        if (first < 0) first = j;
      }
    ASSERT_EQ(differing, 0) << to_string(dt) << ": pages of " << rows << " differ from the CPU's, the first " << first;
    // The same pages as gradients, added into dk and dv: the last page's rows too.
    std::vector<float> dk(static_cast<size_t>(rows * kvd), 1.0f), dv = dk;
    DeviceVec<float> d_dk(*gpu, dk), d_dv(*gpu, dv);
    cpu.add_from_grad_pages(cp, rows, kvd, p, dk.data(), dv.data(), dt);
    gpu->add_from_grad_pages(gp, rows, kvd, p, d_dk.get(), d_dv.get(), dt);
    EXPECT_EQ(bits(d_dk.read()), bits(dk)) << to_string(dt);
    EXPECT_EQ(bits(d_dv.read()), bits(dv)) << to_string(dt);
  }
}

// ---------------------------------------------------------------- attention

// fp32 family against the CPU: both compute in fp32 on identical (bf16-valued) keys and values, so
// attention_test.cpp's bounds hold unchanged (blocking and summation order, expf vs the CPU's exp).
constexpr double kFp32ForwardTol = 2e-5;
constexpr double kFp32BackwardTol = 5e-5;
// Tensor-core family against the CPU: attention_tc_test.cpp's bounds (reasoning there). bf16 KV
// pages do not add error on that side: the kernels would round those operands to bf16 anyway.
constexpr double kTcOutputTol = 1e-2;
constexpr double kTcLseTol = 2e-3;
constexpr double kTcGradientTol = 2e-2;
// bf16 gradient pages, fp32 family: the GPU and the CPU round sums that differ by fp32 summation
// order (~kFp32BackwardTol), so a stored element equals the CPU's unless the two sums straddle a
// rounding boundary, and then it is the neighbouring bf16. Elementwise bound: one bf16 spacing plus
// 10x the fp32 tolerance (times the RMS of the contribution, for elements whose sum nearly cancels).
// Such straddles happen with probability ~ (fp32 difference) / (bf16 spacing) ~ 1e-4 per element; a
// wrong rounding mode (truncation, ties away) would change ~half of them: at most 1% may differ.
constexpr double kMaxRoundingFlips = 1e-2;

enum class Family { fp32, tc };

struct Case {
  const char* name;
  int64_t T, qh, kvh, hd, p, U;
  int select_groups;  // 0 dense, 1 shared, -1 per KV head
};

struct Param {
  Case c;
  Family family;
};

std::ostream& operator<<(std::ostream& os, const Param& p) {
  return os << p.c.name << (p.family == Family::tc ? "_tc" : "_fp32");
}

// One attention problem whose pages hold bf16-representable values: pages_h (bf16 bits) and
// pages_f (the same values as fp32); gradient pages start from grads0_h / grads0_f likewise.
struct Problem {
  Case c;
  int64_t qd, kvd, page;
  std::vector<float> q, k, v, dout, pages_f, grads0_f;
  std::vector<uint16_t> pages_h, grads0_h;
  PagedAttention a;  // without pointers

  explicit Problem(const Case& cs) : c(cs) {
    qd = c.qh * c.hd;
    kvd = c.kvh * c.hd;
    page = 2 * c.p * kvd;
    const int64_t qpages = (c.T + c.p - 1) / c.p;
    q = random_vec(static_cast<size_t>(c.T * qd), 1, 0.5f);
    k = random_vec(static_cast<size_t>(c.T * kvd), 2, 0.5f);
    v = random_vec(static_cast<size_t>(c.T * kvd), 3);
    dout = random_vec(static_cast<size_t>(c.T * qd), 5);
    pages_h = to_bf16(random_vec(static_cast<size_t>(std::max<int64_t>(c.U * page, 1)), 4, 0.5f));
    pages_f = from_bf16(pages_h);
    // Gradient pages already hold sums of about the size one call adds (~0.03 .. 0.1 RMS here), so
    // that a bf16 rounding of the stored sum does not dwarf the contribution being compared.
    grads0_h = to_bf16(random_vec(static_cast<size_t>(std::max<int64_t>(c.U * page, 1)), 6, 0.1f));
    grads0_f = from_bf16(grads0_h);
    a.rows = c.T;
    a.q_heads = c.qh;
    a.kv_heads = c.kvh;
    a.head_dim = c.hd;
    a.page_tokens = c.p;
    if (c.select_groups != 0) {
      a.select_groups = c.select_groups == 1 ? 1 : c.kvh;
      a.select = selections(qpages * a.select_groups, c.U, 7);
    }
  }
};

// Results of one backend: forward, and backward from given o and lse; gradient pages as values
// (grads) and, for bf16 gradient pages, as stored bits (grads_h).
struct Results {
  std::vector<float> o, lse, dq, dk, dv, grads;
  std::vector<uint16_t> grads_h;
};

// Page storage of a dtype on the host: bf16 bits or fp32 values, as bytes.
std::vector<uint8_t> page_bytes(PageDtype dt, const std::vector<uint16_t>& h, const std::vector<float>& f) {
  std::vector<uint8_t> raw(dt == PageDtype::bf16 ? h.size() * 2 : f.size() * 4);
  std::memcpy(raw.data(), dt == PageDtype::bf16 ? static_cast<const void*>(h.data()) : f.data(), raw.size());
  return raw;
}

Results grads_of(PageDtype gdt, const std::vector<uint8_t>& raw, Results r) {
  if (gdt == PageDtype::bf16) {
    r.grads_h.resize(raw.size() / 2);
    std::memcpy(r.grads_h.data(), raw.data(), raw.size());
    r.grads = from_bf16(r.grads_h);
  } else {
    r.grads.resize(raw.size() / 4);
    std::memcpy(r.grads.data(), raw.data(), raw.size());
  }
  return r;
}

Results run_cpu(const Problem& pb, PageDtype kdt, PageDtype gdt) {
  const Case& c = pb.c;
  std::vector<uint8_t> kv = page_bytes(kdt, pb.pages_h, pb.pages_f), gr = page_bytes(gdt, pb.grads0_h, pb.grads0_f);
  PagedAttention ac = pb.a;
  ac.q = pb.q.data();
  ac.k_own = pb.k.data();
  ac.v_own = pb.v.data();
  ac.kv_dtype = kdt;
  ac.grad_dtype = gdt;
  std::vector<float*> gp;
  for (int64_t u = 0; u < c.U; ++u) {
    ac.prefix_pages.push_back(reinterpret_cast<const float*>(kv.data() + u * pb.page * page_dtype_bytes(kdt)));
    gp.push_back(reinterpret_cast<float*>(gr.data() + u * pb.page * page_dtype_bytes(gdt)));
  }
  Results r;
  r.o.resize(static_cast<size_t>(c.T * pb.qd));
  r.lse.resize(static_cast<size_t>(c.T * c.qh));
  r.dq.resize(r.o.size());
  r.dk.resize(pb.k.size());
  r.dv.resize(pb.v.size());
  CpuBackend cpu;
  cpu.attention_fwd(ac, r.o.data(), r.lse.data());
  cpu.attention_bwd(ac, r.o.data(), r.lse.data(), pb.dout.data(), r.dq.data(), r.dk.data(), r.dv.data(), gp);
  return grads_of(gdt, gr, std::move(r));
}

// The backward consumes o_in / lse_in (the CPU's), so that only the backward is compared.
Results run_gpu(CudaBackend& gpu, const Problem& pb, PageDtype kdt, PageDtype gdt, const std::vector<float>& o_in,
                const std::vector<float>& lse_in) {
  const Case& c = pb.c;
  DeviceVec<float> d_q(gpu, pb.q), d_k(gpu, pb.k), d_v(gpu, pb.v), d_dout(gpu, pb.dout);
  DeviceVec<uint8_t> d_pages(gpu, page_bytes(kdt, pb.pages_h, pb.pages_f)),
      d_grads(gpu, page_bytes(gdt, pb.grads0_h, pb.grads0_f));
  DeviceVec<float> d_o(gpu, std::vector<float>(o_in.size())), d_lse(gpu, std::vector<float>(lse_in.size())),
      d_dq(gpu, std::vector<float>(o_in.size(), 9.0f)), d_dk(gpu, std::vector<float>(pb.k.size(), 9.0f)),
      d_dv(gpu, std::vector<float>(pb.v.size(), 9.0f));  // 9: the backward must overwrite
  DeviceVec<float> d_oc(gpu, o_in), d_lsec(gpu, lse_in);
  PagedAttention ag = pb.a;
  ag.q = d_q.get();
  ag.k_own = d_k.get();
  ag.v_own = d_v.get();
  ag.kv_dtype = kdt;
  ag.grad_dtype = gdt;
  std::vector<float*> gp;
  for (int64_t u = 0; u < c.U; ++u) {
    ag.prefix_pages.push_back(reinterpret_cast<const float*>(d_pages.get() + u * pb.page * page_dtype_bytes(kdt)));
    gp.push_back(reinterpret_cast<float*>(d_grads.get() + u * pb.page * page_dtype_bytes(gdt)));
  }
  gpu.attention_fwd(ag, d_o.get(), d_lse.get());
  gpu.attention_bwd(ag, d_oc.get(), d_lsec.get(), d_dout.get(), d_dq.get(), d_dk.get(), d_dv.get(), gp);
  Results r{d_o.read(), d_lse.read(), d_dq.read(), d_dk.read(), d_dv.read(), {}, {}};
  return grads_of(gdt, d_grads.read(), std::move(r));
}

std::vector<float> minus(const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<float> d(a.size());
  for (size_t i = 0; i < a.size(); ++i) d[i] = a[i] - b[i];
  return d;
}

double rms(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += static_cast<double>(x) * x;
  return std::sqrt(s / static_cast<double>(std::max<size_t>(v.size(), 1)));
}

class CudaBf16PageAttention : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    OOMB_REQUIRE_CUDA();
    CudaBackendOptions o = test_options();
    if (GetParam().family == Family::tc) o.attention_kernel = CudaAttentionKernel::bf16_tensor_core;
    gpu = std::make_unique<CudaBackend>(o);
  }
  std::unique_ptr<CudaBackend> gpu;
};

TEST_P(CudaBf16PageAttention, MatchesTheCpuAndFp32PagesOfTheSameValues) {
  const Param prm = GetParam();
  const Problem pb(prm.c);
  const bool tc_shape = prm.c.hd == 64 || prm.c.hd == 128;
  const bool tc = prm.family == Family::tc && tc_shape;
  const Results cpu_kv = run_cpu(pb, PageDtype::bf16, PageDtype::f32);
  const Results cpu_both = run_cpu(pb, PageDtype::bf16, PageDtype::bf16);
  // A: fp32 pages holding the bf16 values; B: bf16 KV pages; C: bf16 KV and gradient pages.
  const Results A = run_gpu(*gpu, pb, PageDtype::f32, PageDtype::f32, cpu_kv.o, cpu_kv.lse);
  const Results B = run_gpu(*gpu, pb, PageDtype::bf16, PageDtype::f32, cpu_kv.o, cpu_kv.lse);
  const Results C = run_gpu(*gpu, pb, PageDtype::bf16, PageDtype::bf16, cpu_both.o, cpu_both.lse);
  EXPECT_EQ(gpu->attention_calls(CudaAttentionKernel::bf16_tensor_core), tc ? 6 : 0);
  EXPECT_EQ(gpu->attention_calls(CudaAttentionKernel::fp32), tc ? 0 : 6);

  // Exact: the page loaders read bf16 as the values they are (the tensor-core kernels' staging of a
  // bf16 page row equals rounding its fp32 value, which is exact), and a bf16 gradient page ends as
  // the fp32 page's result rounded once.
  for (const Results* r : {&B, &C}) {
    const char* what = r == &B ? "bf16 KV pages" : "bf16 KV and gradient pages";
    EXPECT_EQ(bits(r->o), bits(A.o)) << what << ": o";
    EXPECT_EQ(bits(r->lse), bits(A.lse)) << what << ": lse";
    EXPECT_EQ(bits(r->dq), bits(A.dq)) << what << ": dq";
    EXPECT_EQ(bits(r->dk), bits(A.dk)) << what << ": dk own";
    EXPECT_EQ(bits(r->dv), bits(A.dv)) << what << ": dv own";
  }
  EXPECT_EQ(bits(B.grads), bits(A.grads)) << "fp32 gradient pages";
  EXPECT_EQ(C.grads_h, to_bf16(A.grads)) << "bf16 gradient pages = bf16(stored + this call's fp32 sum)";

  // Against the CPU with the same page dtypes.
  for (const auto& [got, want, what] : {std::tuple{&B, &cpu_kv, "bf16 KV pages"},
                                        std::tuple{&C, &cpu_both, "bf16 KV and gradient pages"}}) {
    const double ft = tc ? kTcOutputTol : kFp32ForwardTol, bt = tc ? kTcGradientTol : kFp32BackwardTol;
    EXPECT_LE(rel_l2(got->o, want->o), ft) << what << ": o";
    EXPECT_LE(rel_l2(got->lse, want->lse), tc ? kTcLseTol : kFp32ForwardTol) << what << ": lse";
    EXPECT_LE(rel_l2(got->dq, want->dq), bt) << what << ": dq";
    EXPECT_LE(rel_l2(got->dk, want->dk), bt) << what << ": dk own";
    EXPECT_LE(rel_l2(got->dv, want->dv), bt) << what << ": dv own";
  }
  if (pb.c.U == 0) return;
  const std::vector<float> added_cpu_kv = minus(cpu_kv.grads, pb.grads0_f);
  EXPECT_LE(rel_l2(minus(B.grads, pb.grads0_f), added_cpu_kv), tc ? kTcGradientTol : kFp32BackwardTol)
      << "fp32 gradient pages: what the backward added";
  const std::vector<float> added_cpu = minus(cpu_both.grads, pb.grads0_f);
  const double contribution = rms(added_cpu);
  if (tc) {
    // Both sides round their (tensor-core vs fp32) sums to bf16: up to one spacing apart besides
    // the tensor-core error itself; the allowance is the RMS spacing relative to the contribution.
    double s2 = 0;
    for (float x : cpu_both.grads) s2 += bf16_spacing(x) * bf16_spacing(x);
    const double allowance = std::sqrt(s2 / static_cast<double>(cpu_both.grads.size())) / std::max(contribution, 1e-30);
    EXPECT_LE(rel_l2(minus(C.grads, pb.grads0_f), added_cpu), kTcGradientTol + allowance)
        << "bf16 gradient pages (rounding allowance " << allowance << ")";
  } else {
    int64_t differ = 0, beyond = 0;
    for (size_t i = 0; i < C.grads.size(); ++i) {
      const float g = C.grads[i], w = cpu_both.grads[i];
      if (C.grads_h[i] == cpu_both.grads_h[i]) continue;
      ++differ;
      const double allowed = bf16_spacing(std::max(std::abs(g), std::abs(w))) + 10 * kFp32BackwardTol * contribution;
      if (std::abs(static_cast<double>(g) - w) > allowed) ++beyond;
    }
    EXPECT_EQ(beyond, 0) << "bf16 gradient elements further than one rounding step from the CPU's";
    EXPECT_LE(static_cast<double>(differ), kMaxRoundingFlips * static_cast<double>(C.grads.size()))
        << differ << " of " << C.grads.size() << " bf16 gradient elements differ from the CPU's";
  }
}

const Case kCases[] = {
    // name, T, qh, kvh, hd, p, U, select
    {"hd64_p16_gqa7_ragged_shared", 37, 14, 2, 64, 16, 5, 1},
    {"hd64_p100_gqa1_dense", 130, 2, 2, 64, 100, 2, 0},
    {"hd64_one_row", 1, 2, 1, 64, 8, 3, 0},
    {"hd128_p64_gqa2_per_head", 150, 4, 2, 128, 64, 3, -1},
    {"hd128_p128_gqa7_shared", 200, 7, 1, 128, 128, 2, 1},
    {"hd12_generic", 37, 4, 2, 12, 8, 5, 1},  // no tensor-core kernel: both families run fp32
    {"hd32_per_head", 33, 4, 2, 32, 4, 7, -1},
};

std::vector<Param> params() {
  std::vector<Param> out;
  for (const Case& c : kCases)
    for (Family f : {Family::fp32, Family::tc}) out.push_back({c, f});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaBf16PageAttention, ::testing::ValuesIn(params()), [](const auto& param_info) {
  std::ostringstream os;
  os << param_info.param;
  return os.str();
});

// --attention-kernel bf16-tc: a call the tensor-core kernels cannot take is an error, not a
// silent fp32 fallback.
TEST(CudaBf16Engine, StrictTensorCoreOptionRefusesWhatItCannotRun) {
  OOMB_REQUIRE_CUDA();
  CudaBackendOptions o = test_options();
  o.attention_kernel = CudaAttentionKernel::bf16_tensor_core;
  o.attention_kernel_strict = true;
  CudaBackend tc(o);
  const Problem pb(Case{"hd32", 20, 4, 2, 32, 8, 2, 0});
  const Results cpu_r = run_cpu(pb, PageDtype::bf16, PageDtype::bf16);
  EXPECT_THROW(run_gpu(tc, pb, PageDtype::bf16, PageDtype::bf16, cpu_r.o, cpu_r.lse), Error);
  EXPECT_EQ(tc.attention_calls(CudaAttentionKernel::fp32), 0);
}

}  // namespace
}  // namespace oomb::executor::cudatest
