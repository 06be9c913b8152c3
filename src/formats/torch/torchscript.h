/*
 * Reader for TorchScript archives (torch.jit.save of torch.jit.script or torch.jit.trace), without
 * LibTorch and without running anything from the file. LibTorch's jit loader compiles the code/
 * records and runs them (a class's __setstate__, say) at load time; swavg reads the archive as data:
 *
 *   <root>/data.pkl       the module: a __torch__.<class> object (GLOBAL + NEWOBJ) whose BUILD state
 *                         is a dict of its attributes: parameters, buffers, submodules (objects of
 *                         module classes), other values
 *   <root>/data/<key>     storage records, as in torch.save
 *   <root>/code/<a/b>.py  the classes' sources (usually deflated); for each `class X(Module):` the
 *                         lines `__parameters__ = ["weight", ...]` and `__buffers__ = [...]` say
 *                         which attributes are parameters and buffers of __torch__.<a.b>.X
 *   constants.pkl, constants/, version, extra/, .data/, byteorder   (not needed for the state)
 *
 * The tensors come out in LibTorch's state_dict() order: each module's own parameters, then its own
 * buffers (in attribute order), then its submodules, recursively, with dotted names; each marked
 * parameter or buffer. A parameter or buffer whose value is None is left out, as LibTorch does.
 *
 * Checks: every bound the torch.save reader applies to storages and views (torch_storage_reader),
 * code records inflated only up to a bound proportional to the file's size and checked against their size and CRC,
 * module nesting limited to kMaxTorchScriptDepth, each module object walked once (no memo-shared or cyclic module
 * objects). What cannot be read as data is an input_error: a class with __setstate__, a declared
 * parameter missing from the state or not a tensor, a class without code or declarations.
 *
 * LibTorch's loader (src/libtorch/module.cpp, load_module) is used only where a model must run.
 */
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tensor/state_dict.h"

namespace swavg {

class mapped_file;

constexpr int kMaxTorchScriptDepth = 200;                    // module nesting below the root
constexpr uint64_t kMaxTorchScriptCodeRecord = 64ull << 20;  // bytes of one inflated code record
constexpr uint64_t kMaxTorchScriptCodeTotal = 512ull << 20;  // bytes of all inflated code records

// All code records together inflate to at most code_per_input_byte x the file's size + code_base
// bytes, and never more than max_code_total.
struct torchscript_limits {
  int max_depth = kMaxTorchScriptDepth;
  uint64_t max_code_record = kMaxTorchScriptCodeRecord;
  uint64_t max_code_total = kMaxTorchScriptCodeTotal;
  uint64_t code_per_input_byte = 16;
  uint64_t code_base = uint64_t{4} << 20;
};

// What a class statement in code/ declares.
struct torchscript_class {
  bool is_module = false;                            // `class X(Module):`
  bool has_parameters = false, has_buffers = false;  // the declarations were there
  std::vector<std::string> parameters;               // __parameters__
  std::vector<std::string> buffers;                  // __buffers__
  bool has_setstate = false;                         // defines __setstate__
};

// Scans one code record's text for its class statements. `qualifier` is the record's module
// ("__torch__.torch.nn.modules.linear"); keys are qualified class names. A tolerant, linear scanner
// of the declarations only; throws input_error (starting with `context`) for a declaration it cannot
// read or a class defined twice.
std::map<std::string, torchscript_class> scan_torchscript_classes(const std::string& qualifier, std::string_view source,
                                                                  const std::string& context);

// Reads the parameters and buffers of a TorchScript archive. Throws input_error naming the file,
// the record or tensor, expected vs found.
state_dict read_torchscript(const std::shared_ptr<const mapped_file>& file, const torchscript_limits& limits = {});
state_dict read_torchscript(const std::string& path);

}  // namespace swavg
