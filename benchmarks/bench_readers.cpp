// How fast each data format reaches training tensors: for files of about the same
// size in every format kiln reads, the reader alone (bytes of the file per second)
// and load_data() whole (reader, encoding, standardisation: what a run waits for).
// Prints one table; docs/data.md quotes it. Timings are medians of --rounds runs;
// the page cache is warm (the file was just written), so this is parse speed, not disk.
//
//   build/bin/kiln_bench_readers [--mb 64] [--rounds 3] [--threads 2]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <cxxopts.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "data/csv.h"
#include "data/dataset.h"
#include "data/idx.h"
#include "data/npy.h"
#include "data/npz.h"
#include "data/text.h"
#include "util/files.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double median_seconds(const std::function<void()>& f, int rounds) {
  std::vector<double> t;
  for (int r = 0; r < rounds; ++r) {
    const auto start = Clock::now();
    f();
    t.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

struct Row {
  std::string format, file;
  double bytes, reader_s, load_s;
};

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options options("kiln_bench_readers", "Throughput of kiln's data readers");
  options.add_options()("mb", "approximate size of each file in MB", cxxopts::value<int>()->default_value("64"))(
      "rounds", "timed runs per case (median)", cxxopts::value<int>()->default_value("3"))(
      "threads", "intra-op threads", cxxopts::value<int>()->default_value("2"))("h,help", "help");
  const auto args = options.parse(argc, argv);
  if (args.count("help")) {
    std::puts(options.help().c_str());
    return 0;
  }
  const double mb = args["mb"].as<int>();
  const int rounds = args["rounds"].as<int>();
  at::set_num_threads(args["threads"].as<int>());
  const auto dir = fs::temp_directory_path() / ("kiln-bench-readers-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const auto path = [&](const std::string& name) { return (dir / name).string(); };
  std::vector<Row> rows;
  const auto add = [&](const std::string& format, const std::string& file,
                       const std::function<void()>& reader, const std::function<void()>& load) {
    const double bytes = static_cast<double>(fs::file_size(path(file)));
    rows.push_back({format, file, bytes, median_seconds(reader, rounds),
                    load ? median_seconds(load, rounds) : 0.0});
    std::fprintf(stderr, "%s done\n", file.c_str());
  };
  using kiln::data::DataOptions;

  // CSV: 16 numeric columns (6 significant digits), 2 text columns, a text label.
  {
    std::mt19937 rng(0);
    std::normal_distribution<double> g;
    std::ofstream out(path("table.csv"));
    out << "f0";
    for (int c = 1; c < 16; ++c) out << ",f" << c;
    out << ",colour,size,label\n";
    const char* colours[] = {"red", "green", "blue", "\"dark, grey\""};
    const char* sizes[] = {"S", "M", "L", "XL"};
    char buf[32];
    while (out.tellp() < mb * 1e6) {
      for (int c = 0; c < 16; ++c) {
        std::snprintf(buf, sizeof buf, "%.6g", g(rng));
        out << buf << ',';
      }
      out << colours[rng() % 4] << ',' << sizes[rng() % 4] << ",class" << rng() % 10 << '\n';
    }
  }
  add("csv", "table.csv", [&] { kiln::data::read_csv(path("table.csv")); },
      [&] { kiln::data::load_data(DataOptions().train(path("table.csv")).label("label")); });

  // NumPy: float32 inputs (N, 64) and int64 labels; the reader maps (no copy), so it is
  // timed with a pass over every byte (a sum) to count the reading honestly.
  const int64_t n = static_cast<int64_t>(mb * 1e6 / (64 * 4));
  kiln::data::write_npy(path("x.npy"), at::randn({n, 64}));
  kiln::data::write_npy(path("y.npy"), at::randint(0, 10, {n}, at::kLong));
  add("npy", "x.npy", [&] { kiln::data::read_npy(path("x.npy")).sum().item<float>(); },
      [&] {
        kiln::data::load_data(DataOptions().train(path("x.npy")).train_targets(path("y.npy")));
      });
  kiln::data::write_npz(path("d.npz"), {{"x", at::randn({n, 64})}, {"y", at::randint(0, 10, {n}, at::kLong)}});
  add("npy (.npz, stored)", "d.npz",
      [&] {
        for (const auto& [name, t] : kiln::data::read_npz(path("d.npz"))) t.sum().item<double>();
      },
      [&] { kiln::data::load_data(DataOptions().train(path("d.npz"))); });

  // Text: UTF-8 prose-like lines.
  {
    std::mt19937 rng(1);
    const char* words[] = {"the", "cat", "sat", "on", "mat", "ça", "va", "très", "bien", "and"};
    std::ofstream out(path("corpus.txt"));
    while (out.tellp() < mb * 1e6) {
      for (int w = 0; w < 12; ++w) out << words[rng() % 10] << (w == 11 ? ".\n" : " ");
    }
  }
  add("text", "corpus.txt",
      [&] {
        const auto text = kiln::data::read_text(path("corpus.txt"));
        kiln::data::Vocabulary::characters(text).encode(text);
      },
      [&] {
        kiln::data::load_data(DataOptions().format("text").train(path("corpus.txt")).block_size(64));
      });

  // IDX: uint8 images (N, 28, 28), gzipped as Debian ships them and plain.
  const int64_t images = static_cast<int64_t>(mb * 1e6 / 784);
  const auto pixels = at::randint(0, 256, {images, 28, 28}, at::kByte);
  kiln::data::write_idx(path("images-idx3-ubyte"), pixels);
  kiln::data::write_idx(path("images-idx3-ubyte.gz"), pixels);
  add("idx", "images-idx3-ubyte", [&] { kiln::data::read_idx(path("images-idx3-ubyte")); }, nullptr);
  add("idx (.gz)", "images-idx3-ubyte.gz", [&] { kiln::data::read_idx(path("images-idx3-ubyte.gz")); },
      nullptr);

  std::printf("%d threads, median of %d; MB/s = the file's bytes per second (page cache warm)\n",
              at::get_num_threads(), rounds);
  std::printf("%-20s %-22s %9s %14s %18s\n", "format", "file", "MB", "reader MB/s", "load_data MB/s");
  for (const auto& r : rows) {
    char load[32] = "-";
    if (r.load_s > 0) std::snprintf(load, sizeof load, "%.0f", r.bytes / 1e6 / r.load_s);
    std::printf("%-20s %-22s %9.1f %14.0f %18s\n", r.format.c_str(), r.file.c_str(), r.bytes / 1e6,
                r.bytes / 1e6 / r.reader_s, load);
  }
  kiln::files::remove_tree(dir.string());
  return 0;
}
