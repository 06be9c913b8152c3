/*
 * The deny list: globals ("module.name") that run code, start processes or touch files when a
 * pickle calls them (os.system, builtins.eval, subprocess.Popen, torch.load, ...). The unpickler
 * never calls anything whatever the list says; writers (formats/torch/torch_writer.cpp) use it to refuse
 * to pass such a call on into an output.
 */
#pragma once

#include <string>

namespace swavg {

// True for a global ("module.name") that runs code, starts processes or touches files when a
// pickle calls it (os.system, builtins.eval, subprocess.Popen, torch.load, ...). swavg never calls
// anything; writers use this to refuse to pass such a call on into an output. A list of known
// dangers, not a proof of safety: what is not on it is still never run by swavg.
bool runs_code_when_loaded(const std::string& global);

}  // namespace swavg
