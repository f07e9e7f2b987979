// kiln_bench_ops: times every kiln op against its ATen reference, interleaved
// round by round so both see the same machine state, and prints ref/kiln ratios
// (>1 means kiln is faster). --json FILE writes one object per case.
#include "bench_support.h"
#include "cases.h"
#include "ops/cpu_capability.h"

namespace kiln::bench {
std::vector<CaseFactory>& registry() {
  static std::vector<CaseFactory> r;
  return r;
}
}  // namespace kiln::bench

int main(int argc, char** argv) {
  namespace kb = kiln::bench;
  cxxopts::Options options("kiln_bench_ops", "kiln ops against their ATen references");
  kb::add_common_options(options, "7", "20");
  options.add_options()
      ("sizes", "log2 of the element counts", cxxopts::value<std::vector<int>>()->default_value("16,20,24"))
      ("dtypes", "float32, float16, bfloat16, float64",
       cxxopts::value<std::vector<std::string>>()->default_value("float32"))
      ("ops", "only these ops (default: all)", cxxopts::value<std::vector<std::string>>()->default_value(""));
  const auto args = options.parse(argc, argv);
  std::optional<kb::Common> common;
  try {
    common = kb::parse_common(options, args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln_bench_ops: %s\n", e.what());
    return 2;
  }
  if (!common) return 0;
  const auto& device = common->device;
  std::vector<std::string> ops = args["ops"].as<std::vector<std::string>>();
  std::erase(ops, std::string());

  std::printf("kiln_bench_ops on %s, CPU capability %s\n", device.str().c_str(),
              kiln::ops::to_string(kiln::ops::cpu_capability()).c_str());
  const kb::Table table("log2n");
  nlohmann::json out = nlohmann::json::array();
  for (const auto& dname : args["dtypes"].as<std::vector<std::string>>()) {
    if (!kb::dtype_names().count(dname)) {
      std::fprintf(stderr, "kiln_bench_ops: --dtypes: unknown dtype '%s'\n", dname.c_str());
      return 2;
    }
    for (const int lg : args["sizes"].as<std::vector<int>>()) {
      const int64_t n = int64_t{1} << lg;
      const auto size = std::to_string(lg);
      const auto opts = at::TensorOptions().dtype(kb::dtype_names().at(dname)).device(device);
      std::vector<kb::Case> cases;
      for (const auto& factory : kb::registry())
        for (auto& c : factory(n, opts))
          if (ops.empty() || std::find(ops.begin(), ops.end(), c.op) != ops.end()) cases.push_back(c);
      for (const int t : common->threads) {
        at::set_num_threads(t);
        // The copy of the same element count at these threads: the bandwidth yardstick.
        const auto copy = kb::copy_bandwidth(n, opts, common->rounds, common->min_ms);
        table.copy(dname, size, t, copy);
        for (const auto& c : cases) {
          const auto m = kb::measure(c, device, common->rounds, common->min_ms);
          table.row(c, dname, size, t, m, copy.gbps);
          out.push_back(kb::json_row(c, device, dname, n, t, m, copy.gbps));
        }
      }
    }
  }
  kb::write_json(common->json, out);
  return 0;
}
