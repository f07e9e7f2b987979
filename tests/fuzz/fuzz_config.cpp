// Fuzz target: the TOML config with `--set` overrides (kiln::app::parse_config,
// apply_override, validate). An input is a TOML text, then optionally a line "%%" and
// one override (KEY=VALUE) per line. A config that is accepted must also come back
// whole: its resolved TOML (what a run writes as config.toml and a resume reads) must
// parse and validate to the same TOML again.
#include "config.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const auto split = input.find("\n%%\n");
  const std::string toml = input.substr(0, split);
  std::vector<std::string> overrides;
  if (split != std::string::npos) {
    std::string rest = input.substr(split + 4);
    for (size_t start = 0; start <= rest.size();) {
      const auto end = std::min(rest.find('\n', start), rest.size());
      if (end > start) overrides.push_back(rest.substr(start, end - start));
      start = end + 1;
    }
  }
  kiln::app::Config config;
  const bool ok = kiln::fuzz::only_input_errors([&] {
    config = kiln::app::parse_config(toml, "fuzz.toml");
    for (const auto& o : overrides) kiln::app::apply_override(config, o);
    kiln::app::validate(config);
  });
  if (!ok) return 0;
  const std::string resolved = kiln::app::to_toml(config);
  try {
    const auto back = kiln::app::parse_config(resolved, "config.toml");
    kiln::app::validate(back);
    if (kiln::app::to_toml(back) != resolved) {
      std::fprintf(stderr, "kiln fuzz: the resolved config changed when read back:\n%s\n---\n%s\n",
                   resolved.c_str(), kiln::app::to_toml(back).c_str());
      std::abort();
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln fuzz: the resolved config does not read back: %s\n%s\n", e.what(),
                 resolved.c_str());
    std::abort();
  }
  return 0;
}
