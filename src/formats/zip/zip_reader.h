/*
 * Reading the ZIP container used by torch.save and torch.jit.save (PyTorch's "inline container"):
 * records stored uncompressed, data 64-byte aligned through an extra field named "FB", ZIP64 records
 * for archives or entries past 4 GiB.
 *
 * zip_reader parses the end-of-central-directory record (and its ZIP64 locator), the central
 * directory and every local header, and checks every offset and size against the file before
 * anything is handed out. It refuses any archive that PyTorch's reader (miniz) or Python's zipfile
 * could resolve to other records than swavg does (zip_reader.cpp lists the rules).
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace swavg {

struct zip_entry {
  std::string name;
  uint64_t header_offset = 0;  // where the record's local header starts in the file
  uint64_t data_offset = 0;    // where the record's bytes start in the file
  uint64_t size = 0;           // uncompressed size
  uint64_t compressed_size = 0;
  uint16_t method = 0;  // 0 = stored
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
  // disagree with the directory, bytes outside every record (zip_reader.cpp lists them all).
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

}  // namespace swavg
