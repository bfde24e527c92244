#include "core/interrupts.h"

#include <signal.h>
#include <unistd.h>

#include <csignal>
#include <cstring>

namespace oomb {

namespace {

// The temp file of the write in flight, removed if the process is interrupted (SIGINT, SIGTERM,
// SIGHUP) before the rename. A SIGKILL leaves it: its name says what it is and never collides.
char g_inflight_tmp[4096];
volatile std::sig_atomic_t g_inflight = 0;

// The temporaries of the FileSetWriter in flight (one at a time), and whether it is switching.
const char* const* volatile g_set_tmps = nullptr;
volatile std::sig_atomic_t g_set_count = 0;
volatile std::sig_atomic_t g_set_committing = 0;
volatile std::sig_atomic_t g_set_pending = 0;

// A DeferInterrupts in scope, and the first signal it held back.
volatile std::sig_atomic_t g_defer = 0;
volatile std::sig_atomic_t g_deferred = 0;

extern "C" void remove_inflight_tmp(int sig) {
  if (g_set_committing) {  // a checkpoint switching: finished first, then this signal
    g_set_pending = sig;
    return;
  }
  if (g_defer && !g_deferred) {  // the work in progress ends cleanly and writes what it has
    g_deferred = sig;
    static const char msg[] = "\noomb: interrupted: finishing the step in progress (signal again to stop at once)\n";
    (void)!::write(STDERR_FILENO, msg, sizeof msg - 1);
    return;
  }
  if (g_inflight) ::unlink(g_inflight_tmp);
  for (std::sig_atomic_t i = 0; i < g_set_count; ++i)
    if (g_set_tmps[i] && g_set_tmps[i][0]) ::unlink(g_set_tmps[i]);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

}  // namespace

namespace interrupt_cleanup {

void install() {
  static const bool installed = [] {
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
      struct sigaction old {};
      if (::sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) std::signal(sig, remove_inflight_tmp);
    }
    return true;
  }();
  (void)installed;
}

void set_file(const std::string& tmp) {
  if (tmp.size() >= sizeof g_inflight_tmp) return;  // (never: a path this long cannot be created)
  std::memcpy(g_inflight_tmp, tmp.c_str(), tmp.size() + 1);
  g_inflight = 1;
}

void clear_file() { g_inflight = 0; }

void set_file_set(const char* const* tmps, size_t count) {
  g_set_tmps = tmps;
  g_set_count = static_cast<std::sig_atomic_t>(count);
}

void clear_file_set() { g_set_count = 0; }

bool file_set_active() { return g_set_count != 0; }

void begin_switch() { g_set_committing = 1; }

void end_switch() { g_set_committing = 0; }

void raise_held_by_switch() {
  if (const int sig = g_set_pending) {
    g_set_pending = 0;
    std::signal(sig, SIG_DFL);
    std::raise(sig);
  }
}

}  // namespace interrupt_cleanup

DeferInterrupts::DeferInterrupts() {
  interrupt_cleanup::install();
  g_defer = 1;
}

DeferInterrupts::~DeferInterrupts() { g_defer = 0; }

int interrupt_pending() { return g_deferred; }

void raise_pending_interrupt() {
  if (const int sig = g_deferred) {
    std::signal(sig, SIG_DFL);
    std::raise(sig);
  }
}

}  // namespace oomb
