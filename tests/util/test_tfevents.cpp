// TensorBoard event files (util/tfevents.h): CRC-32C against its published check
// values, TFRecord framing, and the Event fields a scalar is written with, decoded
// back byte by byte.
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>

#include "run_files.h"

#include "support.h"
#include "train/histograms.h"
#include "util/tfevents.h"

using namespace kiln::tfevents;

TEST_CASE("crc32c gives the Castagnoli check values", "[util][tfevents]") {
  REQUIRE(crc32c("123456789") == 0xE3069283u);  // the CRC catalogue's check value
  REQUIRE(crc32c(std::string(32, '\0')) == 0x8A9136AAu);  // RFC 3720, B.4: 32 bytes of zeros
  REQUIRE(crc32c(std::string(32, '\xff')) == 0x62A8AB43u);  // RFC 3720, B.4: 32 bytes of ones
  REQUIRE(crc32c("56789", crc32c("1234")) == crc32c("123456789"));  // continued
}

TEST_CASE("frame wraps a record in TFRecord's length, data and masked CRCs", "[util][tfevents]") {
  const std::string record = "hello";
  const auto f = frame(record);
  REQUIRE(f.size() == 8 + 4 + record.size() + 4);
  uint64_t length = 0;
  std::memcpy(&length, f.data(), 8);
  REQUIRE(length == record.size());
  uint32_t length_crc = 0, data_crc = 0;
  std::memcpy(&length_crc, f.data() + 8, 4);
  std::memcpy(&data_crc, f.data() + 12 + record.size(), 4);
  REQUIRE(length_crc == masked_crc32c(f.substr(0, 8)));
  REQUIRE(f.substr(12, record.size()) == record);
  REQUIRE(data_crc == masked_crc32c(record));
  const uint32_t crc = crc32c(record);
  REQUIRE(masked_crc32c(record) == ((crc >> 15) | (crc << 17)) + 0xa282ead8u);
}

TEST_CASE("a scalar event encodes wall time, step, tag and value as Event protos do", "[util][tfevents]") {
  const auto e = scalar_event(1.5, 300, "loss", 0.25f);
  // wall_time: key 0x09 (field 1, fixed64), 8 bytes of 1.5
  REQUIRE(static_cast<uint8_t>(e[0]) == 0x09);
  double t = 0;
  std::memcpy(&t, e.data() + 1, 8);
  REQUIRE(t == 1.5);
  // step: key 0x10 (field 2, varint), 300 = 0xAC 0x02
  REQUIRE(static_cast<uint8_t>(e[9]) == 0x10);
  REQUIRE(static_cast<uint8_t>(e[10]) == 0xAC);
  REQUIRE(static_cast<uint8_t>(e[11]) == 0x02);
  // summary: key 0x2A (field 5, bytes), its length, then value: key 0x0A, length,
  // tag: key 0x0A "loss", simple_value: key 0x15 (field 2, fixed32) 0.25f
  REQUIRE(static_cast<uint8_t>(e[12]) == 0x2A);
  const std::string value = {'\x0a', '\x04', 'l', 'o', 's', 's', '\x15'};
  REQUIRE(e.find(value) != std::string::npos);
  float v = 0;
  std::memcpy(&v, e.data() + e.size() - 4, 4);
  REQUIRE(v == 0.25f);
  REQUIRE(static_cast<uint8_t>(e[13]) == e.size() - 14);  // the summary's length
  const auto version = file_version_event(2.0);
  REQUIRE(version.find("brain.Event:2") == version.size() - 13);
  REQUIRE(static_cast<uint8_t>(version[9]) == 0x1A);  // field 3, bytes
}

TEST_CASE("EventWriter writes the file_version record first, then one record per scalar", "[util][tfevents]") {
  kiln::test::TempDir dir;
  std::string path;
  {
    EventWriter w(dir / "tb");
    w.scalar("train/loss", 1, 2.0f);
    w.scalar("train/loss", 2, 1.0f);
    w.flush();
    path = w.path();
  }
  REQUIRE(path.find("/tb/events.out.tfevents.") != std::string::npos);
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> records;
  for (size_t at = 0; at < bytes.size();) {
    uint64_t length = 0;
    std::memcpy(&length, bytes.data() + at, 8);
    uint32_t crc = 0;
    std::memcpy(&crc, bytes.data() + at + 12 + length, 4);
    records.push_back(bytes.substr(at + 12, length));
    REQUIRE(crc == masked_crc32c(records.back()));
    at += 16 + length;
  }
  REQUIRE(records.size() == 3);
  REQUIRE(records[0].find("brain.Event:2") != std::string::npos);
  REQUIRE(records[2].find("train/loss") != std::string::npos);
}

TEST_CASE("TensorBoard's own reader reads every scalar back with its step and value",
          "[util][tfevents][interop]") {
  const auto py = kiln::test::python_or_skip("tensorboard.backend.event_processing.event_accumulator");
  if (!py) return;
  kiln::test::TempDir dir;
  {
    EventWriter w(dir / "tb");
    for (int64_t step = 1; step <= 50; ++step) {
      w.scalar("train/loss", step, 1.0f / static_cast<float>(step));
      if (step % 10 == 0) w.scalar("test/accuracy", step, 0.5f + 0.01f * static_cast<float>(step));
    }
  }
  std::ofstream(dir / "read.py") << R"(import sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
acc = EventAccumulator(sys.argv[1], size_guidance={"scalars": 0})
acc.Reload()
with open(sys.argv[2], "w") as out:
    for tag in sorted(acc.Tags()["scalars"]):
        for e in acc.Scalars(tag):
            out.write("%s %d %.9g\n" % (tag, e.step, e.value))
)";
  const std::string cmd = *py + " " + (dir / "read.py") + " " + (dir / "tb") + " " + (dir / "read.txt");
  REQUIRE(std::system(cmd.c_str()) == 0);
  std::ifstream in(dir / "read.txt");
  std::string tag;
  int64_t step = 0;
  double value = 0;
  int loss = 0, accuracy = 0;
  while (in >> tag >> step >> value) {
    INFO(tag << " " << step);
    if (tag == "train/loss") {
      ++loss;
      REQUIRE(static_cast<float>(value) == 1.0f / static_cast<float>(step));
    } else {
      REQUIRE(tag == "test/accuracy");
      ++accuracy;
      REQUIRE(static_cast<float>(value) == 0.5f + 0.01f * static_cast<float>(step));
    }
  }
  REQUIRE(loss == 50);
  REQUIRE(accuracy == 5);
}

TEST_CASE("a run's metrics reach TensorBoard once per step, a resume from an older checkpoint included",
          "[train][tfevents][interop]") {
  const auto py = kiln::test::python_or_skip("tensorboard.backend.event_processing.event_accumulator");
  if (!py) return;
  kiln::test::TempDir dir;
  const std::string run = dir / "run";
  const std::vector<std::string> o = {"data.train_limit=640", "data.test_limit=200", "train.epochs=2",
                                      "train.log_every=2", "checkpoint.every=4", "checkpoint.keep_last=0",
                                      "train.threads=1"};
  REQUIRE(kiln::test::train("configs/tiny.toml", run, o) == 0);  // 20 steps
  // Resumed from step 8: steps 9..20 are trained (and logged) again.
  REQUIRE(kiln::test::train("", "", {}, run + "/checkpoints/step_000000008") == 0);
  std::ofstream(dir / "read.py") << R"(import sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
acc = EventAccumulator(sys.argv[1], size_guidance={"scalars": 0})
acc.Reload()
with open(sys.argv[2], "w") as out:
    for tag in ("train/loss", "test/accuracy", "memory/step"):
        if tag in acc.Tags()["scalars"]:
            out.write(tag + " " + " ".join(str(e.step) for e in acc.Scalars(tag)) + "\n")
)";
  const std::string cmd = *py + " " + (dir / "read.py") + " " + run + "/tb " + (dir / "read.txt");
  REQUIRE(std::system(cmd.c_str()) == 0);
  std::ifstream in(dir / "read.txt");
  std::string line;
  std::map<std::string, std::string> steps;
  while (std::getline(in, line)) steps[line.substr(0, line.find(' '))] = line.substr(line.find(' ') + 1);
  REQUIRE(steps["train/loss"] == "2 4 6 8 10 12 14 16 18 20");  // each logged step once
  REQUIRE(steps["test/accuracy"] == "10 20");                     // the two epochs' evaluations
  // metrics.jsonl agrees: the last test line's accuracy is what TensorBoard holds last.
  REQUIRE(kiln::test::last_test_line(run)["step"] == 20);
}

TEST_CASE("tensor_histogram: counts every finite value once, in equal buckets from min to max",
          "[util][tfevents]") {
  const auto x = at::tensor({0.0, 1.0, 1.0, 2.0, 3.0, 4.0, std::nan(""), INFINITY}, at::kDouble);
  const auto h = kiln::train::tensor_histogram(x, 4);
  REQUIRE(h.non_finite == 2);
  REQUIRE(h.histogram.min == 0.0);
  REQUIRE(h.histogram.max == 4.0);
  REQUIRE(h.histogram.num == 6.0);
  REQUIRE(h.histogram.sum == 11.0);
  REQUIRE(h.histogram.sum_squares == 31.0);
  REQUIRE(h.histogram.bucket_limit == std::vector<double>{1.0, 2.0, 3.0, 4.0});
  REQUIRE(h.histogram.bucket == std::vector<double>{1.0, 2.0, 1.0, 2.0});  // [0,1) [1,2) [2,3) [3,4]
  const auto same = kiln::train::tensor_histogram(at::full({5}, 0.5), 64);  // one value: one bucket
  REQUIRE(same.histogram.bucket == std::vector<double>{5.0});
  REQUIRE(kiln::train::tensor_histogram(at::full({3}, NAN)).histogram.num == 0.0);
}

TEST_CASE("TensorBoard's reader reads histograms back; a run writes its weights' and gradients'",
          "[train][tfevents][interop]") {
  const auto py = kiln::test::python_or_skip("tensorboard.backend.event_processing.event_accumulator");
  if (!py) return;
  kiln::test::TempDir dir;
  {
    EventWriter w(dir / "tb");
    Histogram h;
    h.min = -1.0;
    h.max = 3.0;
    h.num = 10;
    h.sum = 4.5;
    h.sum_squares = 20.25;
    h.bucket_limit = {0.0, 1.0, 3.0};
    h.bucket = {2, 5, 3};
    w.histogram("weights/w", 7, h);
  }
  const std::string run = dir / "run";
  REQUIRE(kiln::test::train("configs/tiny.toml", run,
                            {"data.train_limit=640", "train.threads=1", "tensorboard.histogram_every=4"}) == 0);
  std::ofstream(dir / "read.py") << R"(import sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
acc = EventAccumulator(sys.argv[1], size_guidance={"histograms": 0})
acc.Reload()
h = acc.Histograms("weights/w")[0]
v = h.histogram_value
print(h.step, v.min, v.max, v.num, v.sum, v.sum_squares, list(v.bucket_limit), list(v.bucket))
assert h.step == 7 and (v.min, v.max, v.num, v.sum, v.sum_squares) == (-1.0, 3.0, 10.0, 4.5, 20.25)
assert list(v.bucket_limit) == [0.0, 1.0, 3.0] and list(v.bucket) == [2.0, 5.0, 3.0]
run = EventAccumulator(sys.argv[2], size_guidance={"histograms": 0})
run.Reload()
tags = run.Tags()["histograms"]
for t in ("weights/layers.0.weight", "grads/layers.0.weight", "weights/layers.1.bias", "grads/layers.1.bias"):
    assert t in tags, (t, tags)
    steps = [e.step for e in run.Histograms(t)]
    assert steps == [4, 8], (t, steps)
    assert all(e.histogram_value.num > 0 for e in run.Histograms(t))
print("ok")
)";
  const std::string cmd = *py + " " + (dir / "read.py") + " " + (dir / "tb") + " " + run + "/tb";
  REQUIRE(std::system(cmd.c_str()) == 0);
}
