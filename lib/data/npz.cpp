// read_npz / write_npz: the ZIP records an .npz is made of — end of central directory
// (and its ZIP64 form), central directory, local headers — parsed from one private
// mapping of the file; each entry's .npy goes through npy::wrap, as read_npy's does.
#include "data/npz.h"

#include <c10/util/StringUtil.h>
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <new>
#include <optional>
#include <set>
#include <string_view>
#include <tuple>

#include "data/npy_header.h"
#include "util/error.h"
#include "util/files.h"

namespace kiln::data {
namespace {

constexpr uint32_t kLocalSig = 0x04034b50, kCentralSig = 0x02014b50, kEndSig = 0x06054b50,
                   kZip64EndSig = 0x06064b50, kZip64LocatorSig = 0x07064b50;
constexpr size_t kLocalSize = 30, kCentralSize = 46, kEndSize = 22, kZip64EndSize = 56,
                 kZip64LocatorSize = 20;
constexpr uint32_t kSentinel32 = 0xffffffff;  // "see the ZIP64 record"
constexpr uint16_t kSentinel16 = 0xffff;
constexpr uint16_t kZip64ExtraId = 0x0001;
constexpr uint16_t kPaddingId = 0xd935;  // the extra field Android's zipalign pads with
constexpr uint16_t kFlagEncrypted = 1 << 0, kFlagDataDescriptor = 1 << 3,
                   kFlagStrongEncryption = 1 << 6, kFlagUtf8 = 1 << 11;
constexpr uint16_t kStored = 0, kDeflate = 8;

std::string method_name(uint16_t m) {
  switch (m) {
    case 0: return "stored";
    case 8: return "deflate";
    case 9: return "deflate64";
    case 12: return "bzip2";
    case 14: return "LZMA";
    case 93: return "zstd";
    case 95: return "xz";
    case 99: return "AES encryption";
    default: return "unknown";
  }
}

std::string hex32(uint32_t v) {
  char s[11];
  std::snprintf(s, sizeof s, "0x%08x", v);
  return s;
}

// One ZIP entry as the central directory describes it, completed from its local header.
struct Entry {
  std::string name;       // as stored, "x.npy"
  std::string array;      // as NumPy names it, "x"
  uint64_t record = 0;    // where its central directory record starts
  uint16_t flags = 0, method = 0;
  uint32_t crc = 0;
  uint64_t compressed = 0, size = 0, local = 0;
  uint64_t data = 0;      // where its data starts, after the local header
};

// Little-endian fields of the mapped archive, read after a bounds check; every failure
// names the file, the byte offset and the record.
class Archive {
 public:
  Archive(const unsigned char* p, size_t n, const std::string& path) : p_(p), n_(n), path_(path) {}

  [[noreturn]] void fail(uint64_t at, const std::string& record, const std::string& what) const {
    throw InputError(c10::str(path_, ": byte ", at, " (", record, "): ", what));
  }
  void need(uint64_t at, uint64_t len, const std::string& record) const {
    if (at > n_ || len > n_ - at)
      fail(at, record, c10::str("truncated: expected ", len, " bytes, the file ends ",
                                at > n_ ? 0 : n_ - at, " bytes after this offset"));
  }
  uint64_t get(uint64_t at, int bytes) const {
    uint64_t v = 0;
    for (int k = 0; k < bytes; ++k) v |= static_cast<uint64_t>(p_[at + k]) << (8 * k);
    return v;
  }
  uint16_t u16(uint64_t at) const { return static_cast<uint16_t>(get(at, 2)); }
  uint32_t u32(uint64_t at) const { return static_cast<uint32_t>(get(at, 4)); }
  uint64_t u64(uint64_t at) const { return get(at, 8); }
  void signature(uint64_t at, uint32_t expected, const std::string& record) const {
    need(at, 4, record);
    if (u32(at) != expected)
      fail(at, record,
           c10::str("signature: expected ", hex32(expected), ", found ", hex32(u32(at))));
  }
  std::string_view text(uint64_t at, size_t len) const {
    return {reinterpret_cast<const char*>(p_ + at), len};
  }
  const unsigned char* bytes(uint64_t at) const { return p_ + at; }
  size_t size() const { return n_; }

  // The ZIP64 extended-information extra field of a record: the 64-bit values of the
  // fields whose 32-bit form holds 0xffffffff, in the order of `wanted` (APPNOTE 4.5.3).
  // A local header carries both sizes there, a central record only those it needs.
  void zip64(uint64_t extra, uint64_t len, std::initializer_list<uint64_t*> wanted,
             const std::string& record) const {
    size_t count = 0;
    for (const auto* w : wanted) count += *w == kSentinel32;
    if (count == 0) return;
    for (uint64_t at = extra; at + 4 <= extra + len;) {
      const uint16_t id = u16(at), size = u16(at + 2);
      if (at + 4 + size > extra + len)
        fail(at, record, c10::str("extra field ", hex32(id), ": declares ", size,
                                  " bytes, the extra area has ", extra + len - at - 4));
      if (id == kZip64ExtraId) {
        if (size < 8 * count)
          fail(at, record, c10::str("ZIP64 extra field: expected ", 8 * count, " bytes for the ",
                                    count, " fields marked 0xffffffff, found ", size));
        uint64_t field = at + 4;
        for (auto* w : wanted)
          if (*w == kSentinel32) *w = u64(field), field += 8;
        return;
      }
      at += 4 + size;
    }
    fail(extra, record, c10::str("expected a ZIP64 extra field (", count,
                                 " fields hold 0xffffffff), found none"));
  }

 private:
  const unsigned char* p_;
  size_t n_;
  const std::string& path_;
};

struct Directory {
  uint64_t offset = 0, size = 0, count = 0;
  uint64_t end = 0;  // where the record after it (ZIP64 end or end) starts
};

// The end of central directory record (APPNOTE 4.3.16): the last 22 bytes, or earlier
// by a comment; its ZIP64 form (4.3.14, with its locator 4.3.15) when one is present.
Directory find_directory(const Archive& a) {
  const size_t n = a.size();
  const std::string end_record = "end of central directory record";
  std::optional<uint64_t> eocd;
  for (size_t back = 0; n >= kEndSize + back && back <= 0xffff && !eocd; ++back) {
    const uint64_t at = n - kEndSize - back;
    if (a.u32(at) == kEndSig && a.u16(at + 20) == back) eocd = at;
  }
  if (!eocd) {
    const bool npy = n >= 6 && a.text(0, 6) == "\x93NUMPY";
    a.fail(n, end_record,
           c10::str("not found in the last ", std::min<size_t>(n, kEndSize + 0xffff),
                    " bytes: expected a ZIP archive (.npz), found ",
                    npy ? "an .npy file (read it with read_npy)"
                        : n >= 4 && a.u32(0) == kLocalSig ? "one that is truncated"
                                                          : "no ZIP archive"));
  }
  const uint64_t e = *eocd;
  if (a.u16(e + 4) != 0 || a.u16(e + 6) != 0)
    a.fail(e + 4, end_record,
           c10::str("disk numbers: expected 0 (one file), found ", a.u16(e + 4), " and ",
                    a.u16(e + 6), ": split archives are not supported"));
  Directory d{a.u32(e + 16), a.u32(e + 12), a.u16(e + 10), e};
  if (a.u16(e + 8) != d.count)
    a.fail(e + 8, end_record, c10::str("entries on this disk: expected the total, ", d.count,
                                       ", found ", a.u16(e + 8)));
  const bool needs64 = d.count == kSentinel16 || d.size == kSentinel32 || d.offset == kSentinel32;
  const bool has64 = e >= kZip64LocatorSize && a.u32(e - kZip64LocatorSize) == kZip64LocatorSig;
  if (needs64 && !has64)
    a.fail(e, end_record, "fields hold 0xffff/0xffffffff: expected a ZIP64 end of central "
                          "directory locator before this record, found none");
  if (!has64) return d;

  const uint64_t loc = e - kZip64LocatorSize;
  const std::string locator = "ZIP64 end of central directory locator";
  if (a.u32(loc + 4) != 0 || a.u32(loc + 16) != 1)
    a.fail(loc + 4, locator, c10::str("disks: expected record on disk 0 of 1, found disk ",
                                      a.u32(loc + 4), " of ", a.u32(loc + 16)));
  const uint64_t z = a.u64(loc + 8);
  const std::string zip64_end = "ZIP64 end of central directory record";
  if (z > loc || loc - z < kZip64EndSize)
    a.fail(
        loc + 8, locator,
        c10::str("record offset: expected at most ", loc >= kZip64EndSize ? loc - kZip64EndSize : 0,
                 " (the record is 56 bytes and ends at the locator), found ", z));
  a.signature(z, kZip64EndSig, zip64_end);
  if (z + 12 + a.u64(z + 4) != loc)
    a.fail(z + 4, zip64_end, c10::str("record size: expected ", loc - z - 12,
                                      " (up to the locator), found ", a.u64(z + 4)));
  if (a.u32(z + 16) != 0 || a.u32(z + 20) != 0 || a.u64(z + 24) != a.u64(z + 32))
    a.fail(z + 16, zip64_end, "disks: expected one disk holding every entry (split archives are "
                              "not supported)");
  const Directory d64{a.u64(z + 48), a.u64(z + 40), a.u64(z + 32), z};
  // The 32-bit fields either say "see ZIP64" or agree with it.
  const std::pair<uint64_t, uint64_t> agree[] = {{d.count, d64.count}, {d.size, d64.size},
                                                 {d.offset, d64.offset}};
  const char* names[] = {"entry count", "central directory size", "central directory offset"};
  for (int k = 0; k < 3; ++k) {
    const auto [v32, v64] = agree[k];
    if (v32 != (k == 0 ? kSentinel16 : kSentinel32) && v32 != v64)
      a.fail(e, end_record, c10::str(names[k], ": ", v32, " here, ", v64, " in the ZIP64 record"));
  }
  return d64;
}

// The central directory's records (APPNOTE 4.3.12), each checked on its own.
std::vector<Entry> read_directory(const Archive& a, const Directory& d) {
  if (d.offset > d.end || d.size != d.end - d.offset)
    a.fail(d.end, "end of central directory record",
           c10::str("central directory at byte ", d.offset, " of ", d.size,
                    " bytes: expected it to end at byte ", d.end, " where this record starts"));
  std::vector<Entry> entries;
  uint64_t at = d.offset;
  for (uint64_t i = 0; i < d.count; ++i) {
    const std::string record = c10::str("central directory entry ", i);
    if (at + kCentralSize > d.end)
      a.fail(at, record,
             c10::str("expected ", d.count, " entries, the central directory ends after ", i));
    a.signature(at, kCentralSig, record);
    Entry e;
    e.record = at;
    e.flags = a.u16(at + 8);
    e.method = a.u16(at + 10);
    e.crc = a.u32(at + 16);
    e.compressed = a.u32(at + 20);
    e.size = a.u32(at + 24);
    const uint16_t name_len = a.u16(at + 28), extra_len = a.u16(at + 30),
                   comment_len = a.u16(at + 32);
    const uint16_t disk = a.u16(at + 34);
    e.local = a.u32(at + 42);
    if (at + kCentralSize + name_len + extra_len + comment_len > d.end)
      a.fail(at + 28, record,
             c10::str("name, extra and comment (", name_len + extra_len + comment_len,
                      " bytes) run past the central directory's end at byte ", d.end));
    e.name = a.text(at + kCentralSize, name_len);
    const std::string named = c10::str(record, " '", e.name, "'");
    a.zip64(at + kCentralSize + name_len, extra_len, {&e.size, &e.compressed, &e.local}, named);
    if (disk != 0)
      a.fail(at + 34, named,
             c10::str("disk: expected 0, found ", disk, ": split archives are not supported"));
    if (e.flags & (kFlagEncrypted | kFlagStrongEncryption) || e.method == 99)
      a.fail(at + 8, named,
             c10::str("encrypted (flags ", hex32(e.flags), ", method ", e.method,
                      "): encrypted entries are not supported"));
    if (e.method != kStored && e.method != kDeflate)
      a.fail(at + 10, named,
             c10::str("compression method: expected 0 (stored) or 8 (deflate), found ", e.method,
                      " (", method_name(e.method), ")"));
    if (e.method == kStored && e.compressed != e.size)
      a.fail(at + 20, named, c10::str("a stored entry's sizes differ: compressed ", e.compressed,
                                      ", uncompressed ", e.size));
    // Deflate cannot expand more than 1032:1 (a 258-byte match in under 2 bits), so a
    // larger declared size is damage, refused before a buffer that size is allocated.
    if (e.method == kDeflate && e.size / 1032 > e.compressed + 1)
      a.fail(at + 24, named,
             c10::str("uncompressed size ", e.size, ": more than deflate can make of ",
                      e.compressed, " bytes (at most 1032 times as many)"));
    if (name_len == 0 || e.name.back() == '/')
      a.fail(at + kCentralSize, named, "name: expected an .npy file, found a directory or no name");
    entries.push_back(std::move(e));
    at += kCentralSize + name_len + extra_len + comment_len;
  }
  if (at != d.end)
    a.fail(at, "central directory",
           c10::str(d.count, " entries end here, expected the directory to end at byte ", d.end));
  return entries;
}

// The local header (APPNOTE 4.3.7) must repeat what the central directory says.
void read_local_header(const Archive& a, Entry& e, uint64_t directory) {
  const std::string record = c10::str("local header of '", e.name, "'");
  a.signature(e.local, kLocalSig, record);
  a.need(e.local, kLocalSize, record);
  const uint16_t name_len = a.u16(e.local + 26), extra_len = a.u16(e.local + 28);
  a.need(e.local + kLocalSize, name_len + extra_len, record);
  const auto name = a.text(e.local + kLocalSize, name_len);
  if (name != e.name)
    a.fail(e.local + kLocalSize, record, c10::str("name: the central directory says '", e.name,
                                                  "', found '", name, "'"));
  const uint16_t flags = a.u16(e.local + 6), method = a.u16(e.local + 8);
  if ((flags & (kFlagEncrypted | kFlagStrongEncryption)) != 0)
    a.fail(e.local + 6, record, c10::str("encrypted (flags ", hex32(flags), "): not supported"));
  if (method != e.method)
    a.fail(
        e.local + 8, record,
        c10::str("compression method: the central directory says ", e.method, ", found ", method));
  // With a data descriptor (bit 3) the CRC and sizes follow the data; the central
  // directory's are the ones to use.
  if (!(flags & kFlagDataDescriptor)) {
    uint32_t crc = a.u32(e.local + 14);
    uint64_t compressed = a.u32(e.local + 18), size = a.u32(e.local + 22);
    a.zip64(e.local + kLocalSize + name_len, extra_len, {&size, &compressed}, record);
    const std::tuple<const char*, uint64_t, uint64_t, uint64_t> fields[] = {
        {"CRC-32", 14, e.crc, crc}, {"compressed size", 18, e.compressed, compressed},
        {"uncompressed size", 22, e.size, size}};
    for (const auto& [field, offset, central, local] : fields)
      if (central != local)
        a.fail(e.local + offset, record,
               offset == 14
                   ? c10::str(field, ": the central directory says ", hex32(central), ", found ",
                              hex32(local))
                   : c10::str(field, ": the central directory says ", central, ", found ", local));
  }
  e.data = e.local + kLocalSize + name_len + extra_len;
  if (e.data > directory || e.compressed > directory - e.data)
    a.fail(e.data, record, c10::str("data of ", e.compressed, " bytes: expected it to end by byte ",
                                    directory, " where the central directory starts"));
}

// Inflates a raw deflate stream (method 8) into a buffer of `size` bytes aligned to 64.
std::shared_ptr<unsigned char> inflate_entry(const Archive& a, const Entry& e,
                                             const std::string& record) {
  auto* raw = static_cast<unsigned char*>(
      std::aligned_alloc(64, std::max<uint64_t>(64, (e.size + 63) / 64 * 64)));
  if (!raw) throw std::bad_alloc();
  std::shared_ptr<unsigned char> out(raw, std::free);
  z_stream z{};
  if (inflateInit2(&z, -MAX_WBITS) != Z_OK) throw std::bad_alloc();
  constexpr uint64_t kChunk = 1u << 30;  // z_stream's avail_* count in 32 bits
  const unsigned char* in = a.bytes(e.data);
  uint64_t in_left = e.compressed, out_left = e.size;
  unsigned char spare[1];  // one byte past the declared size, to catch a longer stream
  bool overflow = false;
  int rc = Z_OK;
  while (rc == Z_OK) {
    if (z.avail_in == 0 && in_left > 0) {
      z.next_in = const_cast<unsigned char*>(in);
      z.avail_in = static_cast<uInt>(std::min(in_left, kChunk));
      in += z.avail_in, in_left -= z.avail_in;
    }
    if (z.avail_out == 0) {
      z.next_out = out_left > 0 ? raw + (e.size - out_left) : spare;
      z.avail_out = out_left > 0 ? static_cast<uInt>(std::min(out_left, kChunk)) : 1;
      out_left -= out_left > 0 ? z.avail_out : 0;
    }
    rc = inflate(&z, Z_NO_FLUSH);
    if ((overflow = z.total_out > e.size)) break;
    if (rc == Z_BUF_ERROR && !(z.avail_in == 0 && in_left == 0))
      rc = Z_OK;  // room needed, not input
  }
  const uint64_t read = z.total_in, written = z.total_out;
  const std::string msg = z.msg ? z.msg : "invalid";
  inflateEnd(&z);
  if (rc == Z_MEM_ERROR) throw std::bad_alloc();
  if (rc == Z_DATA_ERROR || rc == Z_NEED_DICT)
    a.fail(e.data + read, record, c10::str("deflate data: ", msg));
  if (overflow)
    a.fail(e.data, record, c10::str("deflate data: inflates to more than ", e.size,
                                    " bytes, the central directory's uncompressed size"));
  if (rc != Z_STREAM_END)
    a.fail(e.data + read, record,
           c10::str("deflate data: the stream ends early: ", read, " of ", e.compressed,
                    " bytes inflate to ", written, " of ", e.size));
  if (written != e.size)
    a.fail(e.data, record,
           c10::str("deflate data: inflates to ", written, " bytes, expected ", e.size,
                    " (the central directory's uncompressed size)"));
  if (read != e.compressed)
    a.fail(e.data + read, record, c10::str("deflate data: the stream ends after ", read, " of the ",
                                           e.compressed, " compressed bytes"));
  return out;
}

uint32_t crc_of(const unsigned char* p, uint64_t n) {
  return static_cast<uint32_t>(::crc32_z(::crc32(0L, Z_NULL, 0), p, n));
}

}  // namespace

NamedArrays read_npz(const std::string& path) {
  const auto map = npy::map_file(path, ".npz");
  const Archive a(map->data, map->size, path);
  const Directory d = find_directory(a);
  auto entries = read_directory(a, d);
  std::map<std::string, size_t> seen;
  for (size_t i = 0; i < entries.size(); ++i) {
    auto& e = entries[i];
    e.array = e.name.ends_with(".npy") ? e.name.substr(0, e.name.size() - 4) : e.name;
    const auto [it, fresh] = seen.emplace(e.array, i);
    if (!fresh)
      a.fail(e.record, c10::str("central directory entry ", i, " '", e.name, "'"),
             c10::str("duplicate name: entry ", it->second, " '", entries[it->second].name,
                      "' is also array '", e.array, "'"));
    read_local_header(a, e, d.offset);
  }
  // No two entries may share bytes (a ZIP that overlaps them is damaged or hostile).
  std::vector<const Entry*> by_offset;
  for (const auto& e : entries) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(),
            [](auto* l, auto* r) { return l->local < r->local; });
  for (size_t k = 1; k < by_offset.size(); ++k)
    if (by_offset[k]->local < by_offset[k - 1]->data + by_offset[k - 1]->compressed)
      a.fail(by_offset[k]->local, c10::str("local header of '", by_offset[k]->name, "'"),
             c10::str("overlaps the data of '", by_offset[k - 1]->name, "' (bytes ",
                      by_offset[k - 1]->data, " to ",
                      by_offset[k - 1]->data + by_offset[k - 1]->compressed, ")"));

  NamedArrays out;
  for (const auto& e : entries) {
    const std::string record = c10::str("entry '", e.name, "'");
    std::shared_ptr<const void> owner = map;
    const unsigned char* bytes = a.bytes(e.data);
    if (e.method == kDeflate) {
      auto buffer = inflate_entry(a, e, record);
      bytes = buffer.get();
      owner = std::move(buffer);
    }
    if (const uint32_t crc = crc_of(bytes, e.size); crc != e.crc)
      a.fail(e.data, record,
             c10::str("CRC-32: the central directory says ", hex32(e.crc), ", the ",
                      e.method == kDeflate ? "inflated " : "", "data has ", hex32(crc)));
    const npy::Source src{c10::str(path, ": ", record, " at byte ", e.data), "the entry"};
    out.emplace_back(e.array, npy::wrap(bytes, e.size, std::move(owner), src));
  }
  return out;
}

namespace {

void put(std::string& out, uint64_t v, int bytes) {
  for (int k = 0; k < bytes; ++k) out += static_cast<char>((v >> (8 * k)) & 0xff);
}

}  // namespace

void write_npz(const std::string& path, const NamedArrays& arrays) {
  constexpr uint16_t kVersion = 45;  // ZIP64
  constexpr uint16_t kDate = (1 << 5) | 1,
                     kTime = 0;  // 1980-01-01 00:00: the same bytes every time
  std::string out, directory;
  std::set<std::string> names;
  for (const auto& [name, t] : arrays) {
    if (name.empty()) throw InputError(c10::str(path, ": an array with an empty name"));
    if (!names.insert(name).second)
      throw InputError(c10::str(path, ": two arrays named '", name, "'"));
    const auto c = t.detach().to(at::kCPU).contiguous();
    std::string body = npy::preamble(c, path);
    body.append(static_cast<const char*>(c.const_data_ptr()), c.numel() * c.element_size());
    const uint32_t crc = files::crc32(body);
    const std::string file = name + ".npy";
    const bool utf8 = std::any_of(file.begin(), file.end(), [](char ch) { return ch & 0x80; });
    const uint16_t flags = utf8 ? kFlagUtf8 : 0;
    // The local extra: ZIP64 sizes, then a padding field so the .npy — whose own header
    // is padded to 64 — starts at a multiple of 64 in the file (zipalign's trick).
    const uint64_t local = out.size();
    size_t pad = (64 - (local + kLocalSize + file.size() + 20) % 64) % 64;
    if (pad != 0 && pad < 4) pad += 64;
    put(out, kLocalSig, 4), put(out, kVersion, 2), put(out, flags, 2), put(out, kStored, 2);
    put(out, kTime, 2), put(out, kDate, 2), put(out, crc, 4), put(out, kSentinel32, 4);
    put(out, kSentinel32, 4), put(out, file.size(), 2), put(out, 20 + pad, 2);
    out += file;
    put(out, kZip64ExtraId, 2), put(out, 16, 2), put(out, body.size(), 8), put(out, body.size(), 8);
    if (pad > 0) put(out, kPaddingId, 2), put(out, pad - 4, 2), out.append(pad - 4, '\0');
    out += body;

    put(directory, kCentralSig, 4), put(directory, kVersion, 2), put(directory, kVersion, 2);
    put(directory, flags, 2), put(directory, kStored, 2), put(directory, kTime, 2);
    put(directory, kDate, 2), put(directory, crc, 4), put(directory, kSentinel32, 4);
    put(directory, kSentinel32, 4), put(directory, file.size(), 2), put(directory, 28, 2);
    put(directory, 0, 2), put(directory, 0, 2), put(directory, 0, 2), put(directory, 0, 4);
    put(directory, kSentinel32, 4);
    directory += file;
    put(directory, kZip64ExtraId, 2), put(directory, 24, 2), put(directory, body.size(), 8);
    put(directory, body.size(), 8), put(directory, local, 8);
  }
  const uint64_t directory_at = out.size(), zip64_end = directory_at + directory.size();
  out += directory;
  put(out, kZip64EndSig, 4), put(out, kZip64EndSize - 12, 8), put(out, kVersion, 2);
  put(out, kVersion, 2), put(out, 0, 4), put(out, 0, 4), put(out, arrays.size(), 8);
  put(out, arrays.size(), 8), put(out, directory.size(), 8), put(out, directory_at, 8);
  put(out, kZip64LocatorSig, 4), put(out, 0, 4), put(out, zip64_end, 8), put(out, 1, 4);
  put(out, kEndSig, 4), put(out, 0, 2), put(out, 0, 2), put(out, kSentinel16, 2);
  put(out, kSentinel16, 2), put(out, kSentinel32, 4), put(out, kSentinel32, 4), put(out, 0, 2);
  files::write_synced(path, out);
}

}  // namespace kiln::data
