/*
 * The pickle opcodes (protocol 2) that torch.save uses and that torch.load's full and weights_only
 * unpicklers (1.13 and 2.x) accept, appended to a byte string: the writer side of formats/pickle/pickle.h,
 * shared by the torch.save writer (torch_writer.cpp) and DCP's `.metadata` (dcp_output.cpp).
 * Header only: small inline emitters, no memo of its own (put/get are the caller's).
 */
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "formats/pickle/pickle_opcodes.h"

namespace swavg {

class pickle_emitter {
 public:
  static constexpr uint8_t kProtocol = 2;
  std::string bytes;

  void proto() {
    op(pickle_op::kProto);
    bytes += static_cast<char>(kProtocol);
  }
  void stop() { op(pickle_op::kStop); }
  void mark() { op(pickle_op::kMark); }
  void global(const std::string& module, const std::string& name) {
    op(pickle_op::kGlobal);
    bytes += module;
    bytes += '\n';
    bytes += name;
    bytes += '\n';
  }
  void empty_tuple() { op(pickle_op::kEmptyTuple); }
  void tuple_from_mark() { op(pickle_op::kTuple); }
  void reduce() { op(pickle_op::kReduce); }
  void setitems() { op(pickle_op::kSetItems); }
  void binpersid() { op(pickle_op::kBinPersId); }
  void boolean(bool v) { op(v ? pickle_op::kNewTrue : pickle_op::kNewFalse); }
  void string(const std::string& s) {
    op(pickle_op::kBinUnicode);
    append_le(static_cast<uint32_t>(s.size()));
    bytes += s;
  }
  void integer(int64_t v) {
    if (v >= 0 && v < 256) {
      op(pickle_op::kBinInt1);
      bytes += static_cast<char>(v);
    } else if (v >= 0 && v < 65536) {
      op(pickle_op::kBinInt2);
      append_le(static_cast<uint16_t>(v));
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
      op(pickle_op::kBinInt);
      append_le(static_cast<int32_t>(v));
    } else {
      op(pickle_op::kLong1);
      bytes += static_cast<char>(sizeof v);  // 8 bytes, two's complement
      append_le(v);
    }
  }
  void int_tuple(const std::vector<int64_t>& values) {
    mark();
    for (int64_t v : values) integer(v);
    tuple_from_mark();
  }
  void empty_ordered_dict() {
    global("collections", "OrderedDict");
    empty_tuple();
    reduce();
  }
  void none() { op(pickle_op::kNone); }
  void floating(double v) {
    uint64_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    op(pickle_op::kBinFloat);
    for (int shift = 56; shift >= 0; shift -= 8) bytes += static_cast<char>(bits >> shift);  // big-endian
  }
  // An integer given as its little-endian two's complement bytes.
  void long_bytes(const std::string& le) {
    if (le.size() < 256) {
      op(pickle_op::kLong1);
      bytes += static_cast<char>(le.size());
    } else {
      op(pickle_op::kLong4);
      append_le(static_cast<int32_t>(le.size()));
    }
    bytes += le;
  }
  // Protocol 2 writes bytes as _codecs.encode(<the bytes as latin-1 text>, 'latin1').
  void byte_string(const std::string& raw) {
    if (raw.empty()) {
      global("builtins", "bytes");
      empty_tuple();
      reduce();
      return;
    }
    std::string text;
    for (unsigned char c : raw) {
      if (c < 0x80) {
        text += static_cast<char>(c);
      } else {
        text += static_cast<char>(0xc0 | (c >> 6));
        text += static_cast<char>(0x80 | (c & 0x3f));
      }
    }
    global("_codecs", "encode");
    string(text);
    string("latin1");
    op(pickle_op::kTuple2);
    reduce();
  }
  void plain(pickle_op::opcode o) { op(o); }
  void put(uint32_t i) {
    if (i < 256) {
      op(pickle_op::kBinPut);
      bytes += static_cast<char>(i);
    } else {
      op(pickle_op::kLongBinPut);
      append_le(i);
    }
  }
  void get(uint32_t i) {
    if (i < 256) {
      op(pickle_op::kBinGet);
      bytes += static_cast<char>(i);
    } else {
      op(pickle_op::kLongBinGet);
      append_le(i);
    }
  }

 private:
  void op(pickle_op::opcode o) { bytes += static_cast<char>(o); }
  template <typename T>
  void append_le(T v) {
    bytes.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
};

}  // namespace swavg
