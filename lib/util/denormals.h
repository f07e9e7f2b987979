// Flushing float denormals to zero on the CPU threads of a training run. A float32
// below 2^-126 (1.2e-38) is a denormal, and on x86 every SIMD instruction that reads
// or makes one takes a microcode assist of about a hundred cycles. Training makes them
// without anyone asking: AdamW's first moment of a unit whose ReLU never fires decays
// by beta1 a step, 0.9^k, below 2^-126 within about 800 steps (2.4 % of the default
// MLP's moments after 10 epochs), and the default run's step grew from 1.85 ms in
// epoch 1 to 2.2 ms in epoch 10 (docs/performance.md). Values that small carry
// nothing a float32 model learns from.
#pragma once

namespace kiln::util {

/// While it lives, the calling thread and every thread of ATen's intra-op pool treat
/// float denormals as zero and flush results that would be denormal to zero (x86:
/// MXCSR's DAZ and FTZ; elsewhere ATen's setFlushDenormal). A thread started within
/// the scope by one of them inherits the mode. torch.set_flush_denormal(True) sets the
/// calling thread only. The destructor gives each thread its earlier mode back.
/// `on` false changes nothing. Example: kiln::util::FlushDenormals flush(true);
class FlushDenormals {
 public:
  explicit FlushDenormals(bool on);
  ~FlushDenormals();
  FlushDenormals(const FlushDenormals&) = delete;
  FlushDenormals& operator=(const FlushDenormals&) = delete;

 private:
  bool on_;
  unsigned before_ = 0;  // the calling thread's mode before (every pool thread gets it back)
};

/// Whether the calling thread flushes denormals (x86: MXCSR's DAZ and FTZ both set).
bool flushes_denormals();

}  // namespace kiln::util
