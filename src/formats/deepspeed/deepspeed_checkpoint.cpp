#include "formats/deepspeed/deepspeed_checkpoint.h"

#include <dirent.h>
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>
#include <memory>
#include <unordered_map>
#include <unordered_set>

#include "formats/pickle/pickle.h"
#include "formats/pickle/pickle_query.h"
#include "formats/torch/torch_file.h"
#include "util/checked.h"
#include "util/error.h"
#include "util/mapped_file.h"
#include "util/paths.h"
#include "util/read_file.h"

namespace swavg {
namespace {

constexpr uint64_t kMaxLatestBytes = 4096;
constexpr uint64_t kMaxRanks = uint64_t{1} << 20;
constexpr const char* kZero12States = "mp_rank_00_model_states.pt";

std::string zero3_states(size_t rank) { return fmt::format("zero_pp_rank_{}_mp_rank_00_model_states.pt", rank); }

bool holds_model_states(const std::string& folder) {
  return is_regular_file(path_in_folder(folder, kZero12States)) ||
         is_regular_file(path_in_folder(folder, zero3_states(0)));
}

// The rank of a ZeRO-3 file name ("zero_pp_rank_<r>_mp_rank_00_<suffix>", optionally "bf16_" first).
std::optional<uint64_t> rank_of(const std::string& name, const std::string& suffix) {
  std::string rest = name;
  if (rest.rfind("bf16_", 0) == 0) rest = rest.substr(5);
  const std::string head = "zero_pp_rank_", tail = "_mp_rank_00_" + suffix;
  if (rest.size() <= head.size() + tail.size() || rest.rfind(head, 0) != 0 ||
      rest.compare(rest.size() - tail.size(), tail.size(), tail) != 0)
    return std::nullopt;
  const std::string digits = rest.substr(head.size(), rest.size() - head.size() - tail.size());
  if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos ||
      (digits.size() > 1 && digits[0] == '0'))
    return std::nullopt;
  return std::stoull(digits);
}

// rank -> file name, for the ZeRO-3 files of `suffix` in `folder`.
std::map<uint64_t, std::string> rank_files(const std::string& folder, const std::string& suffix) {
  std::map<uint64_t, std::string> out;
  std::unique_ptr<DIR, int (*)(DIR*)> dir(::opendir(folder.c_str()), ::closedir);
  if (!dir) throw io_error(fmt::format("{}: cannot list the folder", folder));
  while (const dirent* e = ::readdir(dir.get())) {
    const std::string name = e->d_name;
    if (auto r = rank_of(name, suffix)) {
      auto [it, added] = out.emplace(*r, name);
      if (!added)
        throw input_error(fmt::format("{}: holds two files for rank {}: {} and {}", folder, *r, it->second, name));
    }
  }
  return out;
}

std::string type_of(const pickle_node* n) { return n ? pickle_type_name(*n) : "missing"; }

const pickle_node* required(const pickle_node* d, const std::string& key, pickle_kind kind, const char* expected,
                            const std::string& file) {
  const pickle_node* v = find_entry(d, key);
  if (!v || v->kind != kind)
    throw input_error(
        fmt::format("{}: '{}' is {}, expected {} (not a DeepSpeed checkpoint file?)", file, key, type_of(v), expected));
  return v;
}

// An int, or DeepSpeed's ZeroStageEnum: pickled by value (ZeroStageEnum(3)) or, from Python 3.11
// on, by name (getattr(ZeroStageEnum, "weights")).
std::optional<int64_t> int_value(const pickle_node* n) {
  if (n && n->kind == pickle_kind::opaque && n->call && n->call->args.size() == 2 &&
      (n->text == "builtins.getattr" || n->text == "__builtin__.getattr")) {
    const pickle_node* cls = n->call->args[0];
    const pickle_node* name = n->call->args[1];
    const std::string suffix = "ZeroStageEnum";
    if (!cls || cls->kind != pickle_kind::global || cls->text.size() < suffix.size() ||
        cls->text.compare(cls->text.size() - suffix.size(), suffix.size(), suffix) != 0 || !name ||
        name->kind != pickle_kind::string)
      return std::nullopt;
    static const std::pair<const char*, int64_t> kStages[] = {
        {"disabled", 0}, {"optimizer_states", 1}, {"gradients", 2}, {"weights", 3}, {"max_stage", 3}};
    for (const auto& [stage, value] : kStages)
      if (name->text == stage) return value;
    return std::nullopt;
  }
  if (n && n->kind == pickle_kind::opaque && n->call && n->call->args.size() == 1) n = n->call->args[0];
  if (n && n->kind == pickle_kind::integer) return n->int_value;
  return std::nullopt;
}

bool is_none(const pickle_node* n) { return !n || n->kind == pickle_kind::none; }

// A torch.Size (pickled as torch.Size((d0, d1, ...))) or a plain tuple/list of ints.
std::vector<int64_t> shape_of(const pickle_node* n, const std::string& what) {
  const pickle_node* dims = n;
  if (n && n->kind == pickle_kind::opaque && n->text == "torch.Size" && n->call && n->call->args.size() == 1)
    dims = n->call->args[0];
  if (!is_sequence(dims))
    throw input_error(fmt::format("{}: the shape is {}, expected a torch.Size", what, type_of(n)));
  std::vector<int64_t> shape;
  for (const pickle_node* d : dims->items) {
    if (!d || d->kind != pickle_kind::integer || d->int_value < 0)
      throw input_error(fmt::format("{}: a size in the shape is {}, expected a non-negative int", what,
                                    d && d->kind == pickle_kind::integer ? std::to_string(d->int_value) : type_of(d)));
    shape.push_back(d->int_value);
  }
  return shape;
}

using named_shapes = std::vector<std::pair<std::string, std::vector<int64_t>>>;

// The (name, shape) pairs of a dict of shapes, in order.
void read_shapes(const pickle_node* d, const std::string& file, const std::string& key, named_shapes& out) {
  if (!d || d->kind != pickle_kind::dict)
    throw input_error(fmt::format("{}: '{}' holds {}, expected a dict of parameter shapes", file, key, type_of(d)));
  for (const auto& [k, v] : d->entries) {
    if (!k || k->kind != pickle_kind::string)
      throw input_error(fmt::format("{}: '{}' has a key of type {}, expected a parameter name", file, key, type_of(k)));
    out.emplace_back(k->text, shape_of(v, fmt::format("{}: {} '{}'", file, key, k->text)));
  }
}

// The world size a partition_count names: an int, or one per param group (DeepSpeed's list), the
// largest; 0 when it is neither.
uint64_t partition_world(const pickle_node* count) {
  if (count && count->kind == pickle_kind::integer) return count->int_value > 0 ? count->int_value : 0;
  if (!is_sequence(count) || count->items.empty()) return 0;
  uint64_t world = 0;
  for (const pickle_node* c : count->items) {
    if (!c || c->kind != pickle_kind::integer || c->int_value <= 0) return 0;
    world = std::max(world, static_cast<uint64_t>(c->int_value));
  }
  return world;
}

std::string partition_text(const pickle_node* count) {
  if (count && count->kind == pickle_kind::integer) return std::to_string(count->int_value);
  if (is_sequence(count) && partition_world(count) > 0) {
    std::string s;
    for (const pickle_node* c : count->items) s += (s.empty() ? "" : ", ") + std::to_string(c->int_value);
    return "[" + s + "]";
  }
  return type_of(count);
}

// The archive lives on the heap: the storage reader refers to it, and `opened` moves.
struct opened {
  std::unique_ptr<torch_archive> archive;
  std::unique_ptr<torch_storage_reader> reader;
  const pickle_node* root = nullptr;
};

opened open_mapped(const std::shared_ptr<const mapped_file>& file, const char* expected) {
  const std::string& path = file->path();
  opened o;
  o.archive = std::make_unique<torch_archive>(open_torch_archive(file, expected));
  o.reader = std::make_unique<torch_storage_reader>(archive_storages(*o.archive));
  o.root = o.archive->doc->root();
  if (!o.root || o.root->kind != pickle_kind::dict)
    throw input_error(fmt::format("{}: holds {}, expected the dict DeepSpeed saves", path, type_of(o.root)));
  return o;
}

opened open_file(const std::string& path, const char* expected) {
  return open_mapped(mapped_file::open(path), expected);
}

tensor_view tensor_at(opened& o, const pickle_node* n, const std::string& what) {
  if (!n || n->kind != pickle_kind::tensor)
    throw input_error(fmt::format("{}: {} is {}, expected a tensor", o.archive->file->path(), what, type_of(n)));
  return o.reader->view_of(what, *n->tensor);
}

// `count` elements of the contiguous view `v` from element `first` on, as a flat piece placed at
// element `at` of its tensor.
tensor_piece flat_piece(const tensor_view& v, uint64_t first, uint64_t count, uint64_t at) {
  tensor_piece p{v, {static_cast<int64_t>(at)}, true};
  p.view.offset += static_cast<int64_t>(first);
  p.view.shape = {static_cast<int64_t>(count)};
  p.view.strides = {1};
  return p;
}

// ZeRO stage 0-2: the weights are the model states' `module`.
state_dict read_zero12(const std::string& path, const std::string& tag) {
  const std::string file = path_in_folder(tag, kZero12States);
  const auto mapped = mapped_file::open(file);
  {
    const opened o = open_mapped(mapped, "a DeepSpeed model states file");
    const pickle_node* module = find_entry(o.root, "module");
    if (!module || module->kind != pickle_kind::dict)
      throw input_error(
          fmt::format("{}: DeepSpeed model states whose 'module' is {}, expected a dict of tensors (pipeline-parallel "
                      "checkpoints, layer_*-model_states.pt, are not read)",
                      file, module ? pickle_type_name(*module) : "missing"));
  }
  state_dict sd = read_torch_file(mapped, "module");
  if (sd.tensors.empty())
    throw input_error(fmt::format("{}: DeepSpeed model states whose 'module' holds no tensors", file));
  sd.path = path;
  return sd;
}

struct zero3_rank {
  opened model, optim;
  std::vector<tensor_view> groups;
};

// A ZeRO-3 tag folder read step by step, in the order the checks run: the world size against the
// rank files, each rank's flat groups, rank 0's layout (parameter shapes, buffers, frozen and tied
// names), then the tensors: buffers, frozen parameters, partitioned parameters, tied ones.
class zero3_reader {
 public:
  zero3_reader(std::string path, std::string tag)
      : path_(std::move(path)),
        tag_(std::move(tag)),
        models_(rank_files(tag_, "model_states.pt")),
        optims_(rank_files(tag_, "optim_states.pt")) {}

  state_dict read() {
    open_rank0_optim();
    read_world_size();
    for (uint64_t r = 0; r < world_; ++r) read_rank(r);
    read_layout();
    sd_.path = path_;
    sd_.format = file_format::torch;
    add_buffers();
    for (const auto& [name, shape] : frozen_) add_frozen(name, shape);
    add_parameters();
    add_tied();
    if (sd_.tensors.empty())
      throw input_error(fmt::format("{}: a ZeRO-3 checkpoint without parameters or buffers", tag_));
    return std::move(sd_);
  }

 private:
  void open_rank0_optim() {
    if (!optims_.count(0))
      throw input_error(fmt::format("{}: a ZeRO-3 checkpoint without zero_pp_rank_0_mp_rank_00_optim_states.pt", tag_));
    ranks_.emplace_back();
    optim0_ = path_in_folder(tag_, optims_.at(0));
    ranks_[0].optim = open_file(optim0_, "a DeepSpeed optimizer states file");
  }

  // The world size, from rank 0's partition_count, against the rank files present.
  void read_world_size() {
    const pickle_node* osd0 =
        required(ranks_[0].optim.root, "optimizer_state_dict", pickle_kind::dict, "a dict", optim0_);
    const pickle_node* count = find_entry(osd0, "partition_count");
    world_ = partition_world(count);
    if (world_ == 0 || world_ > kMaxRanks)
      throw input_error(fmt::format("{}: partition_count is {}, expected a world size from 1 to {}", optim0_,
                                    partition_text(count), kMaxRanks));
    check_rank_files(models_, "model_states");
    check_rank_files(optims_, "optim_states");
  }

  void check_rank_files(const std::map<uint64_t, std::string>& files, const std::string& what) const {
    if (files.size() == world_ && files.rbegin()->first == world_ - 1) return;
    uint64_t missing = 0;
    while (files.count(missing)) ++missing;
    throw input_error(
        missing < world_
            ? fmt::format("{}: world size {} (partition_count in {}) but the {} file of rank {} is missing "
                          "(zero_pp_rank_{}_mp_rank_00_{}.pt)",
                          tag_, world_, optim0_, what, missing, missing, what)
            : fmt::format("{}: world size {} (partition_count in {}) but it holds {} {} files, up to rank {}", tag_,
                          world_, optim0_, files.size(), what, files.rbegin()->first));
  }

  // Rank r's files, its stage and partition count against rank 0's, and its flat groups.
  void read_rank(uint64_t r) {
    if (r > 0) ranks_.emplace_back();
    zero3_rank& z = ranks_[r];
    const std::string optim = path_in_folder(tag_, optims_.at(r));
    if (r > 0) z.optim = open_file(optim, "a DeepSpeed optimizer states file");
    z.model = open_file(path_in_folder(tag_, models_.at(r)), "a DeepSpeed model states file");
    const pickle_node* osd = required(z.optim.root, "optimizer_state_dict", pickle_kind::dict, "a dict", optim);
    const pickle_node* stage = find_entry(osd, "zero_stage");
    if (int_value(stage) != 3)
      throw input_error(fmt::format("{}: zero_stage is {}, expected 3 beside {}", optim,
                                    int_value(stage) ? std::to_string(*int_value(stage)) : type_of(stage),
                                    zero3_states(0)));
    const pickle_node* c = find_entry(osd, "partition_count");
    if (r > 0 && partition_world(c) != world_)
      throw input_error(fmt::format("{}: partition_count is {}, but rank 0's is {} (files of two runs?)", optim,
                                    partition_text(c), world_));
    read_flat_groups(r, find_entry(osd, "fp32_flat_groups"), optim);
  }

  // Rank r's fp32_flat_groups: flat partitions of rank 0's type, as many and as long as rank 0's.
  void read_flat_groups(uint64_t r, const pickle_node* groups, const std::string& optim) {
    zero3_rank& z = ranks_[r];
    if (!is_sequence(groups) || groups->items.empty())
      throw input_error(
          fmt::format("{}: fp32_flat_groups is {}, expected a list of flat fp32 partitions", optim, type_of(groups)));
    if (r > 0 && groups->items.size() != group_numels_.size())
      throw input_error(
          fmt::format("{}: {} flat groups, but rank 0 has {}", optim, groups->items.size(), group_numels_.size()));
    for (size_t g = 0; g < groups->items.size(); ++g) {
      tensor_view v = tensor_at(z.optim, groups->items[g], fmt::format("fp32_flat_groups[{}]", g));
      if (v.shape.size() != 1 || !v.is_contiguous())
        throw input_error(fmt::format("{}: fp32_flat_groups[{}] has shape {}, expected a flat (1-d) partition", optim,
                                      g, shape_string(v.shape)));
      if (r == 0 && g == 0) flat_type_ = v.type;
      if (v.type != flat_type_ || !is_floating(v.type))
        throw input_error(fmt::format("{}: fp32_flat_groups[{}] is {}, expected {} as rank 0's first group", optim, g,
                                      dtype_name(v.type), dtype_name(flat_type_)));
      const uint64_t n = static_cast<uint64_t>(v.numel());
      if (r == 0) {
        group_numels_.push_back(n);
      } else if (n != group_numels_[g]) {
        throw input_error(fmt::format("{}: fp32_flat_groups[{}] holds {} elements, but rank 0's holds {}", optim, g, n,
                                      group_numels_[g]));
      }
      z.groups.push_back(std::move(v));
    }
  }

  // Rank 0's model states: which parameters lie in the partitions, buffers, frozen and tied ones.
  void read_layout() {
    states0_ = path_in_folder(tag_, models_.at(0));
    const pickle_node* root0 = ranks_[0].model.root;
    buffer_names_ = required(root0, "buffer_names", pickle_kind::list, "a list of names", states0_);
    module_ = required(root0, "module", pickle_kind::dict, "a dict", states0_);
    const pickle_node* shapes = find_entry(root0, "param_shapes");
    if (is_sequence(shapes)) {
      for (const pickle_node* group : shapes->items) read_shapes(group, states0_, "param_shapes", params_);
    } else {
      read_shapes(shapes, states0_, "param_shapes", params_);
    }
    const pickle_node* frozen_shapes = find_entry(root0, "frozen_param_shapes");
    if (!is_none(frozen_shapes)) read_shapes(frozen_shapes, states0_, "frozen_param_shapes", frozen_);
    shared_ = required(root0, "shared_params", pickle_kind::dict, "a dict", states0_);
  }

  void add(const std::string& name, tensor_view v) {
    if (!index_.emplace(name, sd_.tensors.size()).second)
      throw input_error(fmt::format("{}: '{}' appears twice among the parameters and buffers", states0_, name));
    sd_.tensors.push_back(named_tensor{name, std::move(v), tensor_kind::unknown});
  }

  void add_buffers() {
    std::unordered_set<std::string> buffers;
    for (const pickle_node* n : buffer_names_->items) {
      if (!n || n->kind != pickle_kind::string)
        throw input_error(fmt::format("{}: buffer_names holds {}, expected names", states0_, type_of(n)));
      buffers.insert(n->text);
    }
    for (const auto& [k, v] : module_->entries)
      if (k && k->kind == pickle_kind::string && buffers.count(k->text))
        add(k->text, tensor_at(ranks_[0].model, v, fmt::format("buffer '{}'", k->text)));
  }

  // A frozen parameter: the ranks' frozen_param_fragments of it, concatenated and cut to its numel.
  void add_frozen(const std::string& name, const std::vector<int64_t>& shape) {
    const std::string what = fmt::format("{}: frozen parameter '{}'", states0_, name);
    const uint64_t numel = zero3_numel(shape, what);
    std::vector<tensor_view> fragments;
    uint64_t have = 0;
    for (uint64_t r = 0; r < world_; ++r) {
      const std::string file = path_in_folder(tag_, models_.at(r));
      const pickle_node* all = find_entry(ranks_[r].model.root, "frozen_param_fragments");
      const pickle_node* f = find_entry(all, name);
      if (!f)
        throw input_error(fmt::format("{}: frozen_param_fragments holds no '{}' (frozen_param_shapes in {} lists it)",
                                      file, name, states0_));
      fragments.push_back(tensor_at(ranks_[r].model, f, fmt::format("frozen parameter '{}'", name)));
      if (!fragments.back().is_contiguous())
        throw input_error(fmt::format("{}: frozen parameter '{}' is not contiguous", file, name));
      if (r > 0 && fragments.back().type != fragments[0].type)
        throw input_error(fmt::format("{}: frozen parameter '{}' is {} here but {} on rank 0", file, name,
                                      dtype_name(fragments.back().type), dtype_name(fragments[0].type)));
      have += static_cast<uint64_t>(fragments.back().numel());  // each at most the file's size
    }
    if (have < numel)
      throw input_error(fmt::format("{} of shape {} needs {} elements but the ranks' fragments hold {}", what,
                                    shape_string(shape), numel, have));
    if (static_cast<uint64_t>(fragments[0].numel()) >= numel) return add_slice(name, fragments[0], 0, shape);
    std::vector<tensor_piece> pieces;
    uint64_t done = 0;
    for (const tensor_view& f : fragments) {
      const uint64_t take = std::min<uint64_t>(static_cast<uint64_t>(f.numel()), numel - done);
      if (take > 0) pieces.push_back(flat_piece(f, 0, take, done));
      done += take;
    }
    add(name, make_pieced_view(fragments[0].type, shape, std::move(pieces), "zero3-frozen/" + name));
  }

  // `shape`'s elements of the flat `flat` from element `offset`, as tensor `name`.
  void add_slice(const std::string& name, tensor_view flat, uint64_t offset, const std::vector<int64_t>& shape) {
    flat.offset += static_cast<int64_t>(offset);
    flat.shape = shape;
    flat.strides = contiguous_strides(shape);
    add(name, std::move(flat));
  }

  // The partitioned parameters: each one slice of a rank's group, or a pieced view of several.
  void add_parameters() {
    std::vector<uint64_t> numels;
    std::vector<std::string> names;
    for (const auto& [name, shape] : params_) {
      names.push_back(name);
      numels.push_back(zero3_numel(shape, fmt::format("{}: parameter '{}'", states0_, name)));
    }
    const std::vector<zero3_param> plan = plan_zero3(numels, names, group_numels_, world_, optim0_);
    const std::vector<uint64_t> group_starts = zero3_group_starts(group_numels_);
    for (size_t i = 0; i < params_.size(); ++i) {
      const auto& [name, shape] = params_[i];
      const std::vector<zero3_slice> slices = zero3_slices(plan[i], group_starts, world_);
      if (slices.size() == 1) {
        add_slice(name, ranks_[slices[0].rank].groups[slices[0].group], slices[0].offset, shape);
        continue;
      }
      std::vector<tensor_piece> pieces;
      uint64_t done = 0;
      for (const zero3_slice& s : slices) {
        pieces.push_back(flat_piece(ranks_[s.rank].groups[s.group], s.offset, s.count, done));
        done += s.count;
      }
      add(name, make_pieced_view(flat_type_, shape, std::move(pieces), "zero3/" + name));
    }
  }

  // shared_params: each tied name takes its source's tensor (replacing one of its own name).
  void add_tied() {
    for (const auto& [k, v] : shared_->entries) {
      if (!k || k->kind != pickle_kind::string || !v || v->kind != pickle_kind::string)
        throw input_error(
            fmt::format("{}: shared_params maps {} to {}, expected parameter names", states0_, type_of(k), type_of(v)));
      const auto source = index_.find(v->text);
      if (source == index_.end()) continue;  // as zero_to_fp32: only tied to something present
      named_tensor tied{k->text, sd_.tensors[source->second].view, tensor_kind::unknown};
      const auto existing = index_.find(k->text);
      if (existing != index_.end()) {
        sd_.tensors[existing->second] = std::move(tied);
      } else {
        index_.emplace(k->text, sd_.tensors.size());
        sd_.tensors.push_back(std::move(tied));
      }
    }
  }

  std::string path_, tag_;
  std::map<uint64_t, std::string> models_, optims_;
  std::string optim0_, states0_;
  uint64_t world_ = 0;
  std::vector<zero3_rank> ranks_;
  dtype flat_type_ = dtype::float32;
  std::vector<uint64_t> group_numels_;
  const pickle_node* buffer_names_ = nullptr;
  const pickle_node* module_ = nullptr;
  const pickle_node* shared_ = nullptr;
  named_shapes params_, frozen_;
  state_dict sd_;
  std::unordered_map<std::string, size_t> index_;
};

}  // namespace

uint64_t zero3_numel(const std::vector<int64_t>& shape, const std::string& what) {
  uint64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) throw input_error(fmt::format("{} has a negative size in its shape {}", what, shape_string(shape)));
    auto next = checked_mul(n, static_cast<uint64_t>(d));
    if (!next || *next > static_cast<uint64_t>(INT64_MAX))
      throw input_error(fmt::format("{} has the shape {}, more than 2^63 - 1 elements", what, shape_string(shape)));
    n = *next;
  }
  return n;
}

std::vector<zero3_param> plan_zero3(const std::vector<uint64_t>& numels, const std::vector<std::string>& names,
                                    const std::vector<uint64_t>& group_numels, uint64_t world_size,
                                    const std::string& file) {
  if (world_size == 0) throw input_error(fmt::format("{}: a world size of 0", file));
  uint64_t available = 0;
  for (uint64_t g : group_numels) {
    auto sum = checked_add(available, g);
    if (!sum) throw input_error(fmt::format("{}: the flat groups hold more than 2^64 elements", file));
    available = *sum;
  }
  std::vector<zero3_param> plan;
  uint64_t offset = 0;
  for (size_t i = 0; i < numels.size(); ++i) {
    zero3_param p;
    p.numel = numels[i];
    p.partition_numel = numels[i] / world_size + (numels[i] % world_size != 0);
    p.partition_offset = offset;
    auto end = checked_add(offset, p.partition_numel);
    if (!end || *end > available)
      throw input_error(fmt::format(
          "{}: parameter '{}' ({} elements, {} on each of {} ranks) starts at element {} of each rank's partition, "
          "which holds {} elements: the partitions hold fewer elements than param_shapes needs",
          file, i < names.size() ? names[i] : "?", p.numel, p.partition_numel, world_size, offset, available));
    offset = *end;
    plan.push_back(p);
  }
  if (offset != available)
    throw input_error(fmt::format(
        "{}: the parameters take {} elements of each rank's partition, which holds {}: the partitions do not add "
        "up to param_shapes",
        file, offset, available));
  return plan;
}

std::vector<uint64_t> zero3_group_starts(const std::vector<uint64_t>& group_numels) {
  std::vector<uint64_t> starts{0};
  for (uint64_t g : group_numels) starts.push_back(starts.back() + g);  // plan_zero3 checked the sum
  return starts;
}

std::vector<zero3_slice> zero3_slices(const zero3_param& p, const std::vector<uint64_t>& group_starts,
                                      uint64_t world_size) {
  std::vector<zero3_slice> out;
  if (group_starts.size() < 2) return out;
  // The group holding the parameter's first element: the last that starts at or before it.
  const auto groups_end = group_starts.end() - 1;
  const size_t first = static_cast<size_t>(std::upper_bound(group_starts.begin(), groups_end, p.partition_offset) -
                                           group_starts.begin());
  uint64_t left = p.numel;
  for (uint64_t r = 0; r < world_size && left > 0; ++r) {
    uint64_t begin = p.partition_offset, count = std::min(p.partition_numel, left);
    for (size_t g = first > 0 ? first - 1 : 0; g + 1 < group_starts.size() && count > 0; ++g) {
      const uint64_t group_end = group_starts[g + 1];
      if (begin < group_end) {
        const uint64_t take = std::min(count, group_end - begin);
        out.push_back(zero3_slice{static_cast<size_t>(r), g, begin - group_starts[g], take});
        begin += take;
        count -= take;
        left -= take;
      }
    }
  }
  return out;
}

std::string deepspeed_tag_folder(const std::string& path) {
  if (!is_folder(path)) return "";
  if (holds_model_states(path)) return without_trailing_slash(path);
  const std::string latest = path_in_folder(path, "latest");
  if (!is_regular_file(latest)) return "";
  std::string tag = read_text_file(latest, kMaxLatestBytes);
  const auto first = tag.find_first_not_of(" \t\r\n\f\v");
  tag = first == std::string::npos ? "" : tag.substr(first, tag.find_last_not_of(" \t\r\n\f\v") - first + 1);
  if (tag.empty() || tag == "." || tag == ".." || tag.find('/') != std::string::npos ||
      tag.find('\0') != std::string::npos || tag.size() > 255)
    throw input_error(fmt::format("{}: names the tag '{}', expected the name of a folder beside it", latest,
                                  tag.size() > 255 ? tag.substr(0, 255) + "..." : tag));
  const std::string folder = path_in_folder(path, tag);
  if (!is_folder(folder))
    throw input_error(fmt::format("{}: names the tag '{}' but {} is not a folder", latest, tag, folder));
  if (!holds_model_states(folder))
    throw input_error(fmt::format("{}: holds neither {} (ZeRO stage 0-2) nor {} (ZeRO-3); {} names it", folder,
                                  kZero12States, zero3_states(0), latest));
  return folder;
}

state_dict read_deepspeed_checkpoint(const std::string& path, const std::string& key) {
  if (!key.empty() && key != "module")
    throw usage_error(
        fmt::format("{}: a DeepSpeed checkpoint's weights are its 'module'; --key '{}' does not apply", path, key));
  const std::string tag = deepspeed_tag_folder(path);
  if (tag.empty()) throw input_error(fmt::format("{}: not a DeepSpeed checkpoint folder", path));
  for (const char* other : {"mp_rank_01_model_states.pt", "zero_pp_rank_0_mp_rank_01_model_states.pt"})
    if (is_regular_file(path_in_folder(tag, other)))
      throw input_error(fmt::format(
          "{}: holds {}: model-parallel DeepSpeed checkpoints (more than one mp_rank) are not read", tag, other));
  state_dict sd =
      is_regular_file(path_in_folder(tag, kZero12States)) ? read_zero12(path, tag) : zero3_reader(path, tag).read();
  sd.key = "module";
  return sd;
}

std::vector<std::string> deepspeed_files(const std::string& path) {
  const std::string tag = deepspeed_tag_folder(path);
  std::vector<std::string> files;
  if (tag != without_trailing_slash(path)) files.push_back(path_in_folder(path, "latest"));
  if (is_regular_file(path_in_folder(tag, kZero12States))) {
    files.push_back(path_in_folder(tag, kZero12States));
    return files;
  }
  for (const char* suffix : {"model_states.pt", "optim_states.pt"})
    for (const auto& [rank, name] : rank_files(tag, suffix)) files.push_back(path_in_folder(tag, name));
  return files;
}

}  // namespace swavg
