// GPT-2's byte-level alphabet (internal to the data layer), shared by the GPT-2 BPE
// tokenizer and Hugging Face's ByteLevel pre-tokenizer.
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace hydraulis::data_internal {

// `code_point` (below U+10000) in UTF-8.
std::string Utf8(std::uint32_t code_point);

// GPT-2's bytes_to_unicode: the printable bytes ('!'..'~', 0xa1..0xac, 0xae..0xff) stand
// for themselves; the other 68 bytes, in increasing order, map to U+0100, U+0101, ...
// so that every symbol is one printable character and none is a space. Index: the byte.
std::array<std::string, 256> ByteLevelSymbols();

}  // namespace hydraulis::data_internal
