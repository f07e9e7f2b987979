// Whole-file reads and crash-safe writes (data and directory entries flushed to
// disk), plus the CRC32 that checkpoints record: what safetensors files and
// checkpoints share.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>

namespace kiln::files {

/// The whole file as bytes; a missing or unreadable file throws kiln::InputError
/// naming it. Example: const std::string bytes = kiln::files::read("run/config.toml");
std::string read(const std::string& path);

/// Throws kiln::InputError "PATH: expected a regular KIND file, found WHAT" (a
/// directory, a FIFO, a character device, …, or nothing) unless `path` names a regular
/// file, links followed. For data files, checked before they are opened: a FIFO's open
/// waits for a writer that may never come, and a device such as /dev/zero never ends.
/// Example: kiln::files::require_regular_file("data/x.npy", ".npy");
void require_regular_file(const std::string& path, const std::string& kind);

/// Creates or replaces `path` with `bytes` and fsyncs it before returning, so
/// the data is on disk once the call returns; a failure (disk full, no
/// permission) throws kiln::IoError naming the file and the reason.
/// Example: kiln::files::write_synced(dir + "/manifest.json", text);
void write_synced(const std::string& path, std::string_view bytes);

/// write_synced() under a temporary name beside `path`, renamed over `path`, and the
/// directory fsynced: a crash at any instant leaves the old file or the new one,
/// never part of one. A failure removes the temporary file and throws as write_synced().
/// Example: kiln::files::replace_synced("export/model.pt", bytes);
void replace_synced(const std::string& path, std::string_view bytes);

/// fsyncs a directory, making the names created, renamed or removed in it durable.
void sync_directory(const std::string& path);

/// Which file or directory a path names now: its device and inode.
struct FileId {
  uint64_t device = 0, inode = 0;
  bool operator==(const FileId&) const = default;
};

/// The FileId of `path`, or nullopt when nothing is there (deleted, moved away).
/// Example: if (kiln::files::file_id(run_dir) != id) … // the directory was replaced
std::optional<FileId> file_id(const std::string& path);

/// Removes `path` and, for a directory, everything under it, without following symbolic
/// links (a link goes, not what it names); nothing there is no error. Returns how many
/// entries it removed. A failure throws kiln::IoError naming the entry and the reason.
/// kiln's own rather than std::filesystem::remove_all: the torch wheels export a copy of
/// libstdc++'s std::filesystem from libtorch.so (pytorch/pytorch#133437), and on the
/// GPU machine (GCC 13, torch 2.11) every test ended by remove_all crashed, in spite of
/// libstdc++ coming first among the binaries' libraries (cmake/kiln_torch.cmake); this
/// calls only POSIX. Example: kiln::files::remove_tree(run_dir + "/checkpoints/.trash-3");
uint64_t remove_tree(const std::string& path);

/// remove_tree() that puts a failure's errno in `ec` (and returns what it removed)
/// instead of throwing; for clean-ups on a path that is already failing.
uint64_t remove_tree(const std::string& path, std::error_code& ec);

/// CRC-32 (zlib's, the one of gzip and zip) of `bytes`. Example: crc32("123456789") == 0xCBF43926
uint32_t crc32(std::string_view bytes);

}  // namespace kiln::files
