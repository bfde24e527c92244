#include "executor/cuda/attention_staging.h"

#include <string>

#include "core/error.h"
#include "executor/cuda/attention_tc.cuh"

namespace oomb::executor::cuda::attention_staging {

SelectCsr csr_of(const PagedAttention& a) {
  SelectCsr c;
  if (a.select_groups == 0) return c;
  const int64_t qpages = (a.rows + a.page_tokens - 1) / a.page_tokens;
  OOMB_ASSERT(static_cast<int64_t>(a.select.size()) == qpages * a.select_groups, "selection lists per query page");
  c.offsets.push_back(0);
  for (const auto& list : a.select) {
    for (int32_t s : list) {
      OOMB_ASSERT(s >= 0 && s < static_cast<int32_t>(a.prefix_pages.size()), "selected slot out of range");
      c.slots.push_back(s);
    }
    c.offsets.push_back(static_cast<int32_t>(c.slots.size()));
  }
  return c;
}

AttentionArgs attention_args(const PagedAttention& a) {
  AttentionArgs r;
  r.rows = a.rows;
  r.q_heads = a.q_heads;
  r.kv_heads = a.kv_heads;
  r.head_dim = a.head_dim;
  r.page_tokens = a.page_tokens;
  r.prefix_slots = static_cast<int64_t>(a.prefix_pages.size());
  r.kv_bf16 = a.kv_dtype == PageDtype::bf16;
  r.select_groups = a.select_groups;
  if (a.local != models::LayerAttention::global) {
    // The kernels place a local layer's prefix keys from their slot: the pages right before the
    // chunk, consecutive (the Engine's reach), attended densely.
    const auto U = static_cast<int64_t>(a.prefix_ids.size());
    OOMB_ASSERT(U == r.prefix_slots && a.select_groups == 0 && a.window > 0 && a.q_pos0 % a.page_tokens == 0,
                "a local layer attends its reach's pages densely");
    for (int64_t u = 0; u < U; ++u)
      OOMB_ASSERT(a.prefix_ids[static_cast<size_t>(u)] == a.q_pos0 / a.page_tokens - U + u,
                  "a local layer's prefix pages are the ones right before its chunk");
    r.local = a.local;
    r.window = a.window;
    r.q_pos0 = a.q_pos0;
  }
  return r;
}

// Which family runs a call (after the fallback rule of CudaAttentionKernel::bf16_tensor_core); with
// CudaBackendOptions::attention_kernel_strict a call the tensor-core kernels cannot take is refused.
bool use_tc(const CudaBackendOptions& opt, const AttentionArgs& args, bool buffers_aligned, const char* op) {
  if (opt.attention_kernel != CudaAttentionKernel::bf16_tensor_core) return false;
  if (buffers_aligned && attention_tc_supported(args)) return true;
  if (!opt.attention_kernel_strict) return false;
  std::string why;
  if (args.local != models::LayerAttention::global)
    why = std::string("a ") + (args.local == models::LayerAttention::sliding ? "sliding-window" : "chunked") +
          " layer (windows run on the fp32 kernels)";
  else if (args.head_dim != 64 && args.head_dim != 128)
    why = "head_dim " + std::to_string(args.head_dim) + " (they take 64 or 128)";
  else if (!attention_tc_device_supported())
    why = "this device or build (they need sm_80 or later and a kernel image for it)";
  else
    why = "a buffer that is not 16-byte aligned";
  throw Error("--attention-kernel", "bf16-tc",
              std::string("the bf16 tensor-core kernels cannot run ") + op + " on " + why,
              "use --attention-kernel auto, which runs the fp32 kernels where the tensor-core ones cannot, or fp32");
}

}  // namespace oomb::executor::cuda::attention_staging
