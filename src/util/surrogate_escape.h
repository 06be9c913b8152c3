/*
 * File names as Python's str holds them. A Linux file name is bytes; Python decodes it with the
 * file system encoding's surrogateescape handler (os.fsdecode): valid UTF-8 as it is, each other
 * byte XX as the lone surrogate U+DCXX. pickle writes such a str in UTF-8 with its surrogates
 * encoded as any code point (surrogatepass: U+DCE9 as ED B3 A9). A file name swavg writes into a
 * pickle that torch reads back as a path (a DCP .metadata's relative_path and checkpoint_id) goes
 * through surrogate_escaped(); surrogate_unescaped() is its inverse, for such a name read back.
 * JSON carries the same escape as \udcXX (util/json_bytes.h).
 */
#pragma once

#include <string>
#include <string_view>

namespace swavg {

// `bytes` as the UTF-8 (surrogates allowed) of os.fsdecode(bytes): each byte that is not part of
// valid UTF-8 as the three bytes of U+DCXX. Valid UTF-8 is returned as it is.
std::string surrogate_escaped(std::string_view bytes);
// The inverse: each encoded U+DC80-U+DCFF as its byte, everything else as it is.
std::string surrogate_unescaped(std::string_view text);

}  // namespace swavg
