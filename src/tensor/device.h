/*
 * Where tensors are computed: the CPU or one CUDA device. Parsed from the command line's text
 * ("cpu", "cuda", "cuda:N") once, at the edge; everything below sees this struct.
 */
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace swavg {

enum class device_kind { cpu, cuda };

struct device_spec {
  device_kind kind = device_kind::cpu;
  int index = -1;  // cuda:N; -1: the current device

  bool is_cpu() const { return kind == device_kind::cpu; }
  bool operator==(const device_spec& o) const { return kind == o.kind && index == o.index; }
  bool operator!=(const device_spec& o) const { return !(*this == o); }
};

// "cpu", "cuda", "cuda:1"
std::string device_name(const device_spec& d);
// nullopt for anything but cpu, cuda and cuda:N (N a decimal number).
std::optional<device_spec> parse_device(std::string_view text);

}  // namespace swavg
