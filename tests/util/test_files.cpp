// The environment failures of kiln's writes: a full disk (/dev/full answers every
// write with ENOSPC), a place that takes no new files (/proc), std::filesystem's own
// errors, all as kiln::IoError naming the path and the OS's reason.
#include <cerrno>
#include <filesystem>
#include <fstream>

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
  // Named as asked, and the temporary name the write went through.
  REQUIRE_THAT(e.what(), Catch::StartsWith("/proc/kiln-file: cannot write (/proc/kiln-file.tmp-"));
  REQUIRE_THAT(e.what(), Catch::EndsWith(": cannot create: No such file or directory)"));
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

TEST_CASE("remove_tree removes a tree without following its links, and names what it cannot remove",
          "[util][files]") {
  namespace fs = std::filesystem;
  const kiln::test::TempDir dir;
  const fs::path root = dir / "tree", outside = dir / "outside";
  fs::create_directories(root / "a" / "b" / "c");
  fs::create_directories(outside);
  kiln::files::write_synced((outside / "kept").string(), "x");
  for (const auto* f : {"f1", "a/f2", "a/b/f3", "a/b/c/f4", "a/.hidden"})
    kiln::files::write_synced((root / f).string(), "bytes");
  fs::create_directory_symlink(outside, root / "a" / "to_outside");
  fs::create_symlink(outside / "kept", root / "to_kept");
  fs::create_symlink(dir / "nothing", root / "a" / "b" / "dangling");

  // A link named with a trailing slash goes itself; the directory it names stays.
  fs::create_directory_symlink(outside, dir / "link");
  REQUIRE(kiln::files::remove_tree(dir / "link/") == 1);
  REQUIRE_FALSE(fs::exists(fs::symlink_status(dir / "link")));
  REQUIRE(fs::exists(outside / "kept"));

  // 5 files, 3 links and 4 directories (tree, a, b, c).
  REQUIRE(kiln::files::remove_tree(root.string()) == 12);
  REQUIRE_FALSE(fs::exists(fs::symlink_status(root)));
  REQUIRE(fs::exists(outside / "kept"));  // what the links named stays

  REQUIRE(kiln::files::remove_tree(root.string()) == 0);  // nothing there
  REQUIRE(kiln::files::remove_tree("") == 0);
  kiln::files::write_synced(dir / "file", "x");
  REQUIRE(kiln::files::remove_tree(dir / "file") == 1);  // a plain file
  REQUIRE_FALSE(fs::exists(dir / "file"));

  // Under a file: ENOTDIR, naming the path; the error_code form reports it instead.
  kiln::files::write_synced(dir / "plain", "x");
  const auto e = io_error_of([&] { kiln::files::remove_tree(dir / "plain/x"); });
  REQUIRE(e.error() == ENOTDIR);
  REQUIRE_THAT(e.what(), Equals(dir / "plain/x" + ": cannot remove: Not a directory"));
  std::error_code ec;
  kiln::files::remove_tree(dir / "plain/x", ec);
  REQUIRE(ec.value() == ENOTDIR);
  // A file /proc will not let go of, even for root: unlink's own reason.
  const auto p = io_error_of([] { kiln::files::remove_tree("/proc/version"); });
  REQUIRE_THAT(p.what(), Catch::StartsWith("/proc/version: cannot remove: "));
  REQUIRE(fs::exists(outside / "kept"));
}

TEST_CASE("has_json_line finds a line by split and step, skipping lines that are not JSON", "[util][files]") {
  kiln::test::TempDir dir;
  const std::string path = dir / "metrics.jsonl";
  REQUIRE_FALSE(kiln::has_json_line(path, "test", 1));  // no file
  std::ofstream(path) << R"({"split":"train","step":40,"loss":1})" << "\n"
                      << "not json, with test in it\n"
                      << R"({"split": "test", "step": 40.0, "loss": 1})" << "\n"
                      << R"({"split":"test","step":"80"})" << "\n"
                      << R"({"split":"test","step":12,"lo)";  // cut short
  CHECK(kiln::has_json_line(path, "test", 40));
  CHECK(kiln::has_json_line(path, "train", 40));
  CHECK_FALSE(kiln::has_json_line(path, "test", 80));  // a step that is not a number
  CHECK_FALSE(kiln::has_json_line(path, "test", 12));
  CHECK_FALSE(kiln::has_json_line(path, "train", 41));
}
