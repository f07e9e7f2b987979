// Whole-file reads and crash-safe writes (data and directory entries flushed to
// disk), plus the CRC32 that checkpoints record: what safetensors files and
// checkpoints share.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kiln::files {

/// The whole file as bytes; a missing or unreadable file throws kiln::InputError
/// naming it. Example: const std::string bytes = kiln::files::read("run/config.toml");
std::string read(const std::string& path);

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

/// CRC-32 (zlib's, the one of gzip and zip) of `bytes`. Example: crc32("123456789") == 0xCBF43926
uint32_t crc32(std::string_view bytes);

}  // namespace kiln::files
