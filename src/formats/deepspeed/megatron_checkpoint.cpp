#include "formats/deepspeed/megatron_checkpoint.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "util/error.h"
#include "util/paths.h"
#include "util/read_file.h"

namespace swavg {
namespace {

constexpr uint64_t kMaxMetadataBytes = 1 << 20;

}  // namespace

std::optional<std::string> megatron_backend(const std::string& path) {
  // Megatron-core writes metadata.json beside DCP files (torch_dist: .metadata) or common.pt (older
  // layouts); another folder's metadata.json (a dataset's, say) is none of its business.
  const std::string metadata = path_in_folder(path, "metadata.json");
  if (!is_regular_file(metadata) ||
      !(is_regular_file(path_in_folder(path, ".metadata")) || is_regular_file(path_in_folder(path, "common.pt"))))
    return std::nullopt;
  const nlohmann::json doc = nlohmann::json::parse(read_text_file(metadata, kMaxMetadataBytes), nullptr, false);
  if (!doc.is_object() || !doc.contains("sharded_backend") || !doc["sharded_backend"].is_string()) return std::nullopt;
  return doc["sharded_backend"].get<std::string>();
}

void refuse_megatron_checkpoint(const std::string& path) {
  const std::optional<std::string> backend = megatron_backend(path);
  if (!backend) return;
  const bool common_pt = is_regular_file(path_in_folder(path, "common.pt"));
  throw input_error(fmt::format(
      "{}: a Megatron-core distributed checkpoint (metadata.json: sharded_backend '{}', {}); swavg does not "
      "read this layout (read as plain DCP, its common state, what Megatron keeps outside the sharded tensors, "
      "would be left out): convert it with Megatron-LM first (run the training script with --ckpt-convert-format "
      "torch --ckpt-convert-save DIR) and average each DIR/iter_*/mp_rank_*/model_optim_rng.pt with --key model",
      path, backend->size() > 100 ? backend->substr(0, 100) + "..." : *backend,
      common_pt ? "common.pt" : "the common state among its DCP items"));
}

}  // namespace swavg
