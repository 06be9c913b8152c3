#include "cli/load_options.h"

#include <CLI/CLI.hpp>

namespace swavg {

void add_load_options(CLI::App* app, load_options& o) {
  app->add_option("--key", o.key, "Dotted path of the state dict inside torch.save objects, e.g. model or ema.module");
  app->add_option("--exclude", o.exclude,
                  "Leave out the entry ENTRY and everything under ENTRY. (names as in the file, before "
                  "--strip-prefix), e.g. torchtitan's optimizer, train_state, lr_scheduler and dataloader beside "
                  "the model's weights; repeatable")
      ->type_name("ENTRY");
  app->add_option("--strip-prefix", o.strip_prefixes,
                  "Remove this prefix, once, from the start of every name that has it (tensors and non-tensor "
                  "entries), e.g. module. or _orig_mod.; repeatable, applied in the order given")
      ->type_name("PREFIX");
}

}  // namespace swavg
