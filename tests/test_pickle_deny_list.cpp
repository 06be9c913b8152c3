// The deny list (formats/pickle/pickle_deny_list.cpp): globals that run code when a pickle calls them,
// matched by whole module or by module and name.
#include <catch2/catch.hpp>

#include <vector>

#include "formats/pickle/pickle_deny_list.h"

using namespace swavg;

TEST_CASE("callables that run code when a pickle is loaded are known by module and name", "[pickle][hostile]") {
  struct named {
    const char* global;
    bool runs;
  };
  const std::vector<named> cases = {
      {"os.system", true},
      {"posix.system", true},
      {"subprocess.Popen", true},
      {"builtins.eval", true},
      {"__builtin__.exec", true},
      {"builtins.getattr", true},
      {"torch.load", true},
      {"torch.hub.load", true},
      {"torch.jit.load", true},
      {"numpy.load", true},
      {"io.open", true},
      {"os.path.join", true},
      {"builtins.dict", false},
      {"builtins.set", false},
      {"io.BytesIO", false},
      {"argparse.Namespace", false},
      {"collections.OrderedDict", false},
      {"osx.system", false},
      {"torch.FloatStorage", false},
      {"torch.loads", false},
      {"numpy.core.multiarray.scalar", false},
      {"os", false},
      {"subprocessing.Popen", false},
  };
  for (const auto& c : cases) {
    INFO(c.global);
    CHECK(runs_code_when_loaded(c.global) == c.runs);
  }
}
