#pragma once
// Interrupts (SIGINT, SIGTERM, SIGHUP) as oomb handles them: one handler, installed over the default
// action only, that removes the temporaries of the file writes in flight (core/files.h) and, while a
// DeferInterrupts lives, holds the first signal so that the work in progress writes what it has.
#include <cstddef>
#include <string>

namespace oomb {

// While one lives, an interrupt (SIGINT, SIGTERM, SIGHUP: the signals whose handler removes the
// temporaries above) does not end the process: the first is held (interrupt_pending() returns it)
// so that the work in progress can stop at its next check and write what it has; a second one ends
// the process at once, as without it. One at a time; a held signal outlives it.
class DeferInterrupts {
 public:
  DeferInterrupts();
  ~DeferInterrupts();
  DeferInterrupts(const DeferInterrupts&) = delete;
  DeferInterrupts& operator=(const DeferInterrupts&) = delete;
};
// The signal a DeferInterrupts held (0: none).
int interrupt_pending();
// Ends the process by the held signal, as it would have ended without the deferral (a shell sees
// 128 + N: 143 for SIGTERM); returns when none is held.
void raise_pending_interrupt();

// What the handler removes and holds, kept by core/files.cpp (async-signal-safe state: a path copied
// into a fixed buffer, an array of C strings that outlives its registration).
namespace interrupt_cleanup {
void install();                                             // the handlers, once
void set_file(const std::string& tmp);                      // the temporary of the one write in flight
void clear_file();
void set_file_set(const char* const* tmps, size_t count);   // a FileSetWriter's temporaries ("" = none)
void clear_file_set();
bool file_set_active();
void begin_switch();          // a file set's renames: a signal now is held ...
void end_switch();
void raise_held_by_switch();  // ... and raised here, once the switch is complete
}  // namespace interrupt_cleanup

}  // namespace oomb
