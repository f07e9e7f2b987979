// TensorBoard event files written natively: TFRecord framing (length, masked
// CRC-32C of the length, the record, masked CRC-32C of the record) around Event
// protocol buffers encoded field by field — the few fields a scalar needs — so kiln
// links no protobuf runtime that could clash with libtorch's.
#pragma once
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::tfevents {

/// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) of `data`, continuing `crc`.
/// Debian 12 ships no C/C++ CRC-32C library (only python3-crc32c), so it is ours: a
/// byte-wise table, fast enough for event records of tens of bytes.
/// Example: crc32c("123456789") == 0xE3069283
uint32_t crc32c(std::string_view data, uint32_t crc = 0);

/// TFRecord's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t masked_crc32c(std::string_view data);

/// One TFRecord: the 8-byte little-endian length, its masked CRC, the data, the data's masked CRC.
std::string frame(std::string_view record);

/// The Event proto (tensorflow/core/util/event.proto) of a file's first record:
/// wall_time (field 1, double), file_version (field 3) = "brain.Event:2".
std::string file_version_event(double wall_time);

/// An Event with step (field 2) and a Summary (field 5) of one Value: tag (1) and
/// simple_value (2, float).
std::string scalar_event(double wall_time, int64_t step, std::string_view tag, float value);

/// A HistogramProto (tensorflow/core/framework/summary.proto): the values' min, max,
/// count, sum and sum of squares, and the buckets as right edges (bucket_limit) with
/// their counts (bucket).
struct Histogram {
  double min = 0, max = 0, num = 0, sum = 0, sum_squares = 0;
  std::vector<double> bucket_limit, bucket;
};

/// An Event with step and a Summary of one Value: tag (1) and histo (5).
std::string histogram_event(double wall_time, int64_t step, std::string_view tag, const Histogram& h);

/// An Event whose session_log (field 7) says START at `step`: TensorBoard's readers
/// then drop the events of a step ≥ `step` read before it (a run resumed from an
/// earlier checkpoint re-does those steps).
std::string session_start_event(double wall_time, int64_t step);

/// Appends framed events to DIR/events.out.tfevents.<unix time>.<host>, created with
/// its file_version record first; scalars() and flush() send them to the file, and a
/// write the file system refuses throws kiln::IoError naming the file.
/// Example: EventWriter w("runs/x/tb"); w.scalar("loss", 10, 0.5f);
class EventWriter {
 public:
  explicit EventWriter(const std::string& dir);
  void scalar(std::string_view tag, int64_t step, float value);
  void histogram(std::string_view tag, int64_t step, const Histogram& h);
  /// Marks a restart at `step` (session_start_event).
  void restart(int64_t step);
  /// Every number of a metrics.jsonl line as a scalar "<prefix>/<key>" at its "step"
  /// (keys in `skip` and non-numbers left out; nested objects as "<prefix>/<key>/<inner>").
  void scalars(std::string_view prefix, const nlohmann::ordered_json& line);
  void scalars(std::string_view prefix, const nlohmann::json& line) {
    scalars(prefix, nlohmann::ordered_json::parse(line.dump()));
  }
  void flush();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::ofstream out_;
};

}  // namespace kiln::tfevents
