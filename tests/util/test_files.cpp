// The environment failures of kiln's writes: a full disk (/dev/full answers every
// write with ENOSPC), a place that takes no new files (/proc), std::filesystem's own
// errors, all as kiln::IoError naming the path and the OS's reason.
#include <cerrno>
#include <filesystem>

#include "support.h"
#include "util/error.h"
#include "util/files.h"
#include "util/json_lines.h"

using Catch::Matchers::Equals;

namespace {

// The IoError `fn` throws.
template <typename Fn>
kiln::IoError io_error_of(Fn fn) {
  try {
    fn();
  } catch (const kiln::IoError& e) {
    return e;
  }
  FAIL("expected a kiln::IoError");
  return kiln::IoError("", 0);
}

}  // namespace

TEST_CASE("a full disk and an unwritable place are IoErrors naming the file and the reason",
          "[util][files]") {
  auto e = io_error_of([] { kiln::files::write_synced("/dev/full", "bytes"); });
  REQUIRE(e.error() == ENOSPC);
  REQUIRE_THAT(e.what(), Equals("/dev/full: cannot write: No space left on device"));

  kiln::JsonLines lines("/dev/full");  // opens; the write fails as a full disk's
  e = io_error_of([&] { lines.write({{"step", 1}}); });
  REQUIRE(e.error() == ENOSPC);
  REQUIRE_THAT(e.what(), Equals("/dev/full: cannot write: No space left on device"));

  e = io_error_of([] { kiln::JsonLines("/proc/kiln-metrics.jsonl"); });  // as root too
  REQUIRE_THAT(e.what(), Catch::Contains("/proc/kiln-metrics.jsonl: cannot open the file for appending: "));

  e = io_error_of([] { kiln::files::replace_synced("/proc/kiln-file", "x"); });
  REQUIRE_THAT(e.what(), Catch::Contains("/proc/kiln-file.tmp-"));
}

TEST_CASE("std::filesystem's errors read as kiln's: the path, the action, the reason", "[util][files]") {
  const kiln::test::TempDir dir;
  const std::filesystem::path file = dir / "file";
  kiln::files::write_synced(file.string(), "x");
  try {
    std::filesystem::create_directory(file / "sub");  // under a file: ENOTDIR
    FAIL("expected a filesystem_error");
  } catch (const std::filesystem::filesystem_error& fe) {
    const kiln::IoError e(fe);
    REQUIRE(e.error() == ENOTDIR);
    REQUIRE_THAT(e.what(), Equals((file / "sub").string() + ": cannot create directory: Not a directory"));
  }
}

TEST_CASE("file_id tells a directory from its absence", "[util][files]") {
  const kiln::test::TempDir dir;
  const auto run = dir / "run";
  REQUIRE(!kiln::files::file_id(run));
  std::filesystem::create_directory(run);
  const auto id = kiln::files::file_id(run);
  REQUIRE(id);
  REQUIRE(kiln::files::file_id(run) == id);
  std::filesystem::rename(run, dir / "moved");
  REQUIRE(!kiln::files::file_id(run));
  REQUIRE(kiln::files::file_id(dir / "moved") == id);
}
