// torch.export.save's .pt2 archive read as data (see pt2_archive.h).
#include "formats/export/pt2_archive.h"

#include <fmt/format.h>

#include <map>
#include <set>
#include <string_view>

#include "formats/zip/zip_format.h"
#include "formats/zip/zip_reader.h"
#include "util/checked.h"
#include "util/crc32.h"
#include "util/error.h"
#include "util/mapped_file.h"
#include "util/printable.h"
#include "util/text.h"

namespace swavg {
namespace {

using json = nlohmann::json;

constexpr const char* kWeightsConfig = "data/weights/model_weights_config.json";
constexpr const char* kConstantsConfig = "data/constants/model_constants_config.json";

std::string quote(std::string_view s) { return fmt::format("'{}'", printable(s)); }

class archive_reader {
 public:
  archive_reader(std::shared_ptr<const mapped_file> file, std::string path)
      : file_(std::move(file)), path_(std::move(path)), zip_(file_->data(), file_->size(), path_) {}

  pt2_archive read();

 private:
  [[noreturn]] void fail(const std::string& message) const { throw input_error(fmt::format("{}: {}", path_, message)); }
  std::string record_name(const std::string& name) const { return zip_.root() + "/" + name; }
  // The record's bytes, stored and matching its CRC-32.
  std::string_view record(const std::string& name) const;
  void check_header();
  void read_tensors(const std::string& folder, const char* config_name, bool weights, pt2_archive& a);
  named_tensor make_view(const std::string& fqn, const json& entry, const std::string& folder,
                         const std::string& where) const;
  void check_against_graph(const named_tensor& t, const export_input_spec& spec, const pt2_archive& a,
                           const std::string& where) const;

  std::shared_ptr<const mapped_file> file_;
  std::string path_;
  zip_reader zip_;
};

std::string_view archive_reader::record(const std::string& name) const {
  const zip_entry& e = zip_.stored(record_name(name));
  const uint32_t crc = crc32_update(0, zip_.bytes(e), e.size);
  if (crc != e.crc32)
    fail(
        fmt::format("record {}: its bytes have CRC-32 {:08x}, the archive's directory says {:08x} (the file is "
                    "damaged or was altered)",
                    zip_format::quoted(e.name), crc, e.crc32));
  return {reinterpret_cast<const char*>(zip_.bytes(e)), e.size};
}

void archive_reader::check_header() {
  for (const zip_entry& e : zip_.entries())
    if (starts_with(e.name, record_name("data/aotinductor/")))
      fail(
          "an AOTInductor package: its model is compiled code, which swavg does not run; save the program "
          "itself with torch.export.save(ep.run_decompositions(), PATH) and give that file");
  const std::string_view format = record("archive_format");
  if (format != "pt2")
    fail(fmt::format("record archive_format holds {}, expected 'pt2' (torch.export.save's archive)", quote(format)));
  if (const zip_entry* order = zip_.find(record_name("byteorder")); order && record("byteorder") != "little")
    fail(fmt::format("record byteorder holds {}; swavg reads little-endian archives", quote(record("byteorder"))));
  if (!zip_.find(record_name("models/model.json"))) {
    std::set<std::string> models;
    for (const zip_entry& e : zip_.entries())
      if (starts_with(e.name, record_name("models/"))) models.insert(e.name);
    fail(models.empty() ? std::string("no models/model.json: not a program torch.export.save wrote")
                        : fmt::format("{} models and none named 'model': swavg runs the one program "
                                      "torch.export.save(ep, PATH) writes",
                                      models.size()));
  }
}

named_tensor archive_reader::make_view(const std::string& fqn, const json& entry, const std::string& folder,
                                       const std::string& where) const {
  const auto get = [&](const json& o, const char* key) -> const json& {
    const auto it = o.is_object() ? o.find(key) : o.end();
    if (it == o.end()) fail(fmt::format("{}: no \"{}\"", where, key));
    return *it;
  };
  const auto integer = [&](const json& v, const char* what) -> int64_t {
    const json& x = v.is_object() && v.size() == 1 && v.contains("as_int") ? v["as_int"] : v;
    if (!x.is_number_integer() || (x.is_number_unsigned() && x.get<uint64_t>() > uint64_t{INT64_MAX}))
      fail(fmt::format("{}: {} is not a 64-bit integer", where, what));
    return x.get<int64_t>();
  };
  if (get(entry, "use_pickle") != false)
    fail(
        fmt::format("{}: use_pickle is set (a tensor subclass, stored as a pickle), which swavg does not read", where));
  const json& path_name = get(entry, "path_name");
  if (!path_name.is_string() || path_name.get<std::string>().empty() ||
      path_name.get<std::string>().find('/') != std::string::npos)
    fail(fmt::format("{}: path_name is not a record name", where));
  const json& meta = get(entry, "tensor_meta");
  named_tensor t;
  t.name = fqn;
  const int64_t code = integer(get(meta, "dtype"), "dtype");
  const std::optional<dtype> type = export_dtype(code);
  if (!type) fail(fmt::format("{}: dtype code {}, which swavg does not know", where, code));
  if (integer(get(meta, "layout"), "layout") != kExportLayoutStrided) fail(where + ": not a strided (dense) tensor");
  t.view.type = *type;
  const json& sizes = get(meta, "sizes");
  const json& strides = get(meta, "strides");
  if (!sizes.is_array() || !strides.is_array() || sizes.size() != strides.size())
    fail(fmt::format("{}: sizes and strides are not two lists of one length", where));
  for (size_t i = 0; i < sizes.size(); ++i) {
    t.view.shape.push_back(integer(sizes[i], "a size"));
    t.view.strides.push_back(integer(strides[i], "a stride"));
  }
  t.view.offset = integer(get(meta, "storage_offset"), "storage_offset");
  const std::string record_path = folder + path_name.get<std::string>();
  if (!zip_.find(record_name(record_path)))
    fail(fmt::format("{}: its record {} is not in the archive", where, quote(record_name(record_path))));
  const std::string_view bytes = record(record_path);
  const size_t item = itemsize(t.view.type);
  if (bytes.size() % item != 0)
    fail(fmt::format("{}: its record holds {} bytes, not a whole number of {} elements", where, bytes.size(),
                     dtype_name(t.view.type)));
  const std::string bounds = check_view_bounds(t.view.shape, t.view.strides, t.view.offset, bytes.size() / item);
  if (!bounds.empty())
    fail(fmt::format("{}: its record {} holds {} bytes: {}", where, quote(record_path), bytes.size(), bounds));
  t.view.storage = reinterpret_cast<const uint8_t*>(bytes.data());
  t.view.storage_bytes = bytes.size();
  t.view.storage_key = record_name(record_path);
  t.view.owner = file_;
  t.view.mapping = file_.get();
  const json& is_param = get(entry, "is_param");
  t.kind = is_param == true ? tensor_kind::parameter : tensor_kind::buffer;
  return t;
}

void archive_reader::check_against_graph(const named_tensor& t, const export_input_spec& spec, const pt2_archive& a,
                                         const std::string& where) const {
  const export_tensor_type& graph = a.program.input_types.at(spec.value);
  bool same = graph.type == t.view.type && graph.sizes.size() == t.view.shape.size();
  for (size_t i = 0; same && i < graph.sizes.size(); ++i)
    same = graph.sizes[i].symbol.empty() && graph.sizes[i].size == t.view.shape[i];
  if (!same)
    fail(fmt::format("{} is {} {}, but the graph's input {} is {} {}", where, shape_string(t.view.shape),
                     dtype_name(t.view.type), quote(a.program.values[static_cast<size_t>(spec.value)].name),
                     export_type_text(graph), dtype_name(graph.type)));
  const bool parameter = spec.role == export_input_role::parameter;
  if (spec.role != export_input_role::constant && spec.persistent && parameter != (t.kind == tensor_kind::parameter))
    fail(fmt::format("{} says is_param {}, but the signature binds it as a {}", where, !parameter,
                     parameter ? "parameter" : "buffer"));
}

// The tensors one config describes: weights (parameters, persistent buffers) or constants (tensor
// constants, non-persistent buffers), each bound by the signature, in the signature's order.
void archive_reader::read_tensors(const std::string& folder, const char* config_name, bool weights, pt2_archive& a) {
  std::vector<const export_input_spec*> specs;
  for (const export_input_spec& s : a.program.inputs) {
    const bool is_weight =
        s.role == export_input_role::parameter || (s.role == export_input_role::buffer && s.persistent);
    const bool is_constant =
        s.role == export_input_role::constant || (s.role == export_input_role::buffer && !s.persistent);
    if (weights ? is_weight : is_constant) specs.push_back(&s);
  }
  const std::string config_file = std::string(config_name).substr(std::string(config_name).rfind('/') + 1);
  if (!zip_.find(record_name(config_name))) {
    if (specs.empty()) return;
    fail(fmt::format("no record {}, but the signature binds {}", quote(record_name(config_name)),
                     quote(specs.front()->target)));
  }
  const std::string context = fmt::format("{}: record {}", path_, quote(record_name(config_name)));
  const json root = read_export_json(record(config_name), context);
  const auto config = root.is_object() ? root.find("config") : root.end();
  if (config == root.end() || !config->is_object()) fail(context + " has no \"config\" object");
  std::set<std::string> bound;
  for (const export_input_spec* s : specs) {
    const std::string where = fmt::format("{} in {}", quote(s->target), config_file);
    const auto entry = config->find(s->target);
    if (entry == config->end())
      fail(fmt::format("the signature binds {} {}, which has no entry in {}",
                       s->role == export_input_role::parameter ? "parameter" : "tensor", quote(s->target),
                       config_file));
    named_tensor t = make_view(s->target, *entry, folder, where);
    check_against_graph(t, *s, a, where);
    bound.insert(s->target);
    (weights ? a.weights : a.constants).push_back(std::move(t));
  }
  for (const auto& item : config->items())
    if (!bound.count(item.key()))
      fail(fmt::format("{} holds {}, which the signature does not bind", config_file, quote(item.key())));
}

pt2_archive archive_reader::read() {
  check_header();
  pt2_archive a;
  a.path = path_;
  a.file = file_;
  a.program = parse_export_program(record("models/model.json"),
                                   fmt::format("{}: record {}", path_, quote(record_name("models/model.json"))));
  read_tensors("data/weights/", kWeightsConfig, true, a);
  read_tensors("data/constants/", kConstantsConfig, false, a);
  return a;
}

}  // namespace

bool is_pt2_archive(const zip_reader& zip) {
  for (const zip_entry& e : zip.entries()) {
    const size_t slash = e.name.find('/');
    if (slash != std::string::npos && e.name.compare(slash + 1, std::string::npos, "archive_format") == 0 &&
        e.name.find('/', slash + 1) == std::string::npos)
      return true;
  }
  return false;
}

pt2_archive read_pt2_archive(std::shared_ptr<const mapped_file> file, const std::string& path) {
  archive_reader reader(std::move(file), path);
  return reader.read();
}

state_dict read_pt2_state_dict(std::shared_ptr<const mapped_file> file, const std::string& path) {
  pt2_archive a = read_pt2_archive(std::move(file), path);
  state_dict sd;
  sd.path = path;
  sd.format = file_format::torch;
  sd.tensors = std::move(a.weights);
  return sd;
}

}  // namespace swavg
