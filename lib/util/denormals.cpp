// FlushDenormals: MXCSR bits written on each thread of ATen's intra-op pool through one
// parallel region of one index a thread. Written here: ATen's setFlushDenormal sets the
// calling thread only, and neither it nor a Debian library reads the mode back.
#include "util/denormals.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define KILN_MXCSR 1
#endif

namespace kiln::util {
namespace {

#ifdef KILN_MXCSR
constexpr unsigned kFlushBits = 0x8040;  // FTZ (bit 15) and DAZ (bit 6)
unsigned current_mode() { return _mm_getcsr() & kFlushBits; }
void set_mode(unsigned bits) { _mm_setcsr((_mm_getcsr() & ~kFlushBits) | bits); }
#else
constexpr unsigned kFlushBits = 1;
thread_local unsigned mode = 0;  // what this thread asked ATen for
unsigned current_mode() { return mode; }
void set_mode(unsigned bits) {
  if (at::globalContext().setFlushDenormal(bits != 0)) mode = bits;
}
#endif

// The calling thread, then each pool thread: one index of the range each (grain 1).
void set_everywhere(unsigned bits) {
  set_mode(bits);
  const int64_t threads = at::get_num_threads();
  if (threads > 1 && !at::in_parallel_region())
    at::parallel_for(0, threads, 1, [bits](int64_t, int64_t) { set_mode(bits); });
}

}  // namespace

FlushDenormals::FlushDenormals(bool on) : on_(on) {
  if (!on_) return;
  before_ = current_mode();
  set_everywhere(kFlushBits);
}

FlushDenormals::~FlushDenormals() {
  if (on_) set_everywhere(before_);
}

bool flushes_denormals() { return current_mode() == kFlushBits; }

}  // namespace kiln::util
