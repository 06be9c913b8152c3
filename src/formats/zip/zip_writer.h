/*
 * Writing the ZIP container of torch.save (PyTorch's "inline container"): zip_writer streams records
 * to an atomic_file one after the other, stored uncompressed, each record's data 64-byte aligned
 * through an extra field named "FB", ZIP64 records for archives or entries past 4 GiB. The archive
 * starts where `out` stands when the writer is made (offsets and alignment count from there), so
 * several archives can follow one another in one file, as DCP's .distcp files hold them.
 */
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace swavg {

class atomic_file;

class zip_writer {
 public:
  // force_zip64 writes every record and the end record in ZIP64 form, as if each were past 4 GiB
  // (for tests: the ZIP64 paths without writing 4 GiB).
  explicit zip_writer(atomic_file& out, bool force_zip64 = false);

  // Writes a whole record.
  void add(const std::string& name, const void* data, uint64_t size);
  // Streams a record of exactly `size` bytes through write(); end_record() checks the count and
  // patches the CRC into the local header.
  void begin_record(const std::string& name, uint64_t size);
  void write(const void* data, uint64_t size);
  void end_record();
  // Writes the central directory (ZIP64 when needed) and the end record. The caller then commits
  // the atomic_file.
  void finish();

 private:
  void write_local_header(const std::string& name, uint64_t size, uint32_t crc);
  [[noreturn]] void fail(const std::string& what) const;

  struct record {
    std::string name;
    uint64_t header_offset;
    uint64_t size;
    uint32_t crc;
  };
  atomic_file& out_;
  bool force_zip64_;
  uint64_t base_;  // where the archive starts in `out_`
  std::vector<record> records_;
  bool open_ = false;
  bool finished_ = false;
  uint64_t written_ = 0;
  uint32_t crc_ = 0;
};

// A record of an archive planned before it is written.
struct zip_planned_record {
  std::string name;
  uint64_t size = 0;
};
// The bytes a zip_writer (with `force_zip64`) writes for an archive of `records` in this order, from
// the first local header to the end record: what tell() has advanced once finish() returns, ZIP64
// extras, alignment and end records included. nullopt past 2^64 bytes.
std::optional<uint64_t> zip_archive_size(const std::vector<zip_planned_record>& records, bool force_zip64 = false);

}  // namespace swavg
