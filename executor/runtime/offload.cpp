#include "executor/runtime/offload.h"

#include <algorithm>

#include "core/error.h"
#include "core/units.h"
#include "step/buffers.h"

namespace oomb::executor {

OffloadEngine::OffloadEngine(Backend& backend, const Geometry& g, int64_t device_pool_pages, MemoryAccount& account,
                             TraceRecorder& recorder, int64_t host_slab_bytes, OpTagger* tagger, LocalPages local)
    : backend_(backend),
      g_(g),
      kv_dim_(g.kvd),
      kv_page_bytes_(g.kv_page_bytes),
      grad_page_bytes_(g.grad_page_bytes),
      account_(account),
      recorder_(recorder),
      tagger_(tagger),
      local_(std::move(local)) {
  int64_t globals = 0;
  for (int64_t l = 0; l < g.L; ++l) global_of_.push_back(local_.local(l) ? -1 : globals++);
  // Pool sizes (docs/schedule.md): without offload all Lg * P pages of each kind (the global
  // layers'); with offload R slots of the largest slot on the device and all pages on the host.
  const int64_t all = checked_mul(globals, g.P, "pages");
  const int64_t device_pages = device_pool_pages;
  OOMB_ASSERT(device_pages >= (g.offload ? g.R * g.max_slot_pages() : all), "device pools smaller than the schedule");
  kv_pool_ = std::make_unique<PagePool>(backend, Tier::device, step::row::kKvPool, kv_page_bytes_, device_pages, account);
  grad_pool_ =
      std::make_unique<PagePool>(backend, Tier::device, step::row::kKvGradPool, grad_page_bytes_, device_pages, account);
  if (g.offload) {
    host_kv_ = std::make_unique<PagePool>(backend, Tier::host, step::row::kHostKvPages, kv_page_bytes_, all, account,
                                          host_slab_bytes);
    host_grad_ = std::make_unique<PagePool>(backend, Tier::host, step::row::kHostKvGradPages, grad_page_bytes_, all,
                                            account, host_slab_bytes);
    host_kv_written_.resize(static_cast<size_t>(all));
    host_dkv_written_.resize(static_cast<size_t>(all));
  }
  if (globals < g.L) {
    local_kv_ = std::make_unique<PagePool>(backend, Tier::device, step::row::kLocalKvPool, kv_page_bytes_,
                                           local_.kv_pages, account);
    local_grad_ = std::make_unique<PagePool>(backend, Tier::device, step::row::kLocalKvGradPool, grad_page_bytes_,
                                             local_.grad_pages, account);
  }
  region_reuse_after_.resize(static_cast<size_t>(g.R));
  kv_table_.resize(static_cast<size_t>(g.L));
  dkv_table_.resize(static_cast<size_t>(g.L));
  for (auto& t : kv_table_) t.resize(g.P);
  for (auto& t : dkv_table_) t.resize(g.P);
}

OffloadEngine::~OffloadEngine() {
  // Host waits: a copy's completion calls into the recorder, which may be destroyed after this.
  drain();
}

void OffloadEngine::drain() {
  for (auto& e : in_flight_) e->wait();
  in_flight_.clear();
}

void OffloadEngine::finish_step() {
  // A fence: an empty copy is ordered after all compute issued so far (Backend::copy_async) and
  // after every copy in flight; waiting for it on the host ends the step's device work.
  CopyRequest fence;
  fence.dir = CopyDir::d2h;
  fence.after = in_flight_;
  const EventPtr e = backend_.copy_async(std::move(fence));
  e->wait();
  drain();
}

void OffloadEngine::begin_step(PrefixFn prefix_of) {
  OOMB_ASSERT(slots_.empty(), "previous step left passes unreleased");
  prefix_of_ = std::move(prefix_of);
  counters_ = {};
  passes_.clear();
  for (int64_t c = 0; c < g_.n; ++c)
    for (int64_t l = 0; l < g_.L; ++l) passes_.push_back({PassKind::fill, c, l});
  for (int64_t c = g_.n - 1; c >= 0; --c) {
    for (int64_t l = 0; l < g_.L; ++l) passes_.push_back({PassKind::recompute, c, l});
    for (int64_t l = g_.L - 1; l >= 0; --l) passes_.push_back({PassKind::backward, c, l});
  }
  pass_global_.clear();
  int64_t ordinal = 0;
  for (const Pass& p : passes_) pass_global_.push_back(local_.local(p.layer) ? -1 : ordinal++);
}

EventPtr OffloadEngine::issue(CopyDir dir, std::vector<CopyRegion> regions, std::vector<EventPtr> after,
                              const char* name, const Pass& p) {
  int64_t bytes = 0;
  for (const auto& r : regions) bytes += r.bytes;
  (dir == CopyDir::h2d ? counters_.h2d_bytes : counters_.d2h_bytes) += bytes;
  // Regions contiguous on both sides become one (the pages are laid out so that most are).
  std::vector<CopyRegion> runs;
  for (const CopyRegion& r : regions) {
    if (!runs.empty() && static_cast<char*>(runs.back().dst) + runs.back().bytes == r.dst &&
        static_cast<const char*>(runs.back().src) + runs.back().bytes == r.src)
      runs.back().bytes += r.bytes;
    else
      runs.push_back(r);
  }
  counters_.regions += static_cast<int64_t>(runs.size());
  ++counters_.requests;
  CopyRequest req;
  req.dir = dir;
  req.regions = std::move(runs);
  after.erase(std::remove(after.begin(), after.end(), nullptr), after.end());
  std::sort(after.begin(), after.end());
  after.erase(std::unique(after.begin(), after.end()), after.end());
  req.after = std::move(after);
  TraceRecorder* rec = &recorder_;
  const bool h2d = dir == CopyDir::h2d;
  req.on_done = [rec, h2d, name, p, bytes](int64_t t0, int64_t t1) {
    rec->copy(h2d, name, pass_op(p.kind), p.stage(), p.chunk, p.layer, t0, t1, bytes);
  };
  // The copy's own pass (a prefetch is issued while an earlier pass runs).
  const TagScope tag(tagger_, p.stage(), p.chunk, p.layer, pass_op(p.kind), name);
  EventPtr e = backend_.copy_async(std::move(req));
  in_flight_.push_back(e);
  return e;
}

void OffloadEngine::resident_pointers(Slot& s, const Pass& p, const std::vector<int64_t>* prefix) {
  s.pages.prefix = prefix;
  s.prefix_loaded = true;
  const PageTable& kv = kv_table_[static_cast<size_t>(p.layer)];
  const PageTable& dkv = dkv_table_[static_cast<size_t>(p.layer)];
  for (int64_t k : *prefix) {
    OOMB_ASSERT(kv[k] >= 0, "attended page not resident");
    s.pages.prefix_kv.push_back(kv_pool_->ptr(kv[k]));
    if (p.kind == PassKind::backward) s.pages.prefix_dkv.push_back(grad_pool_->ptr(dkv[k]));
  }
}

void OffloadEngine::load_prefix_into(Slot& s, const Pass& p, const std::vector<int64_t>* prefix) {
  s.pages.prefix = prefix;
  s.prefix_loaded = true;
  const PageTable& kv = kv_table_[static_cast<size_t>(p.layer)];
  const PageTable& dkv = dkv_table_[static_cast<size_t>(p.layer)];
  std::vector<CopyRegion> kv_regions, dkv_regions;
  // The slot's device pages are written only after the last write-back that read them.
  std::vector<EventPtr> kv_after{s.reuse_after}, dkv_after{s.reuse_after};
  for (int64_t k : *prefix) {
    const int64_t d = slot_page(*kv_pool_, s, static_cast<int64_t>(s.dev_kv.size()));
    s.dev_kv.push_back(d);
    s.pages.prefix_kv.push_back(kv_pool_->ptr(d));
    kv_regions.push_back({kv_pool_->ptr(d), host_kv_->ptr(kv[k]), kv_page_bytes_});
    kv_after.push_back(host_kv_written_[static_cast<size_t>(kv[k])]);
    if (p.kind == PassKind::backward) {
      // Gradient slots: prefix pages first, then the own pages (placed by prepare), as on the host.
      const int64_t dd = slot_page(*grad_pool_, s, static_cast<int64_t>(s.pages.prefix_dkv.size()));
      s.dev_dkv.push_back(dd);
      s.pages.prefix_dkv.push_back(grad_pool_->ptr(dd));
      dkv_regions.push_back({grad_pool_->ptr(dd), host_grad_->ptr(dkv[k]), grad_page_bytes_});
      dkv_after.push_back(host_dkv_written_[static_cast<size_t>(dkv[k])]);
    }
  }
  if (p.kind == PassKind::backward) {
    // The own gradient pages hold what later chunks accumulated: copied in, never written back.
    const int64_t first = g_.first_own_page(p.chunk);
    for (size_t j = 0; j < s.pages.own_dkv.size(); ++j) {
      const int64_t hp = dkv[first + static_cast<int64_t>(j)];
      dkv_regions.push_back({s.pages.own_dkv[j], host_grad_->ptr(hp), grad_page_bytes_});
      dkv_after.push_back(host_dkv_written_[static_cast<size_t>(hp)]);
    }
  }
  if (!kv_regions.empty()) s.ready.push_back(issue(CopyDir::h2d, std::move(kv_regions), kv_after, "kv_prefix", p));
  if (!dkv_regions.empty()) s.ready.push_back(issue(CopyDir::h2d, std::move(dkv_regions), dkv_after, "dkv", p));
}

void OffloadEngine::prepare(int64_t i, bool current) {
  if (slots_.count(i)) return;
  const Pass& p = passes_[static_cast<size_t>(i)];
  const std::vector<int64_t>* prefix = prefix_of_(p);
  OOMB_ASSERT(prefix || p.kind == PassKind::fill, "stage-2 pass without a recorded selection");
  if (!prefix && !current) return;  // sparse stage 1: its pages are known only after its selection
  Slot& s = slots_[i];
  // Slots live at most R at a time, passes i .. i + R - 1: pass i owns region i mod R of each
  // device pool (max_slot_pages pages), so its pages form one ascending run.
  s.region = pass_global_[static_cast<size_t>(i)] % g_.R;
  for (const auto& [k, other] : slots_)
    OOMB_ASSERT(k == i || other.local || other.region != s.region, "two live slots in one device region");
  s.reuse_after = region_reuse_after_[static_cast<size_t>(s.region)];
  const int64_t own = g_.own_pages(p.chunk);
  for (int64_t j = 0; j < own; ++j) {
    if (p.kind == PassKind::fill) {
      const int64_t d = slot_page(*kv_pool_, s, j);
      s.dev_kv.push_back(d);
      s.pages.own_kv.push_back(kv_pool_->ptr(d));
    } else if (p.kind == PassKind::backward) {
      const int64_t d = slot_page(*grad_pool_, s, static_cast<int64_t>(prefix->size()) + j);
      s.dev_dkv.push_back(d);
      s.pages.own_dkv.push_back(grad_pool_->ptr(d));
    }
  }
  if (prefix) load_prefix_into(s, p, prefix);
}

PassPages& OffloadEngine::acquire(int64_t i) {
  OOMB_ASSERT(i >= 0 && i < static_cast<int64_t>(passes_.size()));
  const Pass& p = passes_[static_cast<size_t>(i)];
  if (local_.local(p.layer)) {
    Slot& s = slots_[i];
    local_pointers(s, p);
    sample();
    return s.pages;
  }
  const int64_t first = g_.first_own_page(p.chunk), own = g_.own_pages(p.chunk);
  PageTable& kv = kv_table_[static_cast<size_t>(p.layer)];
  PageTable& dkv = dkv_table_[static_cast<size_t>(p.layer)];
  if (p.kind == PassKind::fill) {
    // Stage 1 creates the chunk's pages in their home tier; gradient pages start at zero.
    PagePool& home_kv = g_.offload ? *host_kv_ : *kv_pool_;
    PagePool& home_dkv = g_.offload ? *host_grad_ : *grad_pool_;
    // Page j of layer l is physical page l * P + j of its home pool, so a layer's pages are one
    // ascending run there and a copy of consecutive pages is one region.
    for (int64_t j = first; j < first + own; ++j) {
      OOMB_ASSERT(kv[j] < 0 && dkv[j] < 0, "page created twice");
      kv[j] = home_kv.allocate_at(home(p.layer) + j, false);
      dkv[j] = home_dkv.allocate_at(home(p.layer) + j, true);
      if (g_.offload) {
        host_kv_written_[static_cast<size_t>(kv[j])] = nullptr;
        host_dkv_written_[static_cast<size_t>(dkv[j])] = nullptr;
      }
    }
  }
  if (!g_.offload) {
    Slot& s = slots_[i];
    if (p.kind == PassKind::fill)
      for (int64_t j = first; j < first + own; ++j) s.pages.own_kv.push_back(kv_pool_->ptr(kv[j]));
    if (p.kind == PassKind::backward)
      for (int64_t j = first; j < first + own; ++j) s.pages.own_dkv.push_back(grad_pool_->ptr(dkv[j]));
    if (const std::vector<int64_t>* prefix = prefix_of_(p)) resident_pointers(s, p, prefix);
    sample();
    return s.pages;
  }
  prepare(i, true);
  // Prefetch: the copy-in of the next R - 1 global passes runs while this one computes.
  const auto last = static_cast<int64_t>(passes_.size());
  for (int64_t k = i + 1, ahead = 0; k < last && ahead < g_.R - 1; ++k)
    if (pass_global_[static_cast<size_t>(k)] >= 0) {
      prepare(k, false);
      ++ahead;
    }
  Slot& s = slots_.at(i);
  for (auto& e : s.ready) backend_.wait(e);
  s.ready.clear();
  backend_.wait(s.reuse_after);  // the kernels write pages (own KV) a write-back may still read
  sample();
  return s.pages;
}

void OffloadEngine::load_prefix(int64_t i) {
  Slot& s = slots_.at(i);
  if (s.prefix_loaded) return;
  const Pass& p = passes_[static_cast<size_t>(i)];
  const std::vector<int64_t>* prefix = prefix_of_(p);
  OOMB_ASSERT(prefix, "load_prefix before the selection was recorded");
  if (!g_.offload) {
    resident_pointers(s, p, prefix);
    return;
  }
  load_prefix_into(s, p, prefix);
  for (auto& e : s.ready) backend_.wait(e);
  s.ready.clear();
  sample();
}

void OffloadEngine::release(int64_t i) {
  auto it = slots_.find(i);
  OOMB_ASSERT(it != slots_.end() && it == slots_.begin(), "passes must be released in order");
  Slot& s = it->second;
  const Pass& p = passes_[static_cast<size_t>(i)];
  if (s.local) {
    release_local(p);
    slots_.erase(it);
    sample();
    return;
  }
  const int64_t first = g_.first_own_page(p.chunk), own = g_.own_pages(p.chunk);
  PageTable& kv = kv_table_[static_cast<size_t>(p.layer)];
  PageTable& dkv = dkv_table_[static_cast<size_t>(p.layer)];
  if (g_.offload) {
    EventPtr wb;
    if (p.kind == PassKind::fill) {  // write-back KV(own)
      std::vector<CopyRegion> regions;
      for (int64_t j = 0; j < own; ++j)
        regions.push_back(
            {host_kv_->ptr(kv[first + j]), s.pages.own_kv[static_cast<size_t>(j)], kv_page_bytes_});
      wb = issue(CopyDir::d2h, std::move(regions), {}, "kv_own", p);
      for (int64_t j = 0; j < own; ++j) host_kv_written_[static_cast<size_t>(kv[first + j])] = wb;
    } else if (p.kind == PassKind::backward && !s.pages.prefix->empty()) {  // write-back dKV(prefix)
      std::vector<CopyRegion> regions;
      for (size_t u = 0; u < s.pages.prefix->size(); ++u)
        regions.push_back(
            {host_grad_->ptr(dkv[(*s.pages.prefix)[u]]), s.pages.prefix_dkv[u], grad_page_bytes_});
      wb = issue(CopyDir::d2h, std::move(regions), {}, "dkv_prefix", p);
      for (int64_t k : *s.pages.prefix) host_dkv_written_[static_cast<size_t>(dkv[k])] = wb;
    }
    // Only the next user of the slot's region waits for the write-back (its copy-in's `after`, or
    // the compute stream at its acquire), never the next pass: it runs in another region.
    region_reuse_after_[static_cast<size_t>(s.region)] = wb;
    for (int64_t d : s.dev_kv) kv_pool_->free(d);
    for (int64_t d : s.dev_dkv) grad_pool_->free(d);
  }
  if (p.kind == PassKind::backward) {
    // The chunk's pages of this layer are no longer needed: later chunks are done with them.
    PagePool& home_kv = g_.offload ? *host_kv_ : *kv_pool_;
    PagePool& home_dkv = g_.offload ? *host_grad_ : *grad_pool_;
    for (int64_t j = first; j < first + own; ++j) {
      home_kv.free(kv[j]);
      home_dkv.free(dkv[j]);
      kv[j] = -1;
      dkv[j] = -1;
    }
  }
  slots_.erase(it);
  // Completed copies need no tracking.
  in_flight_.erase(std::remove_if(in_flight_.begin(), in_flight_.end(), [](const EventPtr& e) { return e->done(); }),
                   in_flight_.end());
  sample();
}

void OffloadEngine::local_pointers(Slot& s, const Pass& p) {
  s.local = true;
  const std::vector<int64_t>* prefix = prefix_of_(p);
  OOMB_ASSERT(prefix, "a local layer's pass without its reach");
  s.pages.prefix = prefix;
  s.prefix_loaded = true;
  PageTable& kv = kv_table_[static_cast<size_t>(p.layer)];
  PageTable& dkv = dkv_table_[static_cast<size_t>(p.layer)];
  for (int64_t k : *prefix) {
    OOMB_ASSERT(kv[k] >= 0, "a local layer's reach was not kept");
    s.pages.prefix_kv.push_back(local_kv_->ptr(kv[k]));
    if (p.kind != PassKind::backward) continue;
    if (dkv[k] < 0) dkv[k] = local_grad_->allocate(true);
    s.pages.prefix_dkv.push_back(local_grad_->ptr(dkv[k]));
  }
  const int64_t first = g_.first_own_page(p.chunk), own = g_.own_pages(p.chunk);
  for (int64_t j = first; j < first + own; ++j) {
    if (p.kind == PassKind::fill) {
      OOMB_ASSERT(kv[j] < 0, "page created twice");
      kv[j] = local_kv_->allocate(false);
      s.pages.own_kv.push_back(local_kv_->ptr(kv[j]));
    } else if (p.kind == PassKind::backward) {
      if (dkv[j] < 0) dkv[j] = local_grad_->allocate(true);  // no later chunk reached it
      s.pages.own_dkv.push_back(local_grad_->ptr(dkv[j]));
    }
  }
}

void OffloadEngine::release_local(const Pass& p) {
  const LocalPages::Layer& layer = local_.layers[static_cast<size_t>(p.layer)];
  PageTable& kv = kv_table_[static_cast<size_t>(p.layer)];
  PageTable& dkv = dkv_table_[static_cast<size_t>(p.layer)];
  const int64_t first = g_.first_own_page(p.chunk), own = g_.own_pages(p.chunk);
  if (p.kind == PassKind::fill) {
    // Kept: the pages the next chunk's first query reaches (a later boundary's reach into this chunk
    // lies within it); none after the last chunk.
    const int64_t keep_from =
        p.chunk + 1 < g_.n ? step::reach_first_page(layer.kind, layer.window, g_.C, g_.p, p.chunk + 1) : first + own;
    for (int64_t j = first; j < first + own; ++j)
      if (j < keep_from) {
        local_kv_->free(kv[j]);
        kv[j] = -1;
      }
  } else if (p.kind == PassKind::backward) {
    for (int64_t j = first; j < first + own; ++j) {
      if (kv[j] >= 0) local_kv_->free(kv[j]);
      local_grad_->free(dkv[j]);
      kv[j] = dkv[j] = -1;
    }
  }
}

int64_t OffloadEngine::slot_page(PagePool& pool, const Slot& s, int64_t offset) const {
  const int64_t size = g_.max_slot_pages();
  OOMB_ASSERT(offset >= 0 && offset < size, "slot larger than max_slot_pages");
  return pool.allocate_at(s.region * size + offset, false);
}

void OffloadEngine::sample() {
  recorder_.memory(account_.in_use(Tier::device), account_.in_use(Tier::host), account_.pool_pages_in_use());
}

}  // namespace oomb::executor
