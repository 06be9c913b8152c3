#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "formats/pickle/pickle.h"
#include "formats/pickle/unpickler.h"
#include "util/error.h"

using namespace swavg;
using namespace std::string_literals;
using json = nlohmann::json;

namespace {

const std::string kPickles = std::string(SWAVG_FIXTURES_DIR) + "/pickles/";
const std::string kContext = "test.pt: archive/data.pkl";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path + " (run scripts/make_fixtures.py first)");
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::unique_ptr<pickle_document> parse(const std::string& data, const unpickle_limits& limits = {}) {
  return unpickle(reinterpret_cast<const uint8_t*>(data.data()), data.size(), kContext, limits);
}

// The message of the input_error that parsing `data` throws ("" when it parses).
std::string parse_error(const std::string& data, const unpickle_limits& limits = {}) {
  try {
    parse(data, limits);
  } catch (const input_error& e) {
    return e.what();
  }
  return "";
}

std::string escape(const std::string& s) {
  std::string out;
  char buf[8];
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
      out += static_cast<char>(c);
    } else {
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  return out;
}

// Decimal text of a little-endian two's complement integer.
std::string big_decimal(std::string le) {
  const bool negative = !le.empty() && (static_cast<unsigned char>(le.back()) & 0x80);
  if (negative) {
    unsigned carry = 1;
    for (char& c : le) {
      const unsigned t = static_cast<unsigned char>(~static_cast<unsigned char>(c)) + carry;
      c = static_cast<char>(t & 0xff);
      carry = t >> 8;
    }
  }
  std::vector<uint8_t> bytes(le.rbegin(), le.rend());  // most significant first
  std::string digits;
  while (std::any_of(bytes.begin(), bytes.end(), [](uint8_t b) { return b != 0; })) {
    unsigned rem = 0;
    for (uint8_t& b : bytes) {
      const unsigned cur = rem * 256 + b;
      b = static_cast<uint8_t>(cur / 10);
      rem = cur % 10;
    }
    digits += static_cast<char>('0' + rem);
  }
  if (digits.empty()) digits = "0";
  if (negative) digits += '-';
  return std::string(digits.rbegin(), digits.rend());
}

std::string join_ints(const std::vector<int64_t>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? "," : "") + std::to_string(v[i]);
  return out;
}

// The canonical rendering that scripts/fixtures/pickles.py describes.
struct renderer {
  std::set<const pickle_node*> active;

  std::string seq(const std::vector<pickle_node*>& items) {
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + render(items[i]);
    return out;
  }

  std::string entries(const pickle_node* d) {
    std::string out = "{";
    for (size_t i = 0; i < d->entries.size(); ++i)
      out += (i ? ", " : "") + render(d->entries[i].first) + ": " + render(d->entries[i].second);
    return out + "}";
  }

  std::string render(const pickle_node* n) {
    char buf[64];
    switch (n->kind) {
      case pickle_kind::none: return "None";
      case pickle_kind::boolean: return n->bool_value ? "True" : "False";
      case pickle_kind::integer: return std::to_string(n->int_value);
      case pickle_kind::big_integer: return big_decimal(n->text);
      case pickle_kind::floating: std::snprintf(buf, sizeof buf, "float:%.17g", n->float_value); return buf;
      case pickle_kind::string: return "\"" + escape(n->text) + "\"";
      case pickle_kind::bytes: return "b\"" + escape(n->text) + "\"";
      case pickle_kind::global: return "global:" + n->text;
      case pickle_kind::opaque: return "opaque:" + n->text;
      case pickle_kind::storage: return "storage:" + n->storage->key;
      case pickle_kind::tensor: {
        const pickle_tensor_ref& t = *n->tensor;
        return "tensor:"s + dtype_name(t.storage.type) + ":[" + join_ints(t.shape) + "]:[" + join_ints(t.strides) +
               "]:" + std::to_string(t.offset) + ":\"" + t.storage.key + "\":" + t.storage.location + ":" +
               std::to_string(t.storage.numel) + ":" + (t.requires_grad ? "1" : "0") + ":" +
               (t.is_parameter ? "1" : "0");
      }
      default: break;
    }
    if (!active.insert(n).second) return "<cycle>";
    std::string out;
    switch (n->kind) {
      case pickle_kind::list: out = "[" + seq(n->items) + "]"; break;
      case pickle_kind::tuple: out = "(" + seq(n->items) + ")"; break;
      case pickle_kind::set: {
        std::vector<std::string> parts;
        for (const pickle_node* x : n->items) parts.push_back(render(x));
        std::sort(parts.begin(), parts.end());
        out = "set{";
        for (size_t i = 0; i < parts.size(); ++i) out += (i ? ", " : "") + parts[i];
        out += "}";
        break;
      }
      case pickle_kind::dict:
        out = (n->ordered ? "OrderedDict" : "") + entries(n);
        if (n->attributes) out += "@" + entries(n->attributes);
        break;
      default: out = "?";
    }
    active.erase(n);
    return out;
  }
};

std::string render(const pickle_node* n) { return renderer().render(n); }

const pickle_node* entry(const pickle_node* dict, const std::string& key) {
  for (const auto& [k, v] : dict->entries)
    if (k->kind == pickle_kind::string && k->text == key) return v;
  return nullptr;
}

std::string binunicode(const std::string& s) {
  std::string out = "X";
  const uint32_t n = static_cast<uint32_t>(s.size());
  for (int i = 0; i < 4; ++i) out += static_cast<char>((n >> (8 * i)) & 0xff);
  return out + s;
}

// A torch.save-style tensor: _rebuild_tensor_v2(storage("0", float), offset, size, stride, False, OrderedDict()).
std::string storage_pid(const std::string& cls = "FloatStorage") {
  return "(" + binunicode("storage") + "ctorch\n" + cls + "\n" + binunicode("0") + binunicode("cpu") + "K\x06tQ";
}

}  // namespace

TEST_CASE("Python's own pickles parse to the values Python wrote", "[pickle][fixtures]") {
  const json expected = json::parse(read_file(kPickles + "expected.json"));
  REQUIRE(expected.size() > 50);
  for (const auto& e : expected) {
    const std::string file = e.at("file");
    INFO(file);
    auto doc = parse(read_file(kPickles + file));
    REQUIRE(doc->root());
    CHECK(render(doc->root()) == e.at("render").get<std::string>());
    const std::set<std::string> opaque(doc->opaque_globals().begin(), doc->opaque_globals().end());
    CHECK(opaque == e.at("opaque").get<std::set<std::string>>());
    CHECK(opaque.size() == doc->opaque_globals().size());
  }
}

TEST_CASE("memo sharing keeps one node per shared object", "[pickle][fixtures]") {
  for (int proto : {0, 2, 4, 5}) {
    INFO("protocol " << proto);
    auto doc = parse(read_file(kPickles + "memo.p" + std::to_string(proto) + ".pkl"));
    const pickle_node* root = doc->root();
    REQUIRE(root->kind == pickle_kind::dict);
    const pickle_node* a = entry(root, "a");
    const pickle_node* t = entry(root, "t");
    REQUIRE(a);
    CHECK(a == entry(root, "b"));
    REQUIRE(t->items.size() == 2);
    CHECK(t->items[0] == a);
    CHECK(t->items[1] == a);
    const pickle_node* list = entry(root, "list");
    CHECK(list->items.at(1) == list);
    const pickle_node* d = entry(root, "dict");
    CHECK(entry(d, "self") == d);
    const pickle_node* tuple = entry(root, "tuple");
    CHECK(tuple->items.at(0)->items.at(0) == tuple);
  }
}

TEST_CASE("torch.save's data.pkl gives tensors, storages and _metadata", "[pickle][fixtures]") {
  auto doc = parse(read_file(kPickles + "torch_state.pkl"));
  const pickle_node* root = doc->root();
  REQUIRE(root->kind == pickle_kind::dict);
  CHECK(root->ordered);
  CHECK(pickle_type_name(*root) == "OrderedDict");
  CHECK(doc->opaque_globals().empty());
  REQUIRE(root->attributes);
  const pickle_node* metadata = entry(root->attributes, "_metadata");
  REQUIRE(metadata);
  CHECK(metadata->ordered);
  const pickle_node* version = entry(entry(metadata, "lin"), "version");
  REQUIRE(version);
  CHECK(version->int_value == 1);

  const pickle_node* w = entry(root, "lin.weight");
  REQUIRE(w->kind == pickle_kind::tensor);
  CHECK(pickle_type_name(*w) == "tensor");
  CHECK(w->tensor->storage.type == dtype::float32);
  CHECK(w->tensor->shape == std::vector<int64_t>{2, 3});
  CHECK(w->tensor->strides == std::vector<int64_t>{3, 1});
  CHECK(entry(root, "bf16")->tensor->storage.type == dtype::bfloat16);
  CHECK(entry(root, "flag")->tensor->storage.type == dtype::bool_);
  CHECK(entry(root, "c64")->tensor->storage.type == dtype::complex64);
  CHECK(entry(root, "tied.a")->tensor->storage.key == entry(root, "tied.b")->tensor->storage.key);
  CHECK(entry(root, "row")->tensor->offset == 3);
  CHECK(entry(root, "param")->tensor->is_parameter);
  CHECK(entry(root, "param")->tensor->requires_grad);
  CHECK(entry(root, "grad")->tensor->requires_grad);
  CHECK_FALSE(entry(root, "grad")->tensor->is_parameter);
}

TEST_CASE("pickle_type_name names every kind", "[pickle]") {
  auto doc = parse("\x80\x02(NI01\nK\x01\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x01G?\xf0\x00\x00\x00\x00\x00\x00"s +
                   binunicode("s") + "C\x01x])\x8f}cargparse\nNamespace\n)\x81" + "cos\nsep\nl."s);
  const std::vector<std::string> want = {"None",  "bool", "int",   "int", "float", "str",
                                         "bytes", "list", "tuple", "set", "dict",  "argparse.Namespace",
                                         "global"};
  const pickle_node* root = doc->root();
  REQUIRE(root->kind == pickle_kind::list);
  REQUIRE(root->items.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) CHECK(pickle_type_name(*root->items[i]) == want[i]);
  CHECK(root->items[3]->kind == pickle_kind::big_integer);
}

TEST_CASE("dangerous callables become opaque and are never run", "[pickle][hostile]") {
  const std::string marker = "/tmp/swavg_pickle_pwned_" + std::to_string(getpid());
  std::remove(marker.c_str());
  const std::string cmd = "touch " + marker;
  struct named {
    const char* name;
    std::string data;
  };
  const std::vector<named> cases = {
      {"os.system", "cos\nsystem\n(S'" + cmd + "'\ntR."},
      {"posix.system", "cposix\nsystem\n(S'" + cmd + "'\ntR."},
      {"builtins.eval", "cbuiltins\neval\n(S'__import__(\"os\").system(\"" + cmd + "\")'\ntR."},
      {"os.system", "\x80\x04\x8c\x02os\x8c\x06system\x93" + binunicode(cmd) + "\x85R."},
      {"subprocess.Popen",
       "\x80\x02"
       "csubprocess\nPopen\n" +
           binunicode(cmd) + "\x85\x81."},
      {"os.system", "(cos\nsystem\n" + binunicode(cmd) + "o."},
      {"os.system", "(" + binunicode(cmd) + "ios\nsystem\n."},
  };
  for (const auto& c : cases) {
    INFO(c.name);
    auto doc = parse(c.data);
    REQUIRE(doc->root()->kind == pickle_kind::opaque);
    CHECK(doc->root()->text == c.name);
    CHECK(pickle_type_name(*doc->root()) == c.name);
    CHECK(doc->opaque_globals() == std::vector<std::string>{c.name});
  }
  CHECK(access(marker.c_str(), F_OK) != 0);

  // Items, state and calls on opaque objects are kept as data, never acted on.
  auto doc = parse(
      "\x80\x02"
      "cos\nsystem\n)R(K\x01"
      "eK\x02"
      "a}"
      "b(K\x03K\x04u)R."s);
  const pickle_node* root = doc->root();
  REQUIRE(root->kind == pickle_kind::opaque);
  CHECK(doc->opaque_globals() == std::vector<std::string>{"os.system"});
  REQUIRE(root->call);
  CHECK(root->call->args.empty());
  CHECK_FALSE(root->call->constructed);
  const pickle_node* inner = root->call->callee;
  REQUIRE(inner->kind == pickle_kind::opaque);
  REQUIRE(inner->call);
  CHECK(inner->call->callee->kind == pickle_kind::global);
  CHECK(inner->call->callee->text == "os.system");
  REQUIRE(inner->items.size() == 2);
  CHECK(inner->items[0]->int_value == 1);
  CHECK(inner->items[1]->int_value == 2);
  REQUIRE(inner->call->state);
  CHECK(inner->call->state->kind == pickle_kind::dict);
  REQUIRE(inner->entries.size() == 1);
  CHECK(inner->entries[0].first->int_value == 3);
  CHECK(inner->entries[0].second->int_value == 4);

  // NEWOBJ marks the object as constructed, as TorchScript writes its __torch__.* modules.
  auto ts = parse(
      "\x80\x02"
      "c__torch__\nNet\n)\x81}X\x01\x00\x00\x00"
      "aK\x05sb."s);
  REQUIRE(ts->root()->call);
  CHECK(ts->root()->call->constructed);
  REQUIRE(ts->root()->call->state);
  CHECK(ts->root()->call->state->entries.size() == 1);
}

TEST_CASE("malformed pickles are input errors with the offset and opcode", "[pickle][hostile]") {
  CHECK(parse_error("\x80\x02R.") == kContext + ": at byte 2: opcode REDUCE (0x52): stack underflow");
  CHECK(parse_error("\x80\x02h\x05.") == kContext + ": at byte 2: opcode BINGET (0x68): memo key 5 not found");
  CHECK(parse_error("\x80\x02N\xff.") == kContext + ": at byte 3: unknown opcode 0xff");
  CHECK(parse_error("\x80\x02" + "X\x10\x00\x00\x00"s + "ab") ==
        kContext + ": at byte 2: opcode BINUNICODE (0x58): unexpected end of data");
  CHECK(parse_error("\x80\x02N") == kContext + ": at byte 3: data ends without STOP");
  CHECK(parse_error("") == kContext + ": at byte 0: data ends without STOP");
  CHECK(parse_error("\x80\x02]N"
                    "e.") == kContext + ": at byte 4: opcode APPENDS (0x65): MARK missing");

  const std::vector<std::string> bad = {
      "\x80\x04\x8d\xff\xff\xff\xff\xff\xff\xff\xff.",   // BINUNICODE8 of 2^64 - 1 bytes
      "\x80\x04\x8d\x00\x00\x00\x00\x00\x00\x00\x80."s,  // BINUNICODE8 of 2^63 bytes
      "\x80\x04\x8e\xf0\xff\xff\xff\xff\xff\xff\x7f.",   // BINBYTES8
      "\x80\x05\x96\xff\xff\xff\xff\xff\xff\xff\xff.",   // BYTEARRAY8
      "\x80\x02X\xff\xff\xff\xff.",                      // BINUNICODE
      "\x80\x02\x8b\xff\xff\xff\xff.",                   // LONG4 with a negative length
      "\x80\x02\x8b\xff\xff\xff\x7f.",                   // LONG4 past the end
      "\x80\x02T\xff\xff\xff\xff.",                      // BINSTRING with a negative length
      "\x80\x02j\xff\xff\xff\xff.",                      // LONG_BINGET of a missing key
      "\x80\x02q\x00."s,                                 // BINPUT with an empty stack
      "\x80\x06N.",                                      // protocol 6
      "\x80\x02\x82\x01.",                               // EXT1
      "\x80\x05\x97.",                                   // NEXT_BUFFER
      "\x80\x05N\x98.",                                  // READONLY_BUFFER
      "\x80\x02}N"
      "a.",  // APPEND to a dict
      "\x80\x02]NN"
      "s.",  // SETITEM on a list
      "\x80\x02(N"
      "d.",                   // DICT with an odd count
      "\x80\x02)(N\x90.",     // ADDITEMS to a tuple
      "\x80\x02NN\x52.",      // REDUCE with args that are not a tuple
      "\x80\x02K\x01)\x52.",  // calling an int
      "\x80\x02(\x85.",       // TUPLE1 across a MARK
      "\x80\x02("
      ".",                                    // STOP with only a MARK
      "I12x\n.",                              // bad INT
      "I" + std::string(5000, '9') + "\n.",   // INT too long
      "F1.5x\n.",                             // bad FLOAT
      "S'abc\n.",                             // unquoted STRING
      "S'ab\\x4'\n.",                         // bad \x escape
      "V\\u12\n.",                            // truncated \u escape
      "V\\U00110000\n.",                      // \U out of range
      "Vabc",                                 // unterminated line
      "g-1\n.",                               // negative memo index
      "c\nsystem\n.",                         // empty module
      "cos\nsys\x01tem\n.",                   // control character in a name
      "\x80\x02X\x02\x00\x00\x00\xc3\x28."s,  // invalid UTF-8
      "\x80\x04\x8c\x02osK\x01\x93.",         // STACK_GLOBAL with an int
      "\x80\x02"
      "ctorch._utils\n_rebuild_tensor_v2\n(NK\x00)))\x89)tR."s,  // storage is None
  };
  for (const auto& data : bad) {
    INFO(escape(data));
    const std::string m = parse_error(data);
    CHECK(m.rfind(kContext + ": at byte ", 0) == 0);
  }
}

TEST_CASE("persistent ids other than storages are rejected", "[pickle][hostile]") {
  CHECK(parse_error("\x80\x02" + binunicode("abc") + "Q.") ==
        kContext + ": at byte 10: opcode BINPERSID (0x51): persistent id is not a storage: str 'abc'");
  CHECK(parse_error("Pxyz\n.") ==
        kContext + ": at byte 0: opcode PERSID (0x50): persistent id is not a storage: str 'xyz'");
  CHECK(parse_error("\x80\x02)Q.").find("persistent id is not a storage: tuple") != std::string::npos);
  // Wrong tag, a storage class that is not torch's, an unknown storage type, bad fields.
  const std::vector<std::string> bad = {
      "\x80\x02(" + binunicode("storagE") + "ctorch\nFloatStorage\n" + binunicode("0") + binunicode("cpu") + "K\x06tQ.",
      "\x80\x02(" + binunicode("storage") + "cos\nFloatStorage\n" + binunicode("0") + binunicode("cpu") + "K\x06tQ.",
      "\x80\x02" + storage_pid("FooStorage") + ".",
      "\x80\x02(" + binunicode("storage") + "ctorch\nFloatStorage\nK\x00"s + binunicode("cpu") + "K\x06tQ.",
      "\x80\x02(" + binunicode("storage") + "ctorch\nFloatStorage\n" + binunicode("0") + binunicode("cpu") +
          "J\xff\xff\xff\xfftQ.",
      "\x80\x02(" + binunicode("storage") + "ctorch\nFloatStorage\n" + binunicode("0") + binunicode("cpu") + "tQ.",
  };
  for (const auto& data : bad) {
    INFO(escape(data));
    CHECK(parse_error(data).find("BINPERSID (0x51)") != std::string::npos);
  }
}

TEST_CASE("tensor rebuilds check their arguments", "[pickle]") {
  const std::string v2 =
      "\x80\x02"
      "ctorch._utils\n_rebuild_tensor_v2\n(" +
      storage_pid();
  auto doc = parse(v2 +
                   "K\x02K\x02K\x02\x86K\x01K\x02\x86\x88"
                   "ccollections\nOrderedDict\n)RtR.");
  const pickle_node* t = doc->root();
  REQUIRE(t->kind == pickle_kind::tensor);
  CHECK(t->tensor->offset == 2);
  CHECK(t->tensor->shape == std::vector<int64_t>{2, 2});
  CHECK(t->tensor->strides == std::vector<int64_t>{1, 2});
  CHECK(t->tensor->requires_grad);
  CHECK(t->tensor->storage.numel == 6);
  CHECK(t->tensor->storage.location == "cpu");
  CHECK(t->tensor->storage.type == dtype::float32);

  // The legacy four-argument form, and a parameter with state.
  doc = parse(
      "\x80\x02"
      "ctorch._utils\n_rebuild_tensor\n(" +
      storage_pid("HalfStorage") + "K\x00K\x06\x85K\x01\x85tR."s);
  REQUIRE(doc->root()->kind == pickle_kind::tensor);
  CHECK(doc->root()->tensor->storage.type == dtype::float16);
  doc = parse(
      "\x80\x02"
      "ctorch._utils\n_rebuild_parameter_with_state\n("
      "ctorch._utils\n_rebuild_tensor\n(" +
      storage_pid("LongStorage") + "K\x00))tR\x89}}tR."s);
  REQUIRE(doc->root()->kind == pickle_kind::tensor);
  CHECK(doc->root()->tensor->is_parameter);
  CHECK_FALSE(doc->root()->tensor->requires_grad);
  CHECK(doc->root()->tensor->shape.empty());
  CHECK(doc->root()->tensor->storage.type == dtype::int64);

  const std::vector<std::string> bad = {
      v2 + "K\x00NK\x01\x85\x89NtR."s,                      // size is None
      v2 + "K\x00K\x02\x85NN\x89NtR."s,                     // stride is None
      v2 + "K\x00K\x02\x85K\x01K\x01\x86\x89NtR."s,         // size and stride differ in length
      v2 + "J\xff\xff\xff\xffK\x02\x85K\x01\x85\x89NtR.",   // negative offset
      v2 + "K\x00J\xff\xff\xff\xff\x85K\x01\x85\x89NtR."s,  // negative size
      v2 + "K\x00X\x01\x00\x00\x00"s
           "a\x85K\x01\x85\x89NtR.",         // size of str
      v2 + "K\x00K\x02\x85K\x01\x85NNtR."s,  // requires_grad is None
      v2 + "K\x00K\x02\x85K\x01\x85tR."s,    // too few arguments
      "\x80\x02"
      "ctorch._utils\n_rebuild_parameter\n(N\x88NtR.",  // data is not a tensor
  };
  for (const auto& data : bad) {
    INFO(escape(data));
    CHECK(parse_error(data).find("opcode REDUCE (0x52)") != std::string::npos);
  }
}

TEST_CASE("_rebuild_tensor_v3 takes its dtype from the torch global it names", "[pickle]") {
  // As torch 2.14's torch.save writes a uint16 view: an UntypedStorage of 24 bytes, offset 3 (in
  // uint16 elements), the dtype last.
  const std::string head =
      "\x80\x02"
      "ctorch._utils\n_rebuild_tensor_v3\n(" +
      "("s + binunicode("storage") + "ctorch.storage\nUntypedStorage\n" + binunicode("0") + binunicode("cpu") +
      "K\x18tQ" +
      "K\x03K\x05K\x01\x86K\x02K\x01\x86\x89"
      "ccollections\nOrderedDict\n)R";
  for (const auto& [name, type] :
       std::vector<std::pair<std::string, dtype>>{{"uint16", dtype::uint16},
                                                  {"uint64", dtype::uint64},
                                                  {"float8_e4m3fn", dtype::float8_e4m3fn},
                                                  {"float8_e8m0fnu", dtype::float8_e8m0fnu},
                                                  {"float4_e2m1fn_x2", dtype::float4_e2m1fn_x2},
                                                  {"bits4x2", dtype::bits4x2},
                                                  {"float32", dtype::float32}}) {
    INFO(name);
    auto doc = parse(head + "ctorch\n" + name + "\ntR.");
    const pickle_node* t = doc->root();
    REQUIRE(t->kind == pickle_kind::tensor);
    CHECK(t->tensor->type == type);
    CHECK(t->tensor->storage.type == dtype::uint8);
    CHECK(t->tensor->storage.untyped);
    CHECK(t->tensor->storage.numel == 24);
    CHECK(t->tensor->offset == 3);
    CHECK(t->tensor->shape == std::vector<int64_t>{5, 1});
    CHECK(t->tensor->strides == std::vector<int64_t>{2, 1});
    CHECK(storage_class_of(t->tensor->storage) == "UntypedStorage"s);
  }
  // metadata, the optional eighth argument
  CHECK(parse(head + "ctorch\nuint32\n}tR.")->root()->tensor->type == dtype::uint32);
  CHECK(parse_error(head + "ctorch\nint4\ntR.").find("tensor dtype torch.int4 is not one torch.save writes") !=
        std::string::npos);
  CHECK(parse_error(head + "cos\nsystem\ntR.").find("tensor dtype os.system is not one torch.save writes") !=
        std::string::npos);
  CHECK(parse_error(head + binunicode("float32") + "tR.").find("tensor dtype is str, not a torch dtype") !=
        std::string::npos);
  CHECK(parse_error(head + "tR.").find("tensor rebuild takes 7 arguments, got 6") != std::string::npos);
  CHECK(parse_error(head + "ctorch\nuint32\n}}tR.").find("tensor rebuild takes 7 arguments, got 9") !=
        std::string::npos);
}

TEST_CASE("containers follow Python's semantics", "[pickle]") {
  // Duplicate keys keep the first position and the last value; True == 1 == 1.0.
  auto doc = parse("\x80\x02}(" + binunicode("a") + "K\x01" + binunicode("b") + "K\x02" + binunicode("a") +
                   "K\x03\x88K\x04K\x01K\x05G?\xf0\x00\x00\x00\x00\x00\x00K\x06u."s);
  CHECK(render(doc->root()) == "{\"a\": 3, \"b\": 2, True: 6}");

  // The same with more keys than the linear scan handles.
  std::string many = "\x80\x02}(";
  for (int round = 0; round < 2; ++round)
    for (int i = 0; i < 40; ++i) many += binunicode("k" + std::to_string(i)) + "K" + static_cast<char>(round * 50 + i);
  doc = parse(many + "u.");
  REQUIRE(doc->root()->entries.size() == 40);
  CHECK(doc->root()->entries[7].second->int_value == 57);

  // Sets drop duplicates too.
  doc = parse("\x80\x04\x8f(K\x01K\x02K\x01\x88\x90.");
  CHECK(render(doc->root()) == "set{1, 2}");

  // POP with nothing above the MARK pops the MARK; POP_MARK drops everything above it.
  doc = parse("\x80\x02K\x07(0.");
  CHECK(doc->root()->int_value == 7);
  doc = parse(
      "\x80\x02K\x07(K\x01K\x02"
      "1.");
  CHECK(doc->root()->int_value == 7);

  // BUILD with (None, slots) and (dict, dict) state; BUILD on other kinds drops the state.
  doc = parse(
      "\x80\x02"
      "ccollections\nOrderedDict\n)R(N}(" +
      binunicode("x") + "K\x01utb.");
  CHECK(render(doc->root()) == "OrderedDict{}@{\"x\": 1}");
  doc = parse("\x80\x02}(}(" + binunicode("x") + "K\x01u}(" + binunicode("y") + "K\x02utb.");
  CHECK(render(doc->root()) == "{}@{\"x\": 1, \"y\": 2}");
  doc = parse(
      "\x80\x02]K\x01"
      "b.");
  CHECK(render(doc->root()) == "[]");

  // OrderedDict, dict and list from arguments.
  doc = parse(
      "\x80\x02"
      "ccollections\nOrderedDict\n]((K\x01K\x02t(K\x03K\x04te\x85R.");
  CHECK(render(doc->root()) == "OrderedDict{1: 2, 3: 4}");
  doc = parse(
      "\x80\x02"
      "c__builtin__\ndict\n](K\x01K\x02\x86"
      "e\x85R.");
  CHECK(render(doc->root()) == "{1: 2}");
  doc = parse(
      "\x80\x02"
      "c"
      "builtins\nlist\n(K\x01K\x02t\x85R.");
  CHECK(render(doc->root()) == "[1, 2]");
  doc = parse(
      "\x80\x02"
      "c"
      "collections\ndefaultdict\n"
      "c"
      "builtins\nlist\n\x85R.");
  CHECK(render(doc->root()) == "{}");

  // Protocol 0 text forms.
  doc = parse(
      "(I01\nI00\nI-12\nL123456789012345678901234567890L\nF-1.25\nS'a\\x41\\n\\101\\\\'\nV\\u00e9\\\\x\np0\ng0\nl.");
  CHECK(render(doc->root()) ==
        "[True, False, -12, 123456789012345678901234567890, float:-1.25, \"aA\\x0a"
        "A\\x5c\", \"\\xc3\\xa9\\x5c\\x5cx\", "
        "\"\\xc3\\xa9\\x5c\\x5cx\"]");
  doc = parse("(F1e400\nF-1e400\nF1e-400\nF-0.00001e-400\nF+2.5\nF 3 \nl.");
  CHECK(render(doc->root()) == "[float:inf, float:-inf, float:0, float:-0, float:2.5, float:3]");
}

TEST_CASE("deep nesting needs no recursion", "[pickle][hostile]") {
  constexpr int kDepth = 1'000'000;
  // Lists nested through the memo, with a stack of constant height.
  std::string data = "\x80\x02]q\x00"s;
  const std::string step =
      "]r\x01\x00\x00\x00"s
      "a"
      "0j\x01\x00\x00\x00"s;
  data.reserve(data.size() + step.size() * kDepth + 8);
  for (int i = 0; i < kDepth; ++i) data += step;
  data += "0h\x00."s;
  auto doc = parse(data);
  int depth = 0;
  for (const pickle_node* n = doc->root(); !n->items.empty(); n = n->items[0]) ++depth;
  CHECK(depth == kDepth);
  doc.reset();

  // Lists nested on the stack.
  data = "\x80\x02" + std::string(kDepth, ']') + std::string(kDepth - 1, 'a') + ".";
  doc = parse(data);
  depth = 0;
  for (const pickle_node* n = doc->root(); !n->items.empty(); n = n->items[0]) ++depth;
  CHECK(depth == kDepth - 1);

  // Limits.
  unpickle_limits small;
  small.max_stack = 1000;
  CHECK(parse_error(data, small).find("stack too deep") != std::string::npos);
  small = {};
  small.max_nodes = 1000;
  CHECK(parse_error(data, small).find("too many objects") != std::string::npos);
  small = {};
  small.max_memo = 2;
  CHECK(parse_error("\x80\x02Nq\x00q\x01q\x02."s, small).find("too many memo entries") != std::string::npos);
  CHECK(parse_error("\x80\x02Nq\x00q\x01q\x00q\x01."s, small) == "");
}

TEST_CASE("truncated and corrupted data.pkl never crashes", "[pickle][hostile][fixtures]") {
  const std::string good = read_file(kPickles + "torch_state.pkl");
  for (size_t n = 0; n < good.size(); ++n) {
    const std::string m = parse_error(good.substr(0, n));
    INFO("prefix " << n);
    CHECK(m.rfind(kContext + ": at byte ", 0) == 0);
  }
  std::mt19937 rng(12345);
  int parsed = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string bad = good;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) bad[rng() % bad.size()] = static_cast<char>(rng() & 0xff);
    if (parse_error(bad).empty()) ++parsed;
  }
  CHECK(parsed < 3000);
}

namespace {

std::string long_binput(uint32_t k) {
  std::string out = "r";
  for (int i = 0; i < 4; ++i) out += static_cast<char>((k >> (8 * i)) & 0xff);
  return out;
}

std::string long_binget(uint32_t k) {
  std::string out = "j";
  for (int i = 0; i < 4; ++i) out += static_cast<char>((k >> (8 * i)) & 0xff);
  return out;
}

// list(L) of a memoised list of `items` Nones, `copies` times, into one list: 7 bytes per copy.
std::string list_copies(int items, int copies) {
  std::string data =
      "\x80\x02"
      "cbuiltins\nlist\nq\x00"
      "0]q\x01("s +
      std::string(static_cast<size_t>(items), 'N') + "e0]";
  for (int i = 0; i < copies; ++i) data += "h\x00h\x01\x85Ra"s;
  return data + ".";
}

}  // namespace

TEST_CASE("the memory budget is proportional to the record, at its edges", "[pickle][hostile]") {
  const std::string data = list_copies(1000, 10);
  const auto doc = parse(data);
  REQUIRE(doc->root()->items.size() == 10);
  CHECK(doc->root()->items[9]->items.size() == 1000);
  const uint64_t need = doc->charged_bytes();
  // Ten copies of 1000 slots are counted.
  CHECK(need > 10 * 1000 * sizeof(pickle_node*));

  // The base alone: the last budget that fits, and the first that does not.
  unpickle_limits l;
  l.bytes_per_input_byte = 0;
  l.base_bytes = need;
  CHECK(parse_error(data, l) == "");
  l.base_bytes = need - 1;
  const std::string m = parse_error(data, l);
  CHECK(m.find("memory limit: the objects built so far need ") != std::string::npos);
  CHECK(m.find(fmt::format("more than the {} allowed for a {}-byte pickle", need - 1, data.size())) !=
        std::string::npos);

  // The per-byte share: need / size bytes per byte of record, rounded up, fits; one less does not.
  l.base_bytes = 0;
  l.bytes_per_input_byte = (need + data.size() - 1) / data.size();
  CHECK(parse_error(data, l) == "");
  l.bytes_per_input_byte -= 1;
  CHECK(parse_error(data, l).find("memory limit") != std::string::npos);

  // The absolute cap, whatever the share.
  l.bytes_per_input_byte = 1'000'000;
  l.max_bytes = need;
  CHECK(parse_error(data, l) == "");
  l.max_bytes = need - 1;
  CHECK(parse_error(data, l).find("memory limit") != std::string::npos);

  // A share so large that the product overflows falls back to the cap.
  l.bytes_per_input_byte = UINT64_MAX;
  l.max_bytes = need;
  CHECK(parse_error(data, l) == "");
}

TEST_CASE("memoised objects cannot be copied into huge containers", "[pickle][hostile]") {
  // Each 7-byte copy of a 100000-slot list would add 800 KB: 3000 copies, 2.4 GB from 121 KB.
  const std::string copies = list_copies(100'000, 3000);
  CHECK(parse_error(copies).find("memory limit") != std::string::npos);
  CHECK(parse_error(list_copies(100'000, 20)) == "");

  struct named {
    const char* what;
    std::string data;
  };
  std::string big_dict =
      "\x80\x02"
      "cbuiltins\ndict\nq\x00"
      "0}q\x01"s;
  for (int k = 0; k < 20000; ++k)
    big_dict += "(M" + std::string{static_cast<char>(k & 0xff), static_cast<char>(k >> 8)} + "Nu";
  std::string big_bytes =
      "\x80\x02"
      "cbuiltins\nbytes\nq\x00"
      "0B\x00\x00\x04\x00"s +
      std::string(256 << 10, 'x') +
      "q\x01"
      "0";
  std::string name =
      "\x80\x02"
      "cm\n" +
      std::string(4000, 'n') +
      "\nq\x00"
      "0"s;
  std::string shape =
      "\x80\x02"
      "ctorch._utils\n_rebuild_tensor_v2\nq\x00"
      "0("s +
      storage_pid() + "K\x00("s;
  for (int i = 0; i < 50'000; ++i) shape += "K\x00"s;
  shape += "tq\x02h\x02\x89Nt"s;
  shape +=
      "q\x01"
      "0";
  const std::vector<named> cases = {
      {"dict(D)", big_dict + "0]" +
                      [] {
                        std::string s;
                        for (int i = 0; i < 20000; ++i) s += "h\x00h\x01\x85Ra"s;
                        return s;
                      }() +
                      "."},
      {"bytes(B)", big_bytes + "]" +
                       [] {
                         std::string s;
                         for (int i = 0; i < 3000; ++i) s += "h\x00h\x01\x85Ra"s;
                         return s;
                       }() +
                       "."},
      {"an opaque call's name", name + "]" +
                                    [] {
                                      std::string s;
                                      for (int i = 0; i < 100'000; ++i) s += "h\x00)Ra"s;
                                      return s;
                                    }() +
                                    "."},
      {"a tensor's shape", shape + "]" +
                               [] {
                                 std::string s;
                                 for (int i = 0; i < 3000; ++i) s += "h\x00h\x01Ra"s;
                                 return s;
                               }() +
                               "."},
      {"a million 1-byte nodes", "\x80\x02](" + std::string(1'500'000, ']') + "e."},
      {"set(L) of one item repeated",
       "\x80\x02"
       "cbuiltins\nset\nq\x00"
       "0]q\x01("s +
           std::string(100'000, 'N') + "e0]" +
           [] {
             std::string s;
             for (int i = 0; i < 3000; ++i) s += "h\x00h\x01\x85Ra"s;
             return s;
           }() +
           "."},
      {"BUILD of one big state", big_dict + "0ccollections\nOrderedDict\n)R" +
                                     [] {
                                       std::string s;
                                       for (int i = 0; i < 20000; ++i)
                                         s += "h\x01"
                                              "b"s;
                                       return s;
                                     }() +
                                     "."},
  };
  for (const auto& c : cases) {
    const std::string m = parse_error(c.data);
    INFO(c.what << ": " << m);
    CHECK(m.find("memory limit") != std::string::npos);
  }
}

TEST_CASE("checkpoints stay far below the memory budget", "[pickle][fixtures]") {
  // torch.save's pickles: a few tens of bytes of document per byte at most, under the 64 allowed.
  for (const char* file : {"torch_state.pkl", "torch_subclass.pkl", "namespace.p2.pkl", "nested.p2.pkl"}) {
    INFO(file);
    const std::string data = read_file(kPickles + file);
    const auto doc = parse(data);
    CHECK(doc->charged_bytes() < 40 * data.size());
  }
}

TEST_CASE("big keys are interned: compared by id, hashed once", "[pickle][hostile]") {
  // Seven keys of 64 KB set 300000 times would copy 8 keys per set before (150 GB of copies).
  std::string data = "\x80\x02";
  for (int i = 0; i < 7; ++i)
    data += binunicode(std::string(64 << 10, static_cast<char>('a' + i))) + long_binput(10 + i) + "0";
  data += "}";
  for (int i = 0; i < 300'000; ++i) data += long_binget(10 + i % 7) + "K" + std::string{static_cast<char>(i % 7)} + "s";
  // Equal keys from different nodes, past the linear scan (an index), and before it.
  data += binunicode(std::string(64 << 10, 'a')) + "K\x63s";
  const std::string set =
      "\x80\x02\x8f(" + binunicode("x") + binunicode("x") + "K\x01\x88G?\xf0\x00\x00\x00\x00\x00\x00"s + "\x90.";
  auto doc = parse(data + ".");
  const pickle_node* d = doc->root();
  REQUIRE(d->entries.size() == 7);
  CHECK(d->entries[0].first->text == std::string(64 << 10, 'a'));
  CHECK(d->entries[0].second->int_value == 0x63);
  CHECK(d->entries[6].second->int_value == 6);
  doc = parse(set);
  REQUIRE(doc->root()->items.size() == 2);  // {"x", 1}: True and 1.0 equal 1
  CHECK(render(doc->root()) == "set{\"x\", 1}");

  // Other keys are found by identity, as Python does first: one memoised opaque object (or NaN)
  // set 100000 times is one entry; two equal tuples that are different objects are two.
  std::string same =
      "\x80\x02"
      "cm\n" +
      std::string(4000, 'n') +
      "\n)Rq\x01"
      "0G\x7f\xf8\x00\x00\x00\x00\x00\x00q\x02"
      "0}"s;
  for (int i = 0; i < 100'000; ++i) same += "h\x01K\x01s"s;
  same += "h\x02K\x02sh\x02K\x03sK\x01K\x02\x86K\x04sK\x01K\x02\x86K\x05s.";
  doc = parse(same);
  REQUIRE(doc->root()->entries.size() == 4);
  CHECK(doc->root()->entries[0].first->kind == pickle_kind::opaque);
  CHECK(doc->root()->entries[1].second->int_value == 3);
  CHECK(doc->root()->entries[2].second->int_value == 4);
  CHECK(doc->root()->entries[3].second->int_value == 5);
  doc = parse(
      "\x80\x02G\x7f\xf8\x00\x00\x00\x00\x00\x00q\x00"
      "0\x8f(h\x00h\x00\x90."s);
  CHECK(doc->root()->items.size() == 1);
  doc = parse("\x80\x02\x8f(G\x7f\xf8\x00\x00\x00\x00\x00\x00G\x7f\xf8\x00\x00\x00\x00\x00\x00\x90."s);
  CHECK(doc->root()->items.size() == 2);  // two NaN objects
}

TEST_CASE("immutable scalars are shared nodes", "[pickle]") {
  auto doc = parse(
      "\x80\x02(NN\x88\x88I01\nK\x05M\x05\x00J\x05\x00\x00\x00K\xff"
      "M\x00\x01M\x00\x01))(t\x8a\x01\x05l."s);
  const auto& it = doc->root()->items;
  REQUIRE(it.size() == 15);
  CHECK(it[0] == it[1]);
  CHECK(it[2] == it[3]);
  CHECK(it[3] == it[4]);
  CHECK(it[5] == it[6]);
  CHECK(it[6] == it[7]);
  CHECK(it[7] == it[14]);
  CHECK(it[8]->int_value == 255);
  CHECK(it[9] != it[10]);  // 256 is past the shared range
  CHECK(it[10]->int_value == 256);
  CHECK(it[11] == it[12]);
  CHECK(it[12] == it[13]);
  CHECK(it[13]->kind == pickle_kind::tuple);
}

TEST_CASE("global names are limited in length", "[pickle][hostile]") {
  const std::string ok(4096, 'm');
  CHECK(parse_error("c" + ok + "\nx\n.") == "");
  CHECK(parse_error("cx\n" + ok + "\n.") == "");
  CHECK(parse_error("c" + ok + "m\nx\n.") ==
        kContext +
            ": at byte 0: opcode GLOBAL (0x63): global name limit: a module or name of 4097 bytes, more than 4096");
  CHECK(parse_error("cx\n" + ok + "m\n.").find("global name limit") != std::string::npos);
  CHECK(parse_error("\x80\x04" + binunicode(ok + "m") + binunicode("x") + "\x93.").find("global name limit") !=
        std::string::npos);
  unpickle_limits l;
  l.max_name = 3;
  CHECK(parse_error("cabc\nxyz\n.", l) == "");
  CHECK(parse_error("cabcd\nxyz\n.", l).find("more than 3") != std::string::npos);
}

TEST_CASE("tensor subclasses (_rebuild_from_type_v2) are the tensors they hold", "[pickle][fixtures]") {
  auto doc = parse(read_file(kPickles + "torch_subclass.pkl"));
  const pickle_node* root = doc->root();
  CHECK(doc->opaque_globals().empty());
  const pickle_node* sub = entry(root, "sub");
  REQUIRE(sub->kind == pickle_kind::tensor);
  CHECK(sub->tensor->subclass == "fixtures.pickles._SubTensor");
  CHECK(sub->tensor->shape == std::vector<int64_t>{2, 3});
  CHECK_FALSE(sub->tensor->is_parameter);
  const pickle_node* noted = entry(root, "noted");
  REQUIRE(noted->kind == pickle_kind::tensor);
  CHECK(noted->tensor->subclass == "fixtures.pickles._SubTensor");
  CHECK(entry(root, "sub_param")->tensor->is_parameter);
  CHECK(entry(root, "sub_param")->tensor->subclass.empty());
  CHECK(entry(root, "plain")->tensor->subclass.empty());

  // Only the tensor rebuilds are called through it; anything else stays opaque.
  const std::string from_type =
      "\x80\x02"
      "ctorch._tensor\n_rebuild_from_type_v2\n(";
  const std::string args = "(" + storage_pid() + "K\x00K\x02\x85K\x01\x85\x89Nt"s;
  doc = parse(from_type + "ctorch._utils\n_rebuild_tensor_v2\nc__main__\nT\n" + args + "NtR.");
  REQUIRE(doc->root()->kind == pickle_kind::tensor);
  CHECK(doc->root()->tensor->subclass == "__main__.T");
  CHECK(doc->root()->tensor->shape == std::vector<int64_t>{2});
  doc = parse(from_type + "ctorch._utils\n_rebuild_parameter\nc__main__\nT\n(ctorch._utils\n_rebuild_tensor\n(" +
              storage_pid() + "K\x00K\x02\x85K\x01\x85tR\x88NtNtR."s);
  REQUIRE(doc->root()->kind == pickle_kind::tensor);
  CHECK(doc->root()->tensor->is_parameter);
  const std::vector<std::string> opaque = {
      from_type + "ctorch._utils\n_rebuild_sparse_tensor\nc__main__\nT\n" + args + "NtR.",  // not a dense rebuild
      from_type + "cos\nsystem\nc__main__\nT\n(" + binunicode("ls") + "tNtR.",              // not a rebuild at all
      from_type + "ctorch._utils\n_rebuild_tensor_v2\nc__main__\nT\n]NtR.",                 // args not a tuple
      from_type + "ctorch._utils\n_rebuild_tensor_v2\nc__main__\nT\n" + args + "tR.",       // three arguments
  };
  for (const auto& data : opaque) {
    INFO(escape(data));
    doc = parse(data);
    REQUIRE(doc->root()->kind == pickle_kind::opaque);
    CHECK(doc->root()->text == "torch._tensor._rebuild_from_type_v2");
  }
  // Bad tensor arguments are the rebuild's errors.
  CHECK(parse_error(from_type + "ctorch._utils\n_rebuild_tensor_v2\nc__main__\nT\n(NtNtR.")
            .find("tensor rebuild takes 6 arguments") != std::string::npos);
}

TEST_CASE("the default limits are the documented numbers", "[pickle][hostile]") {
  const unpickle_limits d;
  CHECK(d.max_nodes == 50000000);
  CHECK(d.max_memo == 50000000);
  CHECK(d.max_stack == 10000000);
  CHECK(d.max_name == 4096);
  CHECK(d.bytes_per_input_byte == 64);
  CHECK(d.base_bytes == 67108864);
  CHECK(d.max_bytes == 8589934592);
  // unpickle() without limits applies them: a record of 121 KB that would build 2.4 GB is refused
  // with its budget of 64 x size + 64 MiB, capped at 8 GiB.
  const std::string copies = list_copies(100'000, 3000);
  REQUIRE(copies.size() == 121028);
  const std::string m = parse_error(copies);
  CHECK(m.find("more than the 74854656 allowed for a 121028-byte pickle (64 bytes per byte + 64 MiB, at most 8192 "
               "MiB)") != std::string::npos);
}
