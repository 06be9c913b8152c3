// zip_reader: the end records, the central directory and every local header, checked against the
// file and against what miniz and Python's zipfile would read (the rules below); looks_like_zip.
#include "formats/zip/zip_reader.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <utility>

#include "formats/zip/zip_format.h"
#include "util/checked.h"
#include "util/error.h"
#include "util/mapped_file.h"
#include "util/printable.h"

namespace swavg {

using namespace zip_format;

bool looks_like_zip(const uint8_t* data, size_t size) {
  if (size < 4) return false;
  uint32_t sig = load_le<uint32_t>(data);
  return sig == kLocalSig || sig == kEndSig || sig == kEnd64Sig;
}

// PyTorch reads these archives with miniz (PyTorchStreamReader), other tools with Python's zipfile,
// and the two resolve some archives differently from each other. The reader accepts only archives
// that both read the same way as swavg, and refuses the rest, saying what a reader could take
// differently:
//  - the end record: miniz takes the last signature with 22 bytes after it, zipfile the last 22
//    bytes when they end in an empty comment, else the last signature anywhere. The record's
//    comment must run exactly to the end of the file and hold no second signature.
//  - ZIP64: miniz follows the locator's offset, zipfile reads the 56 bytes before the locator.
//    They must be the same record, and the 32-bit fields must agree with it.
//  - zipfile shifts every offset by the distance between the directory's end and the end records
//    ("concat"), and reads entries until the directory's size is used up, miniz reads the count:
//    the directory must end right at the end records, and its entries fill it exactly.
//  - miniz finds names ignoring ASCII case, zipfile exactly; zipfile decodes names without the
//    UTF-8 flag as cp437 and cuts them at a NUL; miniz cuts names at 511 bytes. No two names may
//    be equal ignoring ASCII case, and find() refuses a name that matches only ignoring case.
//  - both take sizes, method and CRC from the directory and only the lengths from the local
//    header: the local header, and the data descriptor after the data where flag bit 3 says one
//    follows, must agree with the directory. miniz reads nothing for an entry marked as a DOS
//    folder.
//  - records lie back to back from offset 0 up to the directory: no bytes hide before or between.

namespace {

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

std::string hex16(uint16_t v) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%04x", v);
  return buf;
}

constexpr uint64_t kMaxNameLength = 511;  // miniz's MZ_ZIP_MAX_ARCHIVE_FILENAME_SIZE - 1
constexpr uint32_t kDosFolderAttribute = 0x10;

char fold(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

// miniz's name order (mz_zip_filename_compare): bytes with ASCII letters folded, then length.
int compare_folded(std::string_view a, std::string_view b) {
  const size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const auto x = static_cast<unsigned char>(fold(a[i])), y = static_cast<unsigned char>(fold(b[i]));
    if (x != y) return x < y ? -1 : 1;
  }
  return a.size() < b.size() ? -1 : (a.size() > b.size() ? 1 : 0);
}

struct archive_bytes {
  const uint8_t* data;
  uint64_t size;
  const std::string& context;

  [[noreturn]] void fail(const std::string& what) const { throw input_error(fmt::format("{}: {}", context, what)); }
  uint16_t u16(uint64_t at) const { return load_le<uint16_t>(data + at); }
  uint32_t u32(uint64_t at) const { return load_le<uint32_t>(data + at); }
  uint64_t u64(uint64_t at) const { return load_le<uint64_t>(data + at); }
  std::string_view text(uint64_t at, uint64_t n) const { return {reinterpret_cast<const char*>(data + at), n}; }
};

struct end_records {
  uint64_t eocd = 0;
  uint64_t cd_offset = 0;
  uint64_t cd_size = 0;
  uint64_t entries = 0;
  uint64_t cd_limit = 0;  // where the directory must end: the ZIP64 end record, else the end record
};

// The end record miniz takes: the last signature with a whole record after it, within reach of a
// comment of up to 64 KiB.
uint64_t find_end_signature(const archive_bytes& a) {
  if (a.size == 0) a.fail("not a zip archive: the file is empty");
  if (a.size < kEndSize)
    a.fail(fmt::format("not a zip archive: no end-of-central-directory record (the file has only {} bytes)", a.size));
  const uint64_t last = a.size - kEndSize;
  const uint64_t lowest = last > kMaxComment ? last - kMaxComment : 0;
  for (uint64_t pos = last + 1; pos-- > lowest;)
    if (a.u32(pos) == kEndSig) return pos;
  a.fail("not a zip archive: no end-of-central-directory record");
}

void check_comment(const archive_bytes& a, uint64_t eocd) {
  const uint64_t comment = a.u16(eocd + 20);
  const uint64_t after = a.size - eocd - kEndSize;
  if (comment != after)
    a.fail(fmt::format(
        "the end-of-central-directory record at offset {} declares a comment of {} bytes, but {} bytes follow it "
        "(expected the comment to end the file; readers disagree on bytes after it)",
        eocd, comment, after));
  for (uint64_t pos = eocd + 1; comment > 0 && pos + 4 <= a.size; ++pos)
    if (a.u32(pos) == kEndSig)
      a.fail(fmt::format(
          "a second end-of-central-directory signature at offset {}, inside the comment of the record at offset {} "
          "(Python's zipfile would take it, miniz the first)",
          pos, eocd));
}

struct end_field {
  const char* what;
  uint64_t value32;
  uint64_t sentinel;  // the 32-bit record's "see the ZIP64 record" value
  uint64_t value64;
};

void read_zip64_end(const archive_bytes& a, end_records& r, std::array<end_field, 6>& fields) {
  const uint64_t locator = r.eocd - kLocator64Size;
  const uint32_t end64_disk = a.u32(locator + 4);
  const uint64_t end64 = a.u64(locator + 8);
  const uint32_t disks = a.u32(locator + 16);
  if (end64_disk != 0 || disks != 1)
    a.fail(fmt::format(
        "multi-disk archives are not supported (the ZIP64 locator names {} disks and the ZIP64 record on disk {}, "
        "expected 1 and 0)",
        disks, end64_disk));
  if (!range_inside(end64, kEnd64Size, locator))
    a.fail(fmt::format(
        "the ZIP64 end-of-central-directory locator points to offset {}, but the record needs {} bytes before the "
        "locator at offset {}",
        end64, kEnd64Size, locator));
  if (a.u32(end64) != kEnd64Sig)
    a.fail(fmt::format("no ZIP64 end-of-central-directory record at offset {} (found signature {}, expected {})", end64,
                       hex32(a.u32(end64)), hex32(kEnd64Sig)));
  const uint64_t record_size = a.u64(end64 + 4);
  if (record_size != kEnd64RecordSize)
    a.fail(
        fmt::format("the ZIP64 end-of-central-directory record at offset {} declares a size of {} bytes (expected {})",
                    end64, record_size, kEnd64RecordSize));
  if (end64 + kEnd64Size != locator)
    a.fail(fmt::format(
        "the ZIP64 end-of-central-directory locator points to offset {}, but the record must end right before the "
        "locator, at offset {} (Python's zipfile reads it there, miniz where the locator points)",
        end64, locator - kEnd64Size));
  const uint64_t v64[6] = {a.u32(end64 + 16), a.u32(end64 + 20), a.u64(end64 + 24),
                           a.u64(end64 + 32), a.u64(end64 + 40), a.u64(end64 + 48)};
  for (size_t i = 0; i < fields.size(); ++i) {
    end_field& f = fields[i];
    f.value64 = v64[i];
    if (f.value32 != f.sentinel && f.value32 != f.value64)
      a.fail(fmt::format(
          "the end-of-central-directory record gives {} as {}, but the ZIP64 record at offset {} gives {} (expected "
          "the same, or {})",
          f.what, f.value32, end64, f.value64, f.sentinel));
  }
  r.cd_limit = end64;
}

end_records read_end(const archive_bytes& a) {
  end_records r;
  r.eocd = find_end_signature(a);
  check_comment(a, r.eocd);
  const uint64_t e = r.eocd;
  std::array<end_field, 6> f = {{{"this disk's number", a.u16(e + 4), kMax16, 0},
                                 {"the directory's disk", a.u16(e + 6), kMax16, 0},
                                 {"the entries on this disk", a.u16(e + 8), kMax16, 0},
                                 {"the number of entries", a.u16(e + 10), kMax16, 0},
                                 {"the central directory's size", a.u32(e + 12), kMax32, 0},
                                 {"the central directory's offset", a.u32(e + 16), kMax32, 0}}};
  for (end_field& x : f) x.value64 = x.value32;
  r.cd_limit = r.eocd;
  if (r.eocd >= kLocator64Size && a.u32(r.eocd - kLocator64Size) == kLocator64Sig) read_zip64_end(a, r, f);

  const uint64_t this_disk = f[0].value64, cd_disk = f[1].value64, disk_entries = f[2].value64;
  r.entries = f[3].value64;
  r.cd_size = f[4].value64;
  r.cd_offset = f[5].value64;
  if (this_disk != 0 || cd_disk != 0 || disk_entries != r.entries)
    a.fail(fmt::format(
        "multi-disk archives are not supported (disk {}, directory on disk {}, {} of {} entries on this disk)",
        this_disk, cd_disk, disk_entries, r.entries));
  const std::string cd_text = fmt::format("the central directory ({} bytes at offset {})", r.cd_size, r.cd_offset);
  if (!range_inside(r.cd_offset, r.cd_size, a.size))
    a.fail(fmt::format("{} lies outside the file (file has {} bytes)", cd_text, a.size));
  if (r.cd_offset + r.cd_size > r.cd_limit)
    a.fail(fmt::format("{} runs into the end-of-central-directory record at offset {}", cd_text, r.cd_limit));
  if (r.entries > r.cd_size / kCentralSize)
    a.fail(fmt::format("the end-of-central-directory record claims {} entries, but {} has room for at most {}",
                       r.entries, cd_text, r.cd_size / kCentralSize));
  if (r.entries > kMax32)
    a.fail(fmt::format("the archive has {} entries, more than {} are not supported", r.entries, kMax32));
  return r;
}

std::string record_text(std::string_view name) { return "record " + quoted(name); }

// Names both readers see as the same bytes: zipfile decodes them (UTF-8 with the flag, else cp437)
// and cuts them at a NUL, miniz cuts them at 511 bytes; tools that extract them would leave the
// folder on '..', a leading '/' or a drive letter, and Windows ones split at '\'.
void check_name(const archive_bytes& a, const std::string& name, uint16_t flags) {
  const std::string rec = record_text(name);
  if (name.empty()) a.fail("an entry of the central directory has an empty name");
  if (name.size() > kMaxNameLength)
    a.fail(fmt::format("{} has a name of {} bytes (at most {}: PyTorch's reader cuts longer names)", rec, name.size(),
                       kMaxNameLength));
  if (name.find('\0') != std::string::npos)
    a.fail(fmt::format("{} has a NUL byte in its name (Python's zipfile cuts the name there)", rec));
  if (name.find('\\') != std::string::npos)
    a.fail(fmt::format("{} has a backslash in its name (a folder separator on Windows)", rec));
  const bool drive = name.size() >= 2 && name[1] == ':' && std::isalpha(static_cast<unsigned char>(name[0]));
  if (name[0] == '/' || drive) a.fail(fmt::format("{} has an absolute path", rec));
  for (size_t at = 0; at <= name.size();) {
    const size_t end = std::min(name.find('/', at), name.size());
    const std::string_view part(name.data() + at, end - at);
    if (part == "..") a.fail(fmt::format("{} has a '..' component", rec));
    if (part.empty() || part == ".")
      a.fail(fmt::format("{} has an empty or '.' path component (expected a file name, not a folder)", rec));
    at = end + 1;
  }
  if (!is_ascii(name)) {
    if (!(flags & kFlagUtf8))
      a.fail(fmt::format(
          "{} has non-ASCII bytes in its name but not the UTF-8 flag (Python's zipfile would read it as cp437)", rec));
    if (!valid_utf8(name)) a.fail(fmt::format("{} has a name that is not valid UTF-8", rec));
  }
}

struct central_entry {
  zip_entry e;
  uint16_t flags = 0;
  uint64_t end = 0;  // where the record's bytes (and its data descriptor) end
};

// Walks the extra fields [x, x + length): they must tile it exactly. Returns the offset and size of
// the ZIP64 field, (0, 0) when there is none; a second one is refused (zipfile applies each).
std::pair<uint64_t, uint64_t> find_zip64_extra(const archive_bytes& a, uint64_t x, uint64_t length,
                                               const std::string& rec, const char* where) {
  std::pair<uint64_t, uint64_t> found{0, 0};
  uint64_t left = length;
  while (left > 0) {
    if (left < 4)
      a.fail(fmt::format("{} has a malformed extra field in its {} ({} stray bytes at its end)", rec, where, left));
    const uint16_t id = a.u16(x);
    const uint64_t len = a.u16(x + 2);
    if (len > left - 4)
      a.fail(fmt::format("{} has a malformed extra field in its {} (field {} declares {} bytes, {} remain)", rec, where,
                         hex16(id), len, left - 4));
    if (id == kZip64ExtraId) {
      if (found.first != 0) a.fail(fmt::format("{} has two ZIP64 extra fields in its {}", rec, where));
      found = {x + 4, len};
    }
    x += 4 + len;
    left -= 4 + len;
  }
  return found;
}

// Reads one central directory entry at p (its bounds checked by the caller) into c; returns its size.
uint64_t read_central_entry(const archive_bytes& a, uint64_t p, central_entry& c) {
  zip_entry& e = c.e;
  c.flags = a.u16(p + 8);
  e.method = a.u16(p + 10);
  e.crc32 = a.u32(p + 16);
  e.compressed_size = a.u32(p + 20);
  e.size = a.u32(p + 24);
  const uint64_t name_len = a.u16(p + 28);
  const uint64_t extra_len = a.u16(p + 30);
  const uint64_t comment_len = a.u16(p + 32);
  const uint32_t disk = a.u16(p + 34);
  const uint32_t attributes = a.u32(p + 38);
  e.header_offset = a.u32(p + 42);
  e.name.assign(a.text(p + kCentralSize, name_len));
  const std::string rec = record_text(e.name);

  if (c.flags & (kFlagEncrypted | kFlagStrongEncryption | kFlagMaskedHeader))
    a.fail(fmt::format("{} is encrypted (flags {}); encrypted archives are not supported", rec, hex16(c.flags)));
  if (c.flags & kFlagPatch) a.fail(fmt::format("{} is a patch (flags {}); not supported", rec, hex16(c.flags)));
  check_name(a, e.name, c.flags);
  if (disk != 0) a.fail(fmt::format("{} is on disk {}; multi-disk archives are not supported", rec, disk));
  if (attributes & kDosFolderAttribute)
    a.fail(fmt::format("{} is marked as a folder (attributes {}); PyTorch's reader would read no bytes for it", rec,
                       hex32(attributes)));

  const std::pair<uint64_t, uint64_t> zip64 =
      find_zip64_extra(a, p + kCentralSize + name_len, extra_len, rec, "directory entry");
  const uint64_t z = zip64.first, z_len = zip64.second;
  uint64_t f = z, f_left = z_len;
  auto take64 = [&](uint64_t& v, const char* what) {
    if (v != kMax32) return;
    if (z == 0) a.fail(fmt::format("{} has no ZIP64 extra field for its {} of {}", rec, what, hex32(kMax32)));
    if (f_left < 8) a.fail(fmt::format("{} has a ZIP64 extra field too short for its {} ({} bytes)", rec, what, z_len));
    v = a.u64(f);
    f += 8;
    f_left -= 8;
  };
  take64(e.size, "size");
  take64(e.compressed_size, "compressed size");
  take64(e.header_offset, "header offset");
  if (e.method == 0 && e.compressed_size != e.size)
    a.fail(fmt::format("{} is stored, but its stored size ({} bytes) differs from its size ({} bytes)", rec,
                       e.compressed_size, e.size));
  return kCentralSize + name_len + extra_len + comment_len;
}

// The local header at c.e.header_offset and the data descriptor after the data: where they are, and
// that they say what the directory says. Sets c.e.data_offset and c.end.
void check_local(const archive_bytes& a, const end_records& r, central_entry& c) {
  zip_entry& e = c.e;
  const std::string rec = record_text(e.name);
  const uint64_t local = e.header_offset;
  const uint64_t cd_end = r.cd_offset + r.cd_size;
  if (local >= r.cd_offset && local < cd_end)
    a.fail(
        fmt::format("{} starts inside the central directory (local header at offset {}, directory at offsets {} to {})",
                    rec, local, r.cd_offset, cd_end));
  if (!range_inside(local, kLocalSize, a.size))
    a.fail(fmt::format("{}: local header at offset {} lies past the end of the file (file has {} bytes)", rec, local,
                       a.size));
  if (local >= cd_end)
    a.fail(fmt::format("{} starts after the central directory (local header at offset {}, directory ends at offset {})",
                       rec, local, cd_end));
  if (a.u32(local) != kLocalSig)
    a.fail(fmt::format("{}: no local header at offset {} (found signature {}, expected {})", rec, local,
                       hex32(a.u32(local)), hex32(kLocalSig)));
  const uint64_t name_len = a.u16(local + 26);
  const uint64_t extra_len = a.u16(local + 28);
  e.data_offset = local + kLocalSize + name_len + extra_len;
  if (e.data_offset > a.size)
    a.fail(fmt::format(
        "{}: local header at offset {} extends past the end of the file (needs bytes up to {}, file has {})", rec,
        local, e.data_offset, a.size));
  if (a.text(local + kLocalSize, name_len) != e.name)
    a.fail(fmt::format("{}: the local header at offset {} names it {}", rec, local,
                       quoted(a.text(local + kLocalSize, name_len))));
  const auto data_end = checked_add(e.data_offset, e.compressed_size);
  if (!data_end || *data_end > a.size)
    a.fail(fmt::format("{} extends past the end of the file (needs {} bytes from offset {}{}, file has {})", rec,
                       e.compressed_size, e.data_offset,
                       data_end ? fmt::format(", up to {}", *data_end) : std::string(), a.size));
  if (*data_end > r.cd_offset)
    a.fail(fmt::format(
        "{} runs into the central directory (its bytes end at offset {}, the directory starts at offset {})", rec,
        *data_end, r.cd_offset));

  const uint16_t flags = a.u16(local + 6);
  const uint16_t method = a.u16(local + 8);
  if (flags != c.flags || method != e.method)
    a.fail(fmt::format(
        "{}: the local header at offset {} gives flags {} and method {}, the central directory flags {} and method {}",
        rec, local, hex16(flags), method, hex16(c.flags), e.method));
  const std::pair<uint64_t, uint64_t> zip64 =
      find_zip64_extra(a, local + kLocalSize + name_len, extra_len, rec, "local header");
  const uint64_t z = zip64.first, z_len = zip64.second;
  uint64_t size = a.u32(local + 22), compressed = a.u32(local + 18);
  uint64_t f = z, f_left = z_len;
  auto take64 = [&](uint64_t& v) {
    if (v != kMax32 || z == 0 || f_left < 8) return;
    v = a.u64(f);
    f += 8;
    f_left -= 8;
  };
  take64(size);
  take64(compressed);
  const uint32_t crc = a.u32(local + 14);
  // With a data descriptor the local header may leave them 0 (miniz and zipfile do), never differ.
  const bool descriptor = (flags & kFlagDescriptor) != 0;
  auto agrees = [descriptor](uint64_t local_value, uint64_t central) {
    return local_value == central || (descriptor && local_value == 0);
  };
  if (!agrees(size, e.size) || !agrees(compressed, e.compressed_size) || !agrees(crc, e.crc32))
    a.fail(fmt::format(
        "{}: the local header at offset {} gives size {}, compressed size {}, CRC {}; the central directory {}, {}, {}",
        rec, local, size, compressed, hex32(crc), e.size, e.compressed_size, hex32(e.crc32)));
  c.end = *data_end;
  if (!descriptor) return;

  // miniz and zipfile write 64-bit sizes in the descriptor when the local header has a ZIP64 field.
  const uint64_t d = *data_end;
  const uint64_t d_size = z != 0 ? kDescriptorSize64 : kDescriptorSize;
  if (r.cd_offset - d < d_size)
    a.fail(fmt::format("{}: its data descriptor ({} bytes at offset {}) runs into the central directory at offset {}",
                       rec, d_size, d, r.cd_offset));
  const uint64_t d_compressed = z != 0 ? a.u64(d + 8) : a.u32(d + 8);
  const uint64_t d_plain = z != 0 ? a.u64(d + 16) : a.u32(d + 12);
  if (a.u32(d) != kDescriptorSig || a.u32(d + 4) != e.crc32 || d_compressed != e.compressed_size || d_plain != e.size)
    a.fail(fmt::format(
        "{}: the data descriptor at offset {} (signature {}, CRC {}, compressed size {}, size {}) does not match the "
        "central directory (expected {}, {}, {}, {})",
        rec, d, hex32(a.u32(d)), hex32(a.u32(d + 4)), d_compressed, d_plain, hex32(kDescriptorSig), hex32(e.crc32),
        e.compressed_size, e.size));
  c.end = d + d_size;
}

// Records back to back from offset 0 to the directory: every byte before it belongs to one record.
void check_layout(const archive_bytes& a, const end_records& r, const std::vector<central_entry>& entries) {
  std::vector<uint32_t> by_offset(entries.size());
  for (uint32_t i = 0; i < by_offset.size(); ++i) by_offset[i] = i;
  std::sort(by_offset.begin(), by_offset.end(),
            [&entries](uint32_t x, uint32_t y) { return entries[x].e.header_offset < entries[y].e.header_offset; });
  uint64_t at = 0;
  const central_entry* prev = nullptr;
  for (uint32_t i : by_offset) {
    const central_entry& c = entries[i];
    if (prev && prev->end > c.e.header_offset)
      a.fail(fmt::format(
          "records {} and {} overlap (the first ends at offset {}, the second's local header starts at offset {})",
          quoted(prev->e.name), quoted(c.e.name), prev->end, c.e.header_offset));
    if (c.e.header_offset != at)
      a.fail(fmt::format("{} bytes at offsets {} to {} belong to no record ({}); expected {} to start at offset {}",
                         c.e.header_offset - at, at, c.e.header_offset,
                         prev ? "after " + quoted(prev->e.name) : std::string("before the first"),
                         record_text(c.e.name), at));
    at = c.end;
    prev = &c;
  }
  if (at != r.cd_offset)
    a.fail(fmt::format(
        "{} bytes at offsets {} to {} belong to no record ({}); expected the central directory at offset {}",
        r.cd_offset - at, at, r.cd_offset,
        prev ? "after " + quoted(prev->e.name) : std::string("the archive has no records"), at));
  const uint64_t cd_end = r.cd_offset + r.cd_size;
  if (cd_end != r.cd_limit)
    a.fail(fmt::format(
        "the central directory ends at offset {}, but the end records start at offset {} (expected no bytes between; "
        "Python's zipfile would shift every offset by {})",
        cd_end, r.cd_limit, r.cd_limit - cd_end));
}

}  // namespace

zip_reader::zip_reader(const uint8_t* data, size_t size, std::string context, const done_fn& done_with)
    : data_(data), size_(size), context_(std::move(context)) {
  const archive_bytes a{data_, size_, context_};
  const end_records r = read_end(a);

  std::vector<central_entry> entries(r.entries);
  const uint64_t cd_end = r.cd_offset + r.cd_size;
  uint64_t p = r.cd_offset;
  for (uint64_t i = 0; i < r.entries; ++i) {
    auto which = [&] { return fmt::format("entry {} of {}", i + 1, r.entries); };
    if (cd_end - p < kCentralSize)
      a.fail(fmt::format("truncated central directory: {} starts at offset {} but the directory ends at offset {}",
                         which(), p, cd_end));
    if (a.u32(p) != kCentralSig)
      a.fail(fmt::format("corrupt central directory: {} at offset {} has signature {} (expected {})", which(), p,
                         hex32(a.u32(p)), hex32(kCentralSig)));
    const uint64_t needs = kCentralSize + a.u16(p + 28) + a.u16(p + 30) + a.u16(p + 32);
    if (cd_end - p < needs)
      a.fail(
          fmt::format("truncated central directory: {} at offset {} needs {} bytes but the directory ends at offset {}",
                      which(), p, needs, cd_end));
    p += read_central_entry(a, p, entries[i]);
    check_local(a, r, entries[i]);
    if (done_with) {
      const zip_entry& e = entries[i].e;
      done_with(e.header_offset, e.data_offset);
      if (entries[i].end > e.data_offset + e.compressed_size)
        done_with(e.data_offset + e.compressed_size, entries[i].end);
    }
  }
  if (p != cd_end)
    a.fail(fmt::format(
        "the central directory has {} bytes after its {} entries (Python's zipfile would read them as more entries)",
        cd_end - p, r.entries));
  check_layout(a, r, entries);

  entries_.reserve(entries.size());
  for (central_entry& c : entries) entries_.push_back(std::move(c.e));
  index_names();
  find_root();
}

// Sorted as miniz sorts them, for find(); two names it cannot tell apart are refused.
void zip_reader::index_names() {
  const uint32_t n = static_cast<uint32_t>(entries_.size());
  by_name_.resize(n);
  for (uint32_t i = 0; i < n; ++i) by_name_[i] = i;
  std::sort(by_name_.begin(), by_name_.end(), [this](uint32_t x, uint32_t y) {
    const int c = compare_folded(entries_[x].name, entries_[y].name);
    return c != 0 ? c < 0 : entries_[x].name < entries_[y].name;
  });
  for (uint32_t i = 1; i < n; ++i) {
    const std::string& x = entries_[by_name_[i - 1]].name;
    const std::string& y = entries_[by_name_[i]].name;
    if (x == y)
      throw input_error(fmt::format("{}: record {} appears twice in the central directory", context_, quoted(y)));
    if (compare_folded(x, y) == 0)
      throw input_error(fmt::format(
          "{}: records {} and {} differ only in case (PyTorch's reader, which ignores ASCII case, could take either)",
          context_, quoted(x), quoted(y)));
  }
}

void zip_reader::find_root() {
  if (entries_.empty()) {
    root_error_ = "the archive has no records";
    return;
  }
  for (const zip_entry& e : entries_) {
    const size_t slash = e.name.find('/');
    if (slash == std::string::npos || slash == 0) {
      root_.clear();
      root_error_ = fmt::format("record {} is not inside a top folder", quoted(e.name));
      return;
    }
    const std::string_view top(e.name.data(), slash);
    if (root_.empty()) {
      root_ = top;
    } else if (top != root_) {
      root_error_ =
          fmt::format("records {} and {} are in different top folders", quoted(entries_.front().name), quoted(e.name));
      root_.clear();
      return;
    }
  }
}

const std::string& zip_reader::root() const {
  if (root_.empty()) throw input_error(fmt::format("{}: {}", context_, root_error_));
  return root_;
}

zip_reader read_zip(const mapped_file& file) {
  return zip_reader(file.data(), file.size(), file.path(),
                    [&file](uint64_t begin, uint64_t end) { file.release_pages(begin, end); });
}

const zip_entry* zip_reader::find(std::string_view name) const {
  auto it = std::lower_bound(by_name_.begin(), by_name_.end(), name, [this](uint32_t i, std::string_view n) {
    return compare_folded(entries_[i].name, n) < 0;
  });
  if (it == by_name_.end() || compare_folded(entries_[*it].name, name) != 0) return nullptr;
  const zip_entry& e = entries_[*it];
  if (e.name != name)
    throw input_error(fmt::format(
        "{}: record {} is named {} in the archive (PyTorch's reader ignores ASCII case and would take it, Python's "
        "zipfile would not)",
        context_, quoted(name), quoted(e.name)));
  return &e;
}

const zip_entry& zip_reader::stored(std::string_view name) const {
  const zip_entry* e = find(name);
  if (!e) throw input_error(fmt::format("{}: record {} is missing", context_, quoted(name)));
  if (e->method != 0)
    throw input_error(
        fmt::format("{}: record {} is compressed (method {}); PyTorch archives store records uncompressed", context_,
                    quoted(name), e->method));
  if (e->compressed_size != e->size)
    throw input_error(
        fmt::format("{}: record {} is stored, but its stored size ({} bytes) differs from its size ({} bytes)",
                    context_, quoted(name), e->compressed_size, e->size));
  return *e;
}

}  // namespace swavg
