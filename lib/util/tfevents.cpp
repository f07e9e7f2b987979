// CRC-32C, protobuf's varint and fixed encodings for the Event fields kiln writes,
// TFRecord framing, and the file.
#include "util/tfevents.h"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "util/error.h"

namespace kiln::tfevents {
namespace {

constexpr std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr auto kTable = make_table();

void varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7F) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}

void key(std::string& out, int field, int wire_type) { varint(out, (static_cast<uint64_t>(field) << 3) | wire_type); }

template <typename T>
void fixed(std::string& out, T v) {  // little-endian, as the x86 and ARM hosts kiln runs on store it
  char bytes[sizeof(T)];
  std::memcpy(bytes, &v, sizeof(T));
  out.append(bytes, sizeof(T));
}

void bytes_field(std::string& out, int field, std::string_view data) {
  key(out, field, 2);
  varint(out, data.size());
  out += data;
}

double now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

uint32_t crc32c(std::string_view data, uint32_t crc) {
  crc = ~crc;
  for (const char c : data) crc = kTable[(crc ^ static_cast<uint8_t>(c)) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

uint32_t masked_crc32c(std::string_view data) {
  const uint32_t crc = crc32c(data);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string frame(std::string_view record) {
  std::string out, length;
  fixed(length, static_cast<uint64_t>(record.size()));
  out += length;
  fixed(out, masked_crc32c(length));
  out += record;
  fixed(out, masked_crc32c(record));
  return out;
}

namespace {

void double_field(std::string& out, int field, double v) {
  key(out, field, 1);
  fixed(out, v);
}

void packed_doubles(std::string& out, int field, const std::vector<double>& values) {
  std::string packed;
  for (const double v : values) fixed(packed, v);
  bytes_field(out, field, packed);
}

std::string event_with_summary(double wall_time, int64_t step, const std::string& value) {
  std::string summary;
  bytes_field(summary, 1, value);
  std::string e;
  double_field(e, 1, wall_time);
  key(e, 2, 0);
  varint(e, static_cast<uint64_t>(step));
  bytes_field(e, 5, summary);
  return e;
}

}  // namespace

std::string file_version_event(double wall_time) {
  std::string e;
  double_field(e, 1, wall_time);
  bytes_field(e, 3, "brain.Event:2");
  return e;
}

std::string scalar_event(double wall_time, int64_t step, std::string_view tag, float value) {
  std::string v;  // Summary.Value: tag (1), simple_value (2)
  bytes_field(v, 1, tag);
  key(v, 2, 5);
  fixed(v, value);
  return event_with_summary(wall_time, step, v);
}

std::string histogram_event(double wall_time, int64_t step, std::string_view tag, const Histogram& h) {
  std::string histo;  // HistogramProto
  double_field(histo, 1, h.min);
  double_field(histo, 2, h.max);
  double_field(histo, 3, h.num);
  double_field(histo, 4, h.sum);
  double_field(histo, 5, h.sum_squares);
  packed_doubles(histo, 6, h.bucket_limit);
  packed_doubles(histo, 7, h.bucket);
  std::string v;  // Summary.Value: tag (1), histo (5)
  bytes_field(v, 1, tag);
  bytes_field(v, 5, histo);
  return event_with_summary(wall_time, step, v);
}

std::string session_start_event(double wall_time, int64_t step) {
  std::string log;  // SessionLog: status (field 1, enum) = START (1)
  key(log, 1, 0);
  varint(log, 1);
  std::string e;
  double_field(e, 1, wall_time);
  key(e, 2, 0);
  varint(e, static_cast<uint64_t>(step));
  bytes_field(e, 7, log);  // Event.session_log (6 is the deprecated log_message)
  return e;
}

EventWriter::EventWriter(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw IoError(dir, "create the TensorBoard directory", ec.value());
  char host[256] = "localhost";
  ::gethostname(host, sizeof host - 1);
  const double t = now();
  path_ = (std::filesystem::path(dir) /
           ("events.out.tfevents." + std::to_string(static_cast<int64_t>(t)) + "." + host))
              .string();
  out_.open(path_, std::ios::binary | std::ios::app);
  if (!out_) throw IoError(path_, "open the file for writing", errno);
  out_ << frame(file_version_event(t));
}

void EventWriter::histogram(std::string_view tag, int64_t step, const Histogram& h) {
  out_ << frame(histogram_event(now(), step, tag, h));
}

void EventWriter::scalar(std::string_view tag, int64_t step, float value) {
  out_ << frame(scalar_event(now(), step, tag, value));
}

void EventWriter::restart(int64_t step) { out_ << frame(session_start_event(now(), step)); }

void EventWriter::scalars(std::string_view prefix, const nlohmann::ordered_json& line) {
  if (!line.contains("step") || !line["step"].is_number_integer()) return;
  const int64_t step = line["step"].get<int64_t>();
  for (const auto& [name, value] : line.items()) {
    if (name == "step" || name == "epoch") continue;
    const std::string tag = std::string(prefix) + "/" + name;
    if (value.is_number()) scalar(tag, step, value.get<float>());
    else if (value.is_object())
      for (const auto& [inner, v] : value.items()) {
        if (v.is_number()) scalar(tag + "/" + inner, step, v.get<float>());
        else if (v.is_object())  // per_depth: {"1": {"loss": …, "accuracy": …}}
          for (const auto& [leaf, x] : v.items())
            if (x.is_number()) scalar(tag + "/" + inner + "/" + leaf, step, x.get<float>());
      }
  }
  flush();
}

void EventWriter::flush() {
  out_.flush();
  // A full disk or a read-only file system: the stream's write(2) set errno.
  if (!out_) throw IoError(path_, "write", errno);
}

}  // namespace kiln::tfevents
