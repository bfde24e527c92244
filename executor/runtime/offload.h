#pragma once
// The page and copy schedule of docs/schedule.md, exactly: which pages are allocated, copied
// h2d / d2h and freed, per layer-pass.
//
// Without offload (R >= L) every page lives in the device pools for the whole step and nothing is
// copied. With offload every page's home is the host tier; a pass gets a device *slot* with the
// pages it needs (stage 1: KV(prefix) + KV(own); stage-2 recompute: KV(prefix); backward:
// KV(prefix) + dKV(prefix) + dKV(own)), copied in before it computes and released when it ends,
// with its write-back (stage 1: KV(own); backward: dKV(prefix)) issued. At most R slots exist:
// the current pass and the copy-in of the next R - 1 passes in the direction of travel (prefetch).
// Every h2d copy waits on the events of the write-backs of the pages it reads; the next pass does
// not wait for a write-back: only the next user of the released slot's device pages does.
//
// Layout (so that copies are few large regions): the device pools hold R regions of
// max_slot_pages pages and pass i's slot is region i mod R (KV: own pages, then prefix pages;
// gradients: prefix pages, then own pages); page j of layer l lives at l * P + j of its home pool
// (the host with offload). So a dense copy is one region.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "executor/runtime/backend.h"
#include "executor/runtime/memory_account.h"
#include "executor/runtime/op_tagger.h"
#include "executor/runtime/page_pool.h"
#include "executor/runtime/trace_recorder.h"
#include "step/geometry.h"
#include "step/phase.h"

namespace oomb::executor {

using step::Geometry;
using step::pass_op;  // Op::layer_fwd, layer_recompute, layer_bwd
using step::PassKind;

struct Pass {
  PassKind kind = PassKind::fill;
  int64_t chunk = 0, layer = 0;
  int stage() const { return kind == PassKind::fill ? 1 : 2; }
};

// Device pointers of the pages one pass uses (each page: [K or dK rows p][V or dV rows p]; KV pages
// stored as Geometry::kv_dtype, gradient pages as Geometry::grad_dtype).
struct PassPages {
  const std::vector<int64_t>* prefix = nullptr;  // attended earlier pages (logical ids, ascending)
  std::vector<float*> prefix_kv, prefix_dkv;     // per prefix page
  std::vector<float*> own_kv;                    // fill: where the chunk's K/V go
  std::vector<float*> own_dkv;                   // backward: gradients later chunks accumulated
};

struct CopyCounters {
  int64_t h2d_bytes = 0, d2h_bytes = 0;
  int64_t requests = 0;  // copy_async calls
  int64_t regions = 0;   // contiguous regions in them (one cudaMemcpyAsync each unless batched)
};

// The layers' attention kinds as the page schedule sees them (docs/model.md "Layer kinds and
// experts"). A global layer's pages follow the schedule above (its home position and device slot
// counted among the global layers only). A sliding or chunked layer's pages live on the device in
// the local pools and never move: a fill allocates the chunk's own KV pages and keeps those the
// next chunk's first query reaches back to (step::reach_first_page); a backward allocates, zeroed,
// the gradient pages of its own rows and of its reach that no later chunk left pending, and frees
// the chunk's own KV and gradient pages. Empty `layers`: every layer global.
struct LocalPages {
  struct Layer {
    models::LayerAttention kind = models::LayerAttention::global;
    int64_t window = 0;
  };
  std::vector<Layer> layers;
  int64_t kv_pages = 0, grad_pages = 0;  // the local_kv_pool and local_kv_grad_pool rows
  bool local(int64_t layer) const {
    return !layers.empty() && layers[static_cast<size_t>(layer)].kind != models::LayerAttention::global;
  }
};

class OffloadEngine {
 public:
  // prefix_of(pass): the pages the pass attends, or null when not known yet (sparse stage 1 before
  // its selection is made; such a pass is not prefetched and is completed with load_prefix).
  using PrefixFn = std::function<const std::vector<int64_t>*(const Pass&)>;

  // tagger (optional, not owned): each copy_async is issued under its pass's tag (op_tagger.h).
  // device_pool_pages: the capacity of each device pool (the buffer table's kv_pool and kv_grad_pool
  // rows, step/buffers.h PageCounts: at least Geometry::max_slot_pages() per resident layer with
  // offload, every page without).
  OffloadEngine(Backend& backend, const Geometry& g, int64_t device_pool_pages, MemoryAccount& account,
                TraceRecorder& recorder, int64_t host_slab_bytes, OpTagger* tagger = nullptr, LocalPages local = {});
  ~OffloadEngine();
  OffloadEngine(const OffloadEngine&) = delete;
  OffloadEngine& operator=(const OffloadEngine&) = delete;

  void begin_step(PrefixFn prefix_of);
  const std::vector<Pass>& passes() const { return passes_; }
  // Makes pass i's pages available (waits for its copy-in) and starts the prefetch of the next
  // R - 1 passes. Passes are acquired and released strictly in order.
  PassPages& acquire(int64_t i);
  void load_prefix(int64_t i);  // prefix_of(pass i) is now known
  void release(int64_t i);
  // After the last release of a step: waits on the host until the device has finished all work
  // issued so far and every copy completed and reported (so the step's time and trace are whole).
  void finish_step();

  const CopyCounters& counters() const { return counters_; }  // this step
  const PagePool& kv_pool() const { return *kv_pool_; }
  const PagePool& grad_pool() const { return *grad_pool_; }
  const PagePool* host_kv_pool() const { return host_kv_.get(); }
  const PagePool* host_grad_pool() const { return host_grad_.get(); }
  // A global layer's ordinal among the global layers (its home pages, page summaries); -1 if local.
  int64_t global_index(int64_t layer) const { return global_of_[static_cast<size_t>(layer)]; }
  const PagePool* local_kv_pool() const { return local_kv_.get(); }  // null without local layers
  const PagePool* local_grad_pool() const { return local_grad_.get(); }
  int64_t kv_page_bytes() const { return kv_page_bytes_; }      // Geometry::kv_page_bytes (kv_dtype)
  int64_t grad_page_bytes() const { return grad_page_bytes_; }  // Geometry::grad_page_bytes (kv_grad_dtype)
  bool offload() const { return g_.offload; }

 private:
  struct Slot {
    bool local = false;      // a local layer's pass (no region)
    int64_t region = 0;      // of the device pools (offload)
    EventPtr reuse_after;    // write-back of the region's previous pass (null: none)
    bool prefix_loaded = false;
    std::vector<int64_t> dev_kv, dev_dkv;  // device pages owned by the slot
    PassPages pages;
    std::vector<EventPtr> ready;
  };
  // Offload: allocates pass i's slot and issues its copy-in (current: even if its prefix is unknown).
  void prepare(int64_t i, bool current);
  void load_prefix_into(Slot& s, const Pass& p, const std::vector<int64_t>* prefix);
  void resident_pointers(Slot& s, const Pass& p, const std::vector<int64_t>* prefix);
  void local_pointers(Slot& s, const Pass& p);
  void release_local(const Pass& p);
  // A global layer's home position base (its ordinal among the global layers x P).
  int64_t home(int64_t layer) const { return global_index(layer) * g_.P; }
  EventPtr issue(CopyDir dir, std::vector<CopyRegion> regions, std::vector<EventPtr> after, const char* name,
                 const Pass& p);
  void sample();
  void drain();  // host waits for every copy in flight
  // Page `offset` of slot s's region in `pool`.
  int64_t slot_page(PagePool& pool, const Slot& s, int64_t offset) const;

  Backend& backend_;
  Geometry g_;
  int64_t kv_dim_;
  int64_t kv_page_bytes_, grad_page_bytes_;
  MemoryAccount& account_;
  TraceRecorder& recorder_;
  OpTagger* tagger_;
  std::unique_ptr<PagePool> kv_pool_, grad_pool_, host_kv_, host_grad_;
  LocalPages local_;
  std::unique_ptr<PagePool> local_kv_, local_grad_;
  std::vector<int64_t> global_of_;    // per layer: its ordinal among the global layers, -1 if local
  std::vector<int64_t> pass_global_;  // per pass: its ordinal among the global layers' passes, or -1
  std::vector<PageTable> kv_table_, dkv_table_;  // per layer: device (no offload) or host pages
  std::vector<EventPtr> host_kv_written_, host_dkv_written_;  // per host page: last write-back
  std::vector<EventPtr> in_flight_;
  std::vector<EventPtr> region_reuse_after_;  // per device region: its last pass's write-back
  std::vector<Pass> passes_;
  PrefixFn prefix_of_;
  std::map<int64_t, Slot> slots_;
  CopyCounters counters_;
};

}  // namespace oomb::executor
