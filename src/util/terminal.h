/*
 * What swavg asks of the terminal: whether a stream is one, how wide it is (for the progress bar
 * and --help), and whether lines may be coloured (--color, NO_COLOR: https://no-color.org).
 */
#pragma once

namespace swavg {

enum class color_mode { automatic, always, never };

const char* color_mode_name(color_mode m);

bool is_terminal(int fd);

// The columns of the terminal on `fd` (TIOCGWINSZ), else $COLUMNS, else 80.
int terminal_columns(int fd);

// Whether lines written to `fd` get colour: `always` yes, `never` no; `automatic` when `fd` is a
// terminal, $NO_COLOR is unset or empty and $TERM is not "dumb".
bool use_color(color_mode mode, int fd);

}  // namespace swavg
