/*
 * Reader for the legacy torch.save format (PyTorch < 1.6, or torch.save(...,
 * _use_new_zipfile_serialization=False) in any version): five pickles one after the other, then the
 * storages' bytes:
 *   1. the magic number 0x1950a86a20f9469cfc6c     2. the protocol version 1001
 *   3. system information (a dict torch.load ignores)
 *   4. the object, storages as persistent ids ('storage', <X>Storage, key, location, numel, None)
 *   5. the list of storage keys, in the order their bytes follow
 *   then per listed key: an 8-byte little-endian element count and count x itemsize raw bytes,
 *   itemsize being that of the dtype the object's first reference to the key gives it.
 *
 * Each pickle goes through the allow-list unpickler; the object's state dict is chosen and checked
 * as for the ZIP format (formats/torch/torch_file.h) and its tensors are views into the mapped file at
 * their storage's offset. Before any view is handed out: the magic number and the protocol version
 * are what torch.load requires; the key list holds each key once, every key the object uses and no
 * other; each count is the element count the object declares; every storage lies inside the file;
 * and the file ends where the last storage does.
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "tensor/state_dict.h"

namespace swavg {

class mapped_file;

// True when the bytes start as a pickle does (a protocol 2-5 header, or the magic number in the
// text form protocols 0 and 1 write): a legacy torch.save file or a file to be refused as one.
bool looks_like_legacy_torch_file(const uint8_t* data, size_t size);

// Reads a legacy torch.save file; `key` as for read_torch_file. Throws input_error naming the file,
// the pickle or storage and expected vs found.
state_dict read_legacy_torch_file(const std::shared_ptr<const mapped_file>& file, const std::string& key);

}  // namespace swavg
