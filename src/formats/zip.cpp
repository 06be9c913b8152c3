#include "formats/zip.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define SWAVG_CRC32_CLMUL 1
#endif

#include "util/atomic_file.h"
#include "util/checked.h"
#include "util/error.h"
#include "util/mapped_file.h"

namespace swavg {
namespace {

constexpr uint32_t kLocalSig = 0x04034b50;
constexpr uint32_t kCentralSig = 0x02014b50;
constexpr uint32_t kEndSig = 0x06054b50;
constexpr uint32_t kEnd64Sig = 0x06064b50;
constexpr uint32_t kLocator64Sig = 0x07064b50;

constexpr uint64_t kLocalSize = 30;
constexpr uint64_t kCentralSize = 46;
constexpr uint64_t kEndSize = 22;
constexpr uint64_t kEnd64Size = 56;
constexpr uint64_t kLocator64Size = 20;
constexpr uint64_t kMaxComment = 0xFFFF;

constexpr uint16_t kZip64ExtraId = 0x0001;
constexpr uint32_t kMax32 = 0xFFFFFFFF;
constexpr uint16_t kMax16 = 0xFFFF;

constexpr uint16_t kFlagEncrypted = 0x0001;
constexpr uint16_t kFlagStrongEncryption = 0x0040;
constexpr uint16_t kFlagUtf8 = 0x0800;
constexpr uint16_t kFlagMaskedHeader = 0x2000;

constexpr uint16_t kVersion = 20;
constexpr uint16_t kVersionZip64 = 45;
constexpr uint16_t kDosTime = 0;
constexpr uint16_t kDosDate = (1 << 5) | 1;  // 1980-01-01, the earliest date DOS can say
constexpr uint64_t kAlignment = 64;
constexpr size_t kMaxNameInMessage = 200;

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

// A name from the file, safe to print: control bytes escaped, long names cut.
std::string quoted(std::string_view name) {
  std::string out = "'";
  for (size_t i = 0; i < name.size(); ++i) {
    if (i == kMaxNameInMessage) {
      out += "...";
      break;
    }
    unsigned char c = static_cast<unsigned char>(name[i]);
    if (c < 0x20 || c == 0x7f || c == '\\') {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "'";
}

// ----------------------------------------------------------------------------------------------
// CRC-32, slice-by-16.

using crc_tables = std::array<std::array<uint32_t, 256>, 16>;

constexpr crc_tables make_crc_tables() {
  crc_tables t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0xEDB88320u : c >> 1;
    t[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; ++i)
    for (size_t k = 1; k < 16; ++k) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xff];
  return t;
}

constexpr crc_tables kCrcTables = make_crc_tables();

// ----------------------------------------------------------------------------------------------
// Little-endian output.

void put16(std::string& b, uint16_t v) {
  char c[2];
  store_le(reinterpret_cast<uint8_t*>(c), v);
  b.append(c, 2);
}
void put32(std::string& b, uint32_t v) {
  char c[4];
  store_le(reinterpret_cast<uint8_t*>(c), v);
  b.append(c, 4);
}
void put64(std::string& b, uint64_t v) {
  char c[8];
  store_le(reinterpret_cast<uint8_t*>(c), v);
  b.append(c, 8);
}

uint32_t clamp32(uint64_t v, bool zip64) { return zip64 ? kMax32 : static_cast<uint32_t>(v); }

bool is_ascii(const std::string& s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

}  // namespace

namespace {

uint32_t crc32_tables(uint32_t crc, const uint8_t* p, uint64_t size) {
  const auto& t = kCrcTables;
  crc = ~crc;
  while (size >= 16) {
    uint32_t a = load_le<uint32_t>(p) ^ crc;
    uint32_t b = load_le<uint32_t>(p + 4);
    uint32_t c = load_le<uint32_t>(p + 8);
    uint32_t d = load_le<uint32_t>(p + 12);
    crc = t[15][a & 0xff] ^ t[14][(a >> 8) & 0xff] ^ t[13][(a >> 16) & 0xff] ^ t[12][a >> 24] ^
          t[11][b & 0xff] ^ t[10][(b >> 8) & 0xff] ^ t[9][(b >> 16) & 0xff] ^ t[8][b >> 24] ^
          t[7][c & 0xff] ^ t[6][(c >> 8) & 0xff] ^ t[5][(c >> 16) & 0xff] ^ t[4][c >> 24] ^
          t[3][d & 0xff] ^ t[2][(d >> 8) & 0xff] ^ t[1][(d >> 16) & 0xff] ^ t[0][d >> 24];
    p += 16;
    size -= 16;
  }
  while (size-- > 0) crc = (crc >> 8) ^ t[0][(crc ^ *p++) & 0xff];
  return ~crc;
}

#ifdef SWAVG_CRC32_CLMUL
constexpr uint64_t kClmulMin = 64;

#define SWAVG_CLMUL_TARGET __attribute__((target("pclmul,sse4.1")))

SWAVG_CLMUL_TARGET inline __m128i load128(const uint8_t* q) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
}

SWAVG_CLMUL_TARGET inline __m128i fold128(__m128i x, __m128i k, __m128i next) {
  return _mm_xor_si128(
      _mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11)), next);
}

// Folds 64 bytes at a time with carry-less multiplication (Intel, "Fast CRC Computation for
// Generic Polynomials Using PCLMULQDQ"), then Barrett-reduces to 32 bits. `size` is a multiple of
// 16 and at least 64; `state` is the inverted running CRC, and so is the result.
SWAVG_CLMUL_TARGET uint32_t crc32_clmul(uint32_t state, const uint8_t* p, uint64_t size) {
  const __m128i k1k2 = _mm_set_epi64x(0x01c6e41596, 0x0154442bd4);
  const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009e, 0x01751997d0);
  const __m128i k5 = _mm_set_epi64x(0, 0x0163cd6124);
  const __m128i poly = _mm_set_epi64x(0x01f7011641, 0x01db710641);
  const __m128i low32 = _mm_setr_epi32(~0, 0, ~0, 0);

  __m128i x1 = _mm_xor_si128(load128(p), _mm_cvtsi32_si128(static_cast<int>(state)));
  __m128i x2 = load128(p + 16), x3 = load128(p + 32), x4 = load128(p + 48);
  p += 64;
  size -= 64;
  while (size >= 64) {
    x1 = fold128(x1, k1k2, load128(p));
    x2 = fold128(x2, k1k2, load128(p + 16));
    x3 = fold128(x3, k1k2, load128(p + 32));
    x4 = fold128(x4, k1k2, load128(p + 48));
    p += 64;
    size -= 64;
  }
  x1 = fold128(x1, k3k4, x2);
  x1 = fold128(x1, k3k4, x3);
  x1 = fold128(x1, k3k4, x4);
  while (size >= 16) {
    x1 = fold128(x1, k3k4, load128(p));
    p += 16;
    size -= 16;
  }

  x2 = _mm_clmulepi64_si128(x1, k3k4, 0x10);
  x1 = _mm_xor_si128(_mm_srli_si128(x1, 8), x2);
  x2 = _mm_srli_si128(x1, 4);
  x1 = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(x1, low32), k5, 0x00), x2);
  x2 = _mm_clmulepi64_si128(_mm_and_si128(x1, low32), poly, 0x10);
  x2 = _mm_clmulepi64_si128(_mm_and_si128(x2, low32), poly, 0x00);
  return static_cast<uint32_t>(_mm_extract_epi32(_mm_xor_si128(x1, x2), 1));
}

bool have_clmul() {
  static const bool yes = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
  return yes;
}
#endif

}  // namespace

uint32_t crc32_update(uint32_t crc, const void* data, uint64_t size) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
#ifdef SWAVG_CRC32_CLMUL
  if (size >= kClmulMin && have_clmul()) {
    const uint64_t bulk = size & ~uint64_t{15};
    crc = ~crc32_clmul(~crc, p, bulk);
    p += bulk;
    size -= bulk;
  }
#endif
  return crc32_tables(crc, p, size);
}

bool looks_like_zip(const uint8_t* data, size_t size) {
  if (size < 4) return false;
  uint32_t sig = load_le<uint32_t>(data);
  return sig == kLocalSig || sig == kEndSig || sig == kEnd64Sig;
}

// ----------------------------------------------------------------------------------------------
// Reader

zip_reader::zip_reader(const uint8_t* data, size_t size, std::string context, const done_fn& done_with)
    : data_(data), size_(size), context_(std::move(context)) {
  auto fail = [this](const std::string& what) { throw input_error(fmt::format("{}: {}", context_, what)); };
  auto u16 = [this](uint64_t at) { return load_le<uint16_t>(data_ + at); };
  auto u32 = [this](uint64_t at) { return load_le<uint32_t>(data_ + at); };
  auto u64 = [this](uint64_t at) { return load_le<uint64_t>(data_ + at); };
  const uint64_t file_size = size_;

  if (file_size == 0) fail("not a zip archive: the file is empty");
  if (file_size < kEndSize)
    fail(fmt::format("not a zip archive: no end-of-central-directory record (the file has only {} bytes)", file_size));

  // The end record is the last 22 bytes unless a comment of up to 64 KiB follows it.
  uint64_t eocd = file_size;
  const uint64_t last = file_size - kEndSize;
  const uint64_t lowest = last > kMaxComment ? last - kMaxComment : 0;
  for (uint64_t pos = last + 1; pos-- > lowest;) {
    if (u32(pos) == kEndSig && u16(pos + 20) <= last - pos) {
      eocd = pos;
      break;
    }
  }
  if (eocd == file_size) fail("not a zip archive: no end-of-central-directory record");

  uint32_t this_disk = u16(eocd + 4);
  uint32_t cd_disk = u16(eocd + 6);
  uint64_t disk_entries = u16(eocd + 8);
  uint64_t total_entries = u16(eocd + 10);
  uint64_t cd_size = u32(eocd + 12);
  uint64_t cd_offset = u32(eocd + 16);
  uint64_t cd_limit = eocd;  // the directory must end before this

  if (eocd >= kLocator64Size && u32(eocd - kLocator64Size) == kLocator64Sig) {
    const uint64_t locator = eocd - kLocator64Size;
    uint32_t end64_disk = u32(locator + 4);
    uint64_t end64 = u64(locator + 8);
    uint32_t disks = u32(locator + 16);
    if (end64_disk != 0 || disks > 1)
      fail(fmt::format("multi-disk archives are not supported (the ZIP64 locator names {} disks)", disks));
    if (!range_inside(end64, kEnd64Size, locator))
      fail(fmt::format(
          "the ZIP64 end-of-central-directory locator points to offset {}, but the record needs {} bytes before the "
          "locator at offset {}",
          end64, kEnd64Size, locator));
    if (u32(end64) != kEnd64Sig)
      fail(fmt::format("no ZIP64 end-of-central-directory record at offset {} (found signature {}, expected {})", end64,
                       hex32(u32(end64)), hex32(kEnd64Sig)));
    uint64_t record_size = u64(end64 + 4);
    if (record_size < kEnd64Size - 12 || record_size > locator - end64 - 12)
      fail(fmt::format(
          "the ZIP64 end-of-central-directory record at offset {} declares a size of {} bytes (expected {} up to the "
          "locator)",
          end64, record_size, kEnd64Size - 12));
    this_disk = u32(end64 + 16);
    cd_disk = u32(end64 + 20);
    disk_entries = u64(end64 + 24);
    total_entries = u64(end64 + 32);
    cd_size = u64(end64 + 40);
    cd_offset = u64(end64 + 48);
    cd_limit = end64;
  }

  if (this_disk != 0 || cd_disk != 0 || disk_entries != total_entries)
    fail(fmt::format(
        "multi-disk archives are not supported (disk {}, directory on disk {}, {} of {} entries on this disk)",
        this_disk, cd_disk, disk_entries, total_entries));

  const std::string cd_text = fmt::format("the central directory ({} bytes at offset {})", cd_size, cd_offset);
  if (!range_inside(cd_offset, cd_size, file_size))
    fail(fmt::format("{} lies outside the file (file has {} bytes)", cd_text, file_size));
  const uint64_t cd_end = cd_offset + cd_size;
  if (cd_end > cd_limit)
    fail(fmt::format("{} runs into the end-of-central-directory record at offset {}", cd_text, cd_limit));
  if (total_entries > cd_size / kCentralSize)
    fail(fmt::format("the end-of-central-directory record claims {} entries, but {} has room for at most {}",
                     total_entries, cd_text, cd_size / kCentralSize));
  if (total_entries > kMax32)
    fail(fmt::format("the archive has {} entries, more than {} are not supported", total_entries, kMax32));

  entries_.reserve(total_entries);
  std::vector<uint64_t> data_ends;
  data_ends.reserve(total_entries);
  uint64_t p = cd_offset;
  for (uint64_t i = 0; i < total_entries; ++i) {
    auto which = [&] { return fmt::format("entry {} of {}", i + 1, total_entries); };
    if (cd_end - p < kCentralSize)
      fail(fmt::format("truncated central directory: {} starts at offset {} but the directory ends at offset {}",
                       which(), p, cd_end));
    if (u32(p) != kCentralSig)
      fail(fmt::format("corrupt central directory: {} at offset {} has signature {} (expected {})", which(), p,
                       hex32(u32(p)), hex32(kCentralSig)));
    const uint16_t flags = u16(p + 8);
    const uint16_t method = u16(p + 10);
    const uint32_t crc = u32(p + 16);
    uint64_t compressed = u32(p + 20);
    uint64_t uncompressed = u32(p + 24);
    const uint64_t name_len = u16(p + 28);
    const uint64_t extra_len = u16(p + 30);
    const uint64_t comment_len = u16(p + 32);
    uint32_t disk = u16(p + 34);
    uint64_t local = u32(p + 42);
    if (cd_end - p - kCentralSize < name_len + extra_len + comment_len)
      fail(
          fmt::format("truncated central directory: {} at offset {} needs {} bytes but the directory ends at offset {}",
                      which(), p, kCentralSize + name_len + extra_len + comment_len, cd_end));

    zip_entry e;
    e.name.assign(reinterpret_cast<const char*>(data_ + p + kCentralSize), name_len);
    auto rec = [&e] { return "record " + quoted(e.name); };
    if (flags & (kFlagEncrypted | kFlagStrongEncryption | kFlagMaskedHeader))
      fail(fmt::format("{} is encrypted (flags {}); encrypted archives are not supported", rec(), hex16(flags)));

    const bool need64 =
        uncompressed == kMax32 || compressed == kMax32 || local == kMax32 || disk == kMax16;
    uint64_t x = p + kCentralSize + name_len;
    uint64_t x_left = extra_len;
    bool seen64 = false;
    while (x_left >= 4) {
      const uint16_t id = u16(x);
      const uint64_t len = u16(x + 2);
      if (len > x_left - 4)
        fail(fmt::format("{} has a malformed extra field (field {} declares {} bytes, {} remain)", rec(), hex16(id),
                         len, x_left - 4));
      if (id == kZip64ExtraId && need64 && !seen64) {
        seen64 = true;
        uint64_t f = x + 4;
        uint64_t f_left = len;
        auto take64 = [&](uint64_t& v, const char* what) {
          if (f_left < 8)
            fail(fmt::format("{} has a ZIP64 extra field too short for its {} ({} bytes)", rec(), what, len));
          v = u64(f);
          f += 8;
          f_left -= 8;
        };
        if (uncompressed == kMax32) take64(uncompressed, "size");
        if (compressed == kMax32) take64(compressed, "compressed size");
        if (local == kMax32) take64(local, "header offset");
        if (disk == kMax16) {
          if (f_left < 4) fail(rec() + " has a ZIP64 extra field too short for its disk number");
          disk = u32(f);
        }
      }
      x += 4 + len;
      x_left -= 4 + len;
    }
    if (disk != 0)
      fail(fmt::format("{} is on disk {}; multi-disk archives are not supported", rec(), disk));

    if (local >= cd_offset && local < cd_end)
      fail(fmt::format(
          "{} starts inside the central directory (local header at offset {}, directory at offsets {} to {})", rec(),
          local, cd_offset, cd_end));
    if (!range_inside(local, kLocalSize, file_size))
      fail(fmt::format("{}: local header at offset {} lies past the end of the file (file has {} bytes)", rec(), local,
                       file_size));
    if (local >= cd_end)
      fail(fmt::format("{} starts after the central directory (local header at offset {}, directory ends at offset {})",
                       rec(), local, cd_end));
    if (u32(local) != kLocalSig)
      fail(fmt::format("{}: no local header at offset {} (found signature {}, expected {})", rec(), local,
                       hex32(u32(local)), hex32(kLocalSig)));
    const uint64_t local_name_len = u16(local + 26);
    const uint64_t local_extra_len = u16(local + 28);
    const uint64_t data_offset = local + kLocalSize + local_name_len + local_extra_len;
    if (data_offset > file_size)
      fail(fmt::format(
          "{}: local header at offset {} extends past the end of the file (needs bytes up to {}, file has {})", rec(),
          local, data_offset, file_size));
    if (local_name_len != name_len ||
        std::memcmp(data_ + local + kLocalSize, e.name.data(), name_len) != 0)
      fail(fmt::format(
          "{}: the local header at offset {} names it {}", rec(), local,
          quoted(std::string_view(reinterpret_cast<const char*>(data_ + local + kLocalSize), local_name_len))));
    auto data_end = checked_add(data_offset, compressed);
    if (!data_end || *data_end > file_size)
      fail(fmt::format("{} extends past the end of the file (needs {} bytes from offset {}{}, file has {})", rec(),
                       compressed, data_offset, data_end ? fmt::format(", up to {}", *data_end) : std::string(),
                       file_size));
    if (*data_end > cd_offset)
      fail(fmt::format(
          "{} runs into the central directory (its bytes end at offset {}, the directory starts at offset {})", rec(),
          *data_end, cd_offset));

    if (done_with) done_with(local, data_offset);
    e.header_offset = local;
    e.data_offset = data_offset;
    e.size = uncompressed;
    e.compressed_size = compressed;
    e.method = method;
    e.crc32 = crc;
    entries_.push_back(std::move(e));
    data_ends.push_back(*data_end);
    p += kCentralSize + name_len + extra_len + comment_len;
  }

  const uint32_t n = static_cast<uint32_t>(entries_.size());
  std::vector<uint32_t> by_offset(n);
  for (uint32_t i = 0; i < n; ++i) by_offset[i] = i;
  std::sort(by_offset.begin(), by_offset.end(), [this](uint32_t a, uint32_t b) {
    return entries_[a].header_offset < entries_[b].header_offset;
  });
  for (uint32_t i = 1; i < n; ++i) {
    const uint32_t a = by_offset[i - 1], b = by_offset[i];
    if (data_ends[a] > entries_[b].header_offset)
      fail(fmt::format(
          "records {} and {} overlap (the first ends at offset {}, the second's local header starts at offset {})",
          quoted(entries_[a].name), quoted(entries_[b].name), data_ends[a], entries_[b].header_offset));
  }

  by_name_.resize(n);
  for (uint32_t i = 0; i < n; ++i) by_name_[i] = i;
  std::sort(by_name_.begin(), by_name_.end(),
            [this](uint32_t a, uint32_t b) { return entries_[a].name < entries_[b].name; });
  for (uint32_t i = 1; i < n; ++i) {
    if (entries_[by_name_[i - 1]].name == entries_[by_name_[i]].name)
      fail(fmt::format("record {} appears twice in the central directory", quoted(entries_[by_name_[i]].name)));
  }

  if (entries_.empty()) {
    root_error_ = "the archive has no records";
  } else {
    for (const zip_entry& e : entries_) {
      const size_t slash = e.name.find('/');
      if (slash == std::string::npos || slash == 0) {
        root_.clear();
        root_error_ = fmt::format("record {} is not inside a top folder", quoted(e.name));
        break;
      }
      const std::string_view top(e.name.data(), slash);
      if (root_.empty()) {
        root_ = top;
      } else if (top != root_) {
        root_error_ = fmt::format("records {} and {} are in different top folders", quoted(entries_.front().name),
                                  quoted(e.name));
        root_.clear();
        break;
      }
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
  auto it =
      std::lower_bound(by_name_.begin(), by_name_.end(), name,
                       [this](uint32_t i, std::string_view n) { return entries_[i].name < n; });
  if (it == by_name_.end() || entries_[*it].name != name) return nullptr;
  return &entries_[*it];
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

// ----------------------------------------------------------------------------------------------
// Writer

zip_writer::zip_writer(atomic_file& out, bool force_zip64) : out_(out), force_zip64_(force_zip64) {}

void zip_writer::fail(const std::string& what) const {
  throw error(exit_code::internal, fmt::format("{}: zip writer: {}", out_.target(), what));
}

void zip_writer::write_local_header(const std::string& name, uint64_t size, uint32_t crc) {
  if (finished_) fail(fmt::format("record {} added after finish()", quoted(name)));
  if (open_)
    fail(fmt::format("record {} started while {} is open", quoted(name), quoted(records_.back().name)));
  if (name.empty() || name.size() > kMax16)
    fail(fmt::format("record name of {} bytes (must be 1 to 65535)", name.size()));

  const uint64_t offset = out_.tell();
  const bool local64 = force_zip64_ || size >= kMax32;
  const bool zip64 = local64 || offset >= kMax32;
  const uint64_t zip64_extra = local64 ? 4 + 16 : 0;
  const uint64_t unpadded = offset + kLocalSize + name.size() + zip64_extra + 4;
  const uint64_t padding = (kAlignment - unpadded % kAlignment) % kAlignment;

  std::string h;
  h.reserve(kLocalSize + name.size() + zip64_extra + 4 + padding);
  put32(h, kLocalSig);
  put16(h, zip64 ? kVersionZip64 : kVersion);
  put16(h, is_ascii(name) ? 0 : kFlagUtf8);
  put16(h, 0);
  put16(h, kDosTime);
  put16(h, kDosDate);
  put32(h, crc);
  put32(h, clamp32(size, local64));
  put32(h, clamp32(size, local64));
  put16(h, static_cast<uint16_t>(name.size()));
  put16(h, static_cast<uint16_t>(zip64_extra + 4 + padding));
  h += name;
  if (local64) {
    put16(h, kZip64ExtraId);
    put16(h, 16);
    put64(h, size);
    put64(h, size);
  }
  h += "FB";
  put16(h, static_cast<uint16_t>(padding));
  h.append(padding, 'Z');
  out_.write(h.data(), h.size());
  records_.push_back(record{name, offset, size, crc});
}

void zip_writer::add(const std::string& name, const void* data, uint64_t size) {
  write_local_header(name, size, crc32_update(0, data, size));
  out_.write(data, size);
}

void zip_writer::begin_record(const std::string& name, uint64_t size) {
  write_local_header(name, size, 0);
  open_ = true;
  written_ = 0;
  crc_ = 0;
}

void zip_writer::write(const void* data, uint64_t size) {
  if (!open_) fail("write() without an open record");
  const record& r = records_.back();
  if (size > r.size - written_)
    fail(fmt::format("record {} declared {} bytes but {} were written", quoted(r.name), r.size, written_ + size));
  crc_ = crc32_update(crc_, data, size);
  out_.write(data, size);
  written_ += size;
}

void zip_writer::end_record() {
  if (!open_) fail("end_record() without an open record");
  record& r = records_.back();
  if (written_ != r.size)
    fail(fmt::format("record {} declared {} bytes but only {} were written", quoted(r.name), r.size, written_));
  uint8_t crc[4];
  store_le(crc, crc_);
  out_.pwrite(crc, 4, r.header_offset + 14);
  r.crc = crc_;
  open_ = false;
}

void zip_writer::finish() {
  if (finished_) fail("finish() called twice");
  if (open_) fail(fmt::format("finish() while record {} is open", quoted(records_.back().name)));
  finished_ = true;

  const uint64_t cd_offset = out_.tell();
  std::string h;
  for (const record& r : records_) {
    const bool size64 = force_zip64_ || r.size >= kMax32;
    const bool offset64 = force_zip64_ || r.header_offset >= kMax32;
    const uint16_t version = size64 || offset64 ? kVersionZip64 : kVersion;
    const uint16_t extra = size64 || offset64 ? 4 + (size64 ? 16 : 0) + (offset64 ? 8 : 0) : 0;
    h.clear();
    put32(h, kCentralSig);
    put16(h, version);
    put16(h, version);
    put16(h, is_ascii(r.name) ? 0 : kFlagUtf8);
    put16(h, 0);
    put16(h, kDosTime);
    put16(h, kDosDate);
    put32(h, r.crc);
    put32(h, clamp32(r.size, size64));
    put32(h, clamp32(r.size, size64));
    put16(h, static_cast<uint16_t>(r.name.size()));
    put16(h, extra);
    put16(h, 0);
    put16(h, 0);
    put16(h, 0);
    put32(h, 0);
    put32(h, clamp32(r.header_offset, offset64));
    h += r.name;
    if (extra) {
      put16(h, kZip64ExtraId);
      put16(h, static_cast<uint16_t>(extra - 4));
      if (size64) {
        put64(h, r.size);
        put64(h, r.size);
      }
      if (offset64) put64(h, r.header_offset);
    }
    out_.write(h.data(), h.size());
  }
  const uint64_t cd_size = out_.tell() - cd_offset;
  const uint64_t count = records_.size();
  const bool count64 = force_zip64_ || count >= kMax16;
  const bool size64 = force_zip64_ || cd_size >= kMax32;
  const bool offset64 = force_zip64_ || cd_offset >= kMax32;

  h.clear();
  if (count64 || size64 || offset64) {
    const uint64_t end64 = out_.tell();
    put32(h, kEnd64Sig);
    put64(h, kEnd64Size - 12);
    put16(h, kVersionZip64);
    put16(h, kVersionZip64);
    put32(h, 0);
    put32(h, 0);
    put64(h, count);
    put64(h, count);
    put64(h, cd_size);
    put64(h, cd_offset);
    put32(h, kLocator64Sig);
    put32(h, 0);
    put64(h, end64);
    put32(h, 1);
  }
  const uint16_t count16 = count64 ? kMax16 : static_cast<uint16_t>(count);
  put32(h, kEndSig);
  put16(h, 0);
  put16(h, 0);
  put16(h, count16);
  put16(h, count16);
  put32(h, clamp32(cd_size, size64));
  put32(h, clamp32(cd_offset, offset64));
  put16(h, 0);
  out_.write(h.data(), h.size());
}

}  // namespace swavg
