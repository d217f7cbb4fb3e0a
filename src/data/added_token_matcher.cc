#include "added_token_matcher.h"

#include <algorithm>

namespace hydraulis::data_internal {

constexpr std::uint32_t kNoNode = 0;  // the root is never anyone's child

std::uint32_t AddedTokenMatcher::Child(std::uint32_t node, unsigned char byte) const {
  const auto& children = nodes_[node].children;
  const auto it =
      std::lower_bound(children.begin(), children.end(), byte,
                       [](const auto& child, unsigned char b) { return child.first < b; });
  return it != children.end() && it->first == byte ? it->second : kNoNode;
}

void AddedTokenMatcher::Add(std::string_view content, std::int32_t id) {
  std::uint32_t node = 0;
  for (char c : content) {
    const auto byte = static_cast<unsigned char>(c);
    std::uint32_t child = Child(node, byte);
    if (child == kNoNode) {
      child = static_cast<std::uint32_t>(nodes_.size());
      nodes_.emplace_back();
      auto& children = nodes_[node].children;
      children.insert(
          std::upper_bound(children.begin(), children.end(), byte,
                           [](unsigned char b, const auto& entry) { return b < entry.first; }),
          {byte, child});
    }
    node = child;
  }
  nodes_[node].token_id = id;
  if (!content.empty()) first_byte_[static_cast<unsigned char>(content[0])] = true;
}

std::vector<TextSegment> AddedTokenMatcher::Split(std::string_view text) const {
  std::vector<TextSegment> segments;
  std::size_t run_begin = 0;
  for (std::size_t at = 0; at < text.size();) {
    std::size_t match_end = 0;
    std::int32_t match_id = -1;
    if (first_byte_[static_cast<unsigned char>(text[at])]) {
      std::uint32_t node = 0;
      for (std::size_t i = at; i < text.size(); ++i) {
        node = Child(node, static_cast<unsigned char>(text[i]));
        if (node == kNoNode) break;
        if (nodes_[node].token_id >= 0) {
          match_end = i + 1;
          match_id = nodes_[node].token_id;
        }
      }
    }
    if (match_id < 0) {
      ++at;
      continue;
    }
    if (run_begin < at) segments.push_back({run_begin, at, -1});
    segments.push_back({at, match_end, match_id});
    at = run_begin = match_end;
  }
  if (run_begin < text.size()) segments.push_back({run_begin, text.size(), -1});
  return segments;
}

}  // namespace hydraulis::data_internal
