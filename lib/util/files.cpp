// POSIX file I/O for kiln::files: write(2) loops and fsync(2), which std::ofstream
// cannot do, and zlib's CRC-32.
#include "util/files.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstdio>  // rename
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "util/error.h"

namespace kiln::files {
namespace {

[[noreturn]] void fail(const std::string& path, const char* what) { throw IoError(path, what, errno); }

// Closes the descriptor on every path out of a function.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// Removes the entry `name` of the directory `dir_fd` (`path` names it in messages) and,
// when it is a directory, everything under it first; counts what goes in `removed`.
// Returns 0 or the errno of the first failure, whose entry `failed` names.
int remove_at(int dir_fd, const char* name, const std::string& path, uint64_t& removed,
              std::string& failed) {
  if (::unlinkat(dir_fd, name, 0) == 0) return ++removed, 0;
  if (errno == ENOENT) return 0;
  const int unlink_error = errno;  // EISDIR, or EPERM, which POSIX allows for a directory
  if (unlink_error != EISDIR && unlink_error != EPERM) return failed = path, unlink_error;
  const int fd = ::openat(dir_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return 0;
    // Not a directory after all (a link is not followed): unlink's own refusal stands.
    return failed = path, errno == ENOTDIR || errno == ELOOP ? unlink_error : errno;
  }
  DIR* dir = ::fdopendir(fd);
  if (dir == nullptr) {
    const int error = errno;
    ::close(fd);
    return failed = path, error;
  }
  // The names first, then the removals: a directory changed while it is read may skip entries.
  std::vector<std::string> names;
  int error = 0;
  for (;;) {
    errno = 0;  // readdir's end and its failure differ only in errno
    const dirent* e = ::readdir(dir);
    if (e == nullptr) {
      error = errno;
      break;
    }
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) names.emplace_back(e->d_name);
  }
  if (error) failed = path;
  for (size_t i = 0; i < names.size() && !error; ++i)
    error = remove_at(::dirfd(dir), names[i].c_str(), path + "/" + names[i], removed, failed);
  ::closedir(dir);
  if (error) return error;
  if (::unlinkat(dir_fd, name, AT_REMOVEDIR) == 0) return ++removed, 0;
  return errno == ENOENT ? 0 : (failed = path, errno);
}

// remove_at() on `path` (relative to the working directory) without its trailing
// slashes, which would make the last name a link's target ("link/" is the directory it
// names), so that a link at the top goes, not what it names.
int remove_path(std::string path, uint64_t& removed, std::string& failed) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path.empty() ? 0 : remove_at(AT_FDCWD, path.c_str(), path, removed, failed);
}

}  // namespace

uint64_t remove_tree(const std::string& path, std::error_code& ec) {
  uint64_t removed = 0;
  std::string failed;
  const int error = remove_path(path, removed, failed);
  ec = error ? std::error_code(error, std::generic_category()) : std::error_code();
  return removed;
}

uint64_t remove_tree(const std::string& path) {
  uint64_t removed = 0;
  std::string failed;
  if (const int error = remove_path(path, removed, failed)) throw IoError(failed, "remove", error);
  return removed;
}

void require_regular_file(const std::string& path, const std::string& kind) {
  struct stat st {};
  const bool seen = ::stat(path.c_str(), &st) == 0;
  if (seen && S_ISREG(st.st_mode)) return;
  const int error = errno;
  const char* found = !seen                          ? (error == ENOENT ? "nothing" : nullptr)
                      : S_ISDIR(st.st_mode)          ? "a directory"
                      : S_ISFIFO(st.st_mode)         ? "a FIFO (named pipe)"
                      : S_ISCHR(st.st_mode)          ? "a character device"
                      : S_ISBLK(st.st_mode)          ? "a block device"
                      : S_ISSOCK(st.st_mode)         ? "a socket"
                                                     : "a special file";
  throw InputError(path + ": expected a regular " + kind + " file, found " +
                   (found ? found : std::string("what cannot be read (") + std::strerror(error) + ")"));
}

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path + ": cannot read the file: " + std::strerror(errno));
  std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (in.bad()) throw InputError(path + ": read error: " + std::strerror(errno));
  return bytes;
}

void write_synced(const std::string& path, std::string_view bytes) {
  Fd f{::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
  if (f.fd < 0) fail(path, "create");
  while (!bytes.empty()) {
    const ssize_t n = ::write(f.fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(path, "write");
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  if (::fsync(f.fd) != 0) fail(path, "fsync");
  const int fd = f.fd;
  f.fd = -1;
  if (::close(fd) != 0) fail(path, "close");
}

void replace_synced(const std::string& path, std::string_view bytes) {
  const std::filesystem::path target(path);
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  try {
    write_synced(tmp, bytes);
    if (::rename(tmp.c_str(), path.c_str()) != 0) fail(path, "replace the file");
  } catch (const IoError& e) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    if (std::string_view(e.what()).starts_with(path + ":")) throw;
    throw IoError(path + ": cannot write (" + e.what() + ")", e.error());  // named as asked, tmp too
  } catch (...) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    throw;
  }
  const auto dir = target.parent_path();
  sync_directory(dir.empty() ? "." : dir.string());
}

void sync_directory(const std::string& path) {
  Fd f{::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  if (f.fd < 0) fail(path, "open the directory");
  if (::fsync(f.fd) != 0) fail(path, "fsync the directory");
}

std::optional<FileId> file_id(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return FileId{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
}

uint32_t crc32(std::string_view bytes) {
  const auto* data = reinterpret_cast<const Bytef*>(bytes.data());
  return static_cast<uint32_t>(::crc32_z(::crc32(0L, Z_NULL, 0), data, bytes.size()));
}

}  // namespace kiln::files
