/*
 * The ZIP container used by torch.save and torch.jit.save (PyTorch's "inline container"): records
 * stored uncompressed, data 64-byte aligned through an extra field named "FB", ZIP64 records for
 * archives or entries past 4 GiB.
 *
 * zip_reader parses the end-of-central-directory record (and its ZIP64 locator), the central
 * directory and every local header, and checks every offset and size against the file before
 * anything is handed out. It refuses any archive that PyTorch's reader (miniz) or Python's zipfile
 * could resolve to other records than swavg does (zip.cpp lists the rules). zip_writer streams records to an atomic_file one after the other.
 */
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace swavg {

class atomic_file;

struct zip_entry {
  std::string name;
  uint64_t header_offset = 0;  // where the record's local header starts in the file
  uint64_t data_offset = 0;    // where the record's bytes start in the file
  uint64_t size = 0;           // uncompressed size
  uint64_t compressed_size = 0;
  uint16_t method = 0;         // 0 = stored
  uint32_t crc32 = 0;
};

// True when the bytes start with a ZIP local file header signature (or an end-of-central-directory
// record, as an archive without records does).
bool looks_like_zip(const uint8_t* data, size_t size);

class mapped_file;
class zip_reader {
 public:
  // Called with each byte range [begin, end) the reader has finished reading (the local headers,
  // spread all over the file), so that a caller reading through a file mapping can drop its pages.
  using done_fn = std::function<void(uint64_t begin, uint64_t end)>;

  // Parses and validates the whole directory. `context` (the file path) starts error messages.
  // Throws input_error on anything malformed (truncation, bad signatures, entries whose bytes fall
  // outside the file, duplicate names) and on anything PyTorch's reader (miniz) or Python's
  // zipfile could read differently from swavg: a second end record, bytes appended, ZIP64 records
  // that disagree, names equal ignoring ASCII case, local headers or data descriptors that
  // disagree with the directory, bytes outside every record (zip.cpp lists them all).
  zip_reader(const uint8_t* data, size_t size, std::string context, const done_fn& done_with = nullptr);

  const std::vector<zip_entry>& entries() const { return entries_; }
  // nullptr when absent. Throws input_error when a record's name matches only ignoring ASCII case
  // (miniz would take it, zipfile would not).
  const zip_entry* find(std::string_view name) const;
  // Like find, but throws input_error naming the file and record when the entry is missing or not
  // stored uncompressed (method 0 with compressed_size == size).
  const zip_entry& stored(std::string_view name) const;
  // The archive's top folder ("archive", "resnet18", ...): the part before the first '/' shared by
  // all entries. Throws input_error when the entries do not share one (or there are none).
  const std::string& root() const;
  const uint8_t* bytes(const zip_entry& e) const { return data_ + e.data_offset; }

 private:
  void index_names();
  void find_root();

  const uint8_t* data_;
  size_t size_;
  std::string context_;
  std::vector<zip_entry> entries_;
  std::vector<uint32_t> by_name_;  // entry indices sorted by name
  std::string root_;
  std::string root_error_;  // why there is no root, when root_ is empty
};

// A zip_reader over a mapped file that drops the pages of each local header once read (the headers
// are spread over the whole file, and each touch maps up to 2 MiB around it).
zip_reader read_zip(const mapped_file& file);

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
  std::vector<record> records_;
  bool open_ = false;
  bool finished_ = false;
  uint64_t written_ = 0;
  uint32_t crc_ = 0;
};

// CRC-32 (ISO-HDLC, as zip uses), continuing from `crc` (0 to start).
uint32_t crc32_update(uint32_t crc, const void* data, uint64_t size);

}  // namespace swavg
