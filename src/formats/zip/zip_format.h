/*
 * The layout of the ZIP records PyTorch's archives are made of (PKWARE's APPNOTE.TXT, section 4.3):
 * signatures, fixed sizes, the ZIP64 extra field and its sentinels, the general-purpose flags. Shared
 * by zip_reader and zip_writer, with how both print a record's name in a message.
 */
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace swavg::zip_format {

inline constexpr uint32_t kLocalSig = 0x04034b50;
inline constexpr uint32_t kCentralSig = 0x02014b50;
inline constexpr uint32_t kEndSig = 0x06054b50;
inline constexpr uint32_t kEnd64Sig = 0x06064b50;
inline constexpr uint32_t kLocator64Sig = 0x07064b50;
inline constexpr uint32_t kDescriptorSig = 0x08074b50;

inline constexpr uint64_t kLocalSize = 30;
inline constexpr uint64_t kCentralSize = 46;
inline constexpr uint64_t kEndSize = 22;
inline constexpr uint64_t kEnd64Size = 56;
inline constexpr uint64_t kEnd64RecordSize = kEnd64Size - 12;  // the size field counts the bytes after it
inline constexpr uint64_t kLocator64Size = 20;
inline constexpr uint64_t kDescriptorSize = 16;
inline constexpr uint64_t kDescriptorSize64 = 24;
inline constexpr uint64_t kMaxComment = 0xFFFF;

inline constexpr uint16_t kZip64ExtraId = 0x0001;
inline constexpr uint32_t kMax32 = 0xFFFFFFFF;
inline constexpr uint16_t kMax16 = 0xFFFF;

inline constexpr uint16_t kFlagEncrypted = 0x0001;
inline constexpr uint16_t kFlagDescriptor = 0x0008;
inline constexpr uint16_t kFlagPatch = 0x0020;
inline constexpr uint16_t kFlagStrongEncryption = 0x0040;
inline constexpr uint16_t kFlagUtf8 = 0x0800;
inline constexpr uint16_t kFlagMaskedHeader = 0x2000;

// A name from the file, safe to print: control bytes escaped (and bytes past ASCII unless the name
// is valid UTF-8), long names cut between characters.
std::string quoted(std::string_view name);

// True when every byte is ASCII (names with other bytes carry the UTF-8 flag).
bool is_ascii(std::string_view s);

}  // namespace swavg::zip_format
