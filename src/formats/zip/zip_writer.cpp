// zip_writer: records streamed one after the other, each 64-byte aligned through an "FB" extra
// field, then the central directory and the end records (ZIP64 where a value needs it).
#include "formats/zip/zip_writer.h"

#include <fmt/format.h>

#include <optional>
#include <string>
#include <vector>

#include "formats/zip/zip_format.h"
#include "util/atomic_file.h"
#include "util/checked.h"
#include "util/crc32.h"
#include "util/error.h"

namespace swavg {

using namespace zip_format;

namespace {

constexpr uint16_t kVersion = 20;
constexpr uint16_t kVersionZip64 = 45;
constexpr uint16_t kDosTime = 0;
constexpr uint16_t kDosDate = (1 << 5) | 1;  // 1980-01-01, the earliest date DOS can say
constexpr uint64_t kAlignment = 64;

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

// The forms of a record's headers and of the end records, shared by the writer and the planner
// (zip_archive_size), so that the two cannot disagree.
struct local_form {
  bool extra64;         // the ZIP64 extra field, with both sizes
  bool zip64;           // "version needed" 4.5
  uint64_t padding;     // of the "FB" field
  uint64_t extra_size;  // the extra fields: ZIP64's, then "FB" with its padding
  uint64_t bytes;
};

local_form local_header_form(uint64_t offset, uint64_t name_size, uint64_t size, bool force_zip64) {
  local_form f{};
  f.extra64 = force_zip64 || size >= kMax32;
  f.zip64 = f.extra64 || offset >= kMax32;
  const uint64_t unpadded = (f.extra64 ? 4 + 16 : 0) + 4;
  f.padding = (kAlignment - (offset + kLocalSize + name_size + unpadded) % kAlignment) % kAlignment;
  f.extra_size = unpadded + f.padding;
  f.bytes = kLocalSize + name_size + f.extra_size;
  return f;
}

struct central_form {
  bool size64;
  bool offset64;
  uint16_t extra;
  uint64_t bytes;
};

central_form central_entry_form(uint64_t header_offset, uint64_t name_size, uint64_t size, bool force_zip64) {
  central_form f{};
  f.size64 = force_zip64 || size >= kMax32;
  f.offset64 = force_zip64 || header_offset >= kMax32;
  f.extra = f.size64 || f.offset64 ? static_cast<uint16_t>(4 + (f.size64 ? 16 : 0) + (f.offset64 ? 8 : 0)) : 0;
  f.bytes = kCentralSize + name_size + f.extra;
  return f;
}

struct end_form {
  bool count64;
  bool size64;
  bool offset64;
  bool zip64() const { return count64 || size64 || offset64; }  // the ZIP64 end record and locator
  uint64_t bytes() const { return (zip64() ? kEnd64Size + kLocator64Size : 0) + kEndSize; }
};

end_form end_records_form(uint64_t count, uint64_t cd_size, uint64_t cd_offset, bool force_zip64) {
  return end_form{force_zip64 || count >= kMax16, force_zip64 || cd_size >= kMax32, force_zip64 || cd_offset >= kMax32};
}

}  // namespace

std::optional<uint64_t> zip_archive_size(const std::vector<zip_planned_record>& records, bool force_zip64) {
  std::optional<uint64_t> at = 0;
  std::vector<uint64_t> header_offsets;
  header_offsets.reserve(records.size());
  for (const auto& r : records) {
    header_offsets.push_back(*at);
    at = checked_add(*at, local_header_form(*at, r.name.size(), r.size, force_zip64).bytes);
    if (at) at = checked_add(*at, r.size);
    if (!at) return std::nullopt;
  }
  const uint64_t cd_offset = *at;
  for (size_t i = 0; i < records.size(); ++i) {
    at = checked_add(*at,
                     central_entry_form(header_offsets[i], records[i].name.size(), records[i].size, force_zip64).bytes);
    if (!at) return std::nullopt;
  }
  const uint64_t cd_size = *at - cd_offset;
  return checked_add(*at, end_records_form(records.size(), cd_size, cd_offset, force_zip64).bytes());
}

zip_writer::zip_writer(atomic_file& out, bool force_zip64) : out_(out), force_zip64_(force_zip64), base_(out.tell()) {}

void zip_writer::fail(const std::string& what) const {
  throw error(exit_code::internal, fmt::format("{}: zip writer: {}", out_.target(), what));
}

void zip_writer::write_local_header(const std::string& name, uint64_t size, uint32_t crc) {
  if (finished_) fail(fmt::format("record {} added after finish()", quoted(name)));
  if (open_) fail(fmt::format("record {} started while {} is open", quoted(name), quoted(records_.back().name)));
  if (name.empty() || name.size() > kMax16)
    fail(fmt::format("record name of {} bytes (must be 1 to 65535)", name.size()));

  const uint64_t offset = out_.tell() - base_;
  const local_form f = local_header_form(offset, name.size(), size, force_zip64_);

  std::string h;
  h.reserve(f.bytes);
  put32(h, kLocalSig);
  put16(h, f.zip64 ? kVersionZip64 : kVersion);
  put16(h, is_ascii(name) ? 0 : kFlagUtf8);
  put16(h, 0);
  put16(h, kDosTime);
  put16(h, kDosDate);
  put32(h, crc);
  put32(h, clamp32(size, f.extra64));
  put32(h, clamp32(size, f.extra64));
  put16(h, static_cast<uint16_t>(name.size()));
  put16(h, static_cast<uint16_t>(f.extra_size));
  h += name;
  if (f.extra64) {
    put16(h, kZip64ExtraId);
    put16(h, 16);
    put64(h, size);
    put64(h, size);
  }
  h += "FB";
  put16(h, static_cast<uint16_t>(f.padding));
  h.append(f.padding, 'Z');
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
  out_.pwrite(crc, 4, base_ + r.header_offset + 14);
  r.crc = crc_;
  open_ = false;
}

void zip_writer::finish() {
  if (finished_) fail("finish() called twice");
  if (open_) fail(fmt::format("finish() while record {} is open", quoted(records_.back().name)));
  finished_ = true;

  const uint64_t cd_offset = out_.tell() - base_;
  std::string h;
  for (const record& r : records_) {
    const central_form f = central_entry_form(r.header_offset, r.name.size(), r.size, force_zip64_);
    const uint16_t version = f.extra ? kVersionZip64 : kVersion;
    h.clear();
    put32(h, kCentralSig);
    put16(h, version);
    put16(h, version);
    put16(h, is_ascii(r.name) ? 0 : kFlagUtf8);
    put16(h, 0);
    put16(h, kDosTime);
    put16(h, kDosDate);
    put32(h, r.crc);
    put32(h, clamp32(r.size, f.size64));
    put32(h, clamp32(r.size, f.size64));
    put16(h, static_cast<uint16_t>(r.name.size()));
    put16(h, f.extra);
    put16(h, 0);
    put16(h, 0);
    put16(h, 0);
    put32(h, 0);
    put32(h, clamp32(r.header_offset, f.offset64));
    h += r.name;
    if (f.extra) {
      put16(h, kZip64ExtraId);
      put16(h, static_cast<uint16_t>(f.extra - 4));
      if (f.size64) {
        put64(h, r.size);
        put64(h, r.size);
      }
      if (f.offset64) put64(h, r.header_offset);
    }
    out_.write(h.data(), h.size());
  }
  const uint64_t cd_size = out_.tell() - base_ - cd_offset;
  const uint64_t count = records_.size();
  const end_form e = end_records_form(count, cd_size, cd_offset, force_zip64_);

  h.clear();
  if (e.zip64()) {
    const uint64_t end64 = out_.tell() - base_;
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
  const uint16_t count16 = e.count64 ? kMax16 : static_cast<uint16_t>(count);
  put32(h, kEndSig);
  put16(h, 0);
  put16(h, 0);
  put16(h, count16);
  put16(h, count16);
  put32(h, clamp32(cd_size, e.size64));
  put32(h, clamp32(cd_offset, e.offset64));
  put16(h, 0);
  out_.write(h.data(), h.size());
}

}  // namespace swavg
