// The largest document length (tokens) the length sources accept. Far beyond any model's
// context, and small enough that every sum of lengths the layers above take (over a
// batch, a plan, a dataset of fewer than 2^31 documents) fits in int64, so token counts
// cannot wrap. Every parser of lengths (text, JSON lines, Megatron-LM index) rejects a
// longer document at read time, naming where it was read.
#pragma once

#include <cstdint>
#include <string>

namespace hydraulis {

// 2^32 tokens: 2^32 * 2^31 documents = 2^63 is where an int64 sum could first overflow.
inline constexpr std::int64_t kMaxDocumentTokens = std::int64_t{1} << 32;

// The rule's message for `tokens` > kMaxDocumentTokens, which callers prefix with where the
// length was read: "a length must be at most 4294967296 tokens (2^32), got <tokens>".
std::string DocumentTooLongMessage(std::int64_t tokens);
// The same for a length shown as written (`shown`), when it is too large even for int64
// (2^63, 1e30, 99999999999999999999) and so never became a number.
std::string DocumentTooLongMessage(const std::string& shown);

}  // namespace hydraulis
