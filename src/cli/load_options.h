/*
 * The options every subcommand that reads checkpoints takes to say which entries it reads and how
 * they are named: --key (the state dict inside a torch.save object), --exclude (entries left out,
 * e.g. a torchtitan checkpoint's optimizer beside the model's weights) and --strip-prefix (once per
 * prefix, from every entry, as PyTorch's consume_prefix_in_state_dict_if_present). Defined once so
 * that average, ema, posthoc-ema, convert, inspect and update-bn read an input the same way.
 */
#pragma once

#include "formats/io/load.h"

namespace CLI {
class App;
}

namespace swavg {

void add_load_options(CLI::App* app, load_options& o);

}  // namespace swavg
