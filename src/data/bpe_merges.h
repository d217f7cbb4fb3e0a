// Byte-pair merges as Hugging Face tokenizers applies them (internal to the data layer).
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

namespace hydraulis::data_internal {

// The merge table of a BPE model: (left id, right id) -> (rank, merged id).
class BpeMerges {
 public:
  // Records that `left` followed by `right` merges into `merged`, at `rank` (lower merges
  // first). A pair added again takes the later rank and result, as tokenizers' map does.
  void Add(std::int32_t left, std::int32_t right, std::uint32_t rank, std::int32_t merged);

  std::size_t size() const { return merges_.size(); }

  // Merges `word` (symbol ids) in place as tokenizers' Word::merge_all does: repeatedly the
  // applicable pair of lowest rank, the leftmost of equal ranks, one occurrence at a time,
  // until no adjacent pair is in the table. O(n log n) in the word's length.
  void MergeWord(std::vector<std::int32_t>& word) const;

 private:
  struct Merge {
    std::uint32_t rank;
    std::int32_t merged;
  };
  static std::uint64_t Key(std::int32_t left, std::int32_t right) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(left)) << 32) |
           static_cast<std::uint32_t>(right);
  }
  const Merge* Find(std::int32_t left, std::int32_t right) const;

  std::unordered_map<std::uint64_t, Merge> merges_;
};

}  // namespace hydraulis::data_internal
