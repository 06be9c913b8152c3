#include "tensor/device.h"

#include <charconv>

namespace swavg {

std::string device_name(const device_spec& d) {
  if (d.is_cpu()) return "cpu";
  return d.index < 0 ? "cuda" : "cuda:" + std::to_string(d.index);
}

std::optional<device_spec> parse_device(std::string_view text) {
  if (text == "cpu") return device_spec{};
  if (text == "cuda") return device_spec{device_kind::cuda, -1};
  constexpr std::string_view kCuda = "cuda:";
  if (text.substr(0, kCuda.size()) != kCuda) return std::nullopt;
  const std::string_view digits = text.substr(kCuda.size());
  int index = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
  if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size() || index < 0) return std::nullopt;
  return device_spec{device_kind::cuda, index};
}

}  // namespace swavg
