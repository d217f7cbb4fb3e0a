// Finding a tokenizer's added tokens in text (internal to the data layer).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace hydraulis::data_internal {

// A piece of a text: bytes [begin, end), and the id of the added token it is, or -1 for
// text between added tokens.
struct TextSegment {
  std::size_t begin = 0;
  std::size_t end = 0;
  std::int32_t token_id = -1;
};

// A set of literal tokens matched leftmost-longest, as tokenizers' Aho-Corasick automaton
// with MatchKind::LeftmostLongest does: the match starting earliest wins, the longest of
// those; the scan resumes after it.
class AddedTokenMatcher {
 public:
  // Adds `content` (non-empty) with `id`; a content added twice keeps the later id.
  void Add(std::string_view content, std::int32_t id);
  bool empty() const { return nodes_.size() == 1; }

  // `text` cut into added tokens and the non-empty runs between them, in order.
  std::vector<TextSegment> Split(std::string_view text) const;

 private:
  // A byte trie; node 0 is the root.
  struct Node {
    std::vector<std::pair<unsigned char, std::uint32_t>> children;  // sorted by byte
    std::int32_t token_id = -1;
  };
  std::uint32_t Child(std::uint32_t node, unsigned char byte) const;

  std::vector<Node> nodes_{Node{}};
  bool first_byte_[256] = {};  // whether any token starts with the byte
};

}  // namespace hydraulis::data_internal
