// Megatron-LM indexed datasets with their tokens: reading PREFIX.bin through the index
// (megatron_index.h) and writing both files in the exact format Megatron-LM reads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hydraulis/data/megatron_index.h"

namespace hydraulis {

// The dtype Megatron-LM's preprocessing picks for a vocabulary of `vocab_size` ids
// (0 to vocab_size - 1): kUInt16 when every id fits (vocab_size <= 65,536), else kInt32.
// InvalidInput when vocab_size < 1 or beyond int32.
MegatronDType MegatronDTypeForVocab(std::int64_t vocab_size);

// The numpy name of `dtype` ("uint16", "int32", "float32", ...), for messages.
std::string_view MegatronDTypeName(MegatronDType dtype);

// PREFIX.idx + PREFIX.bin opened for reading token ids. The index is validated and copied
// into memory (20 bytes per sequence, 8 per document); the .bin is memory-mapped and only
// the pages of the documents read are touched. Immutable after opening, so concurrent
// readers may share one object. Movable, not copyable.
class MegatronDataset {
 public:
  // Opens `prefix` + ".idx" and `prefix` + ".bin". InvalidInput naming the file when the
  // index is malformed (ReadMegatronIndex), its dtype is a float type (token ids are
  // integers), or the .bin's size is not what the index says (the last pointer plus the
  // last length times the dtype's bytes).
  explicit MegatronDataset(const std::string& prefix);
  ~MegatronDataset();
  MegatronDataset(MegatronDataset&& other) noexcept;
  MegatronDataset& operator=(MegatronDataset&& other) noexcept;
  MegatronDataset(const MegatronDataset&) = delete;
  MegatronDataset& operator=(const MegatronDataset&) = delete;

  const std::string& prefix() const;
  MegatronDType dtype() const;
  // Documents in the index, including empty ones (which Megatron-LM may write).
  std::size_t num_documents() const;
  // Tokens in all documents.
  std::int64_t num_tokens() const;

  // Tokens in document `i` (the sum of its sequences' lengths). InvalidInput when
  // i >= num_documents().
  std::int64_t DocumentLength(std::size_t i) const;

  // The token ids of document `i`, its sequences concatenated in order. InvalidInput when
  // i >= num_documents(), or naming the .bin, document and position when an id is negative
  // (possible only with the signed dtypes).
  std::vector<std::int64_t> Document(std::size_t i) const;

  // Where a token id lies outside a model's vocabulary.
  struct IdOutside {
    std::size_t document = 0;
    std::int64_t position = 0;  // token index inside the document
    std::int64_t id = 0;
  };
  // The first token id, in file order, outside [0, vocab_size), or nullopt. Reads the whole
  // .bin (sequentially, memory-mapped) unless its dtype cannot hold such an id (uint16 data
  // for a vocabulary of 65,536 or more), so training refuses data tokenized for another
  // model before it starts instead of at the batch that holds the first such id.
  std::optional<IdOutside> FindIdOutside(std::int64_t vocab_size) const;
  // InvalidInput naming the .bin, document, position and id when FindIdOutside finds one,
  // and `model_source` (the file that gave the vocabulary) as the model it does not fit.
  void RequireIdsInVocabulary(std::int64_t vocab_size, const std::string& model_source) const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Writes PREFIX.bin and PREFIX.idx one document at a time, so a corpus never has to fit
// in memory (only 4 bytes per document are kept for the index). Each document is one
// sequence; document_indices are 0..n, as Megatron-LM's preprocess_data.py writes them.
//
// The files appear atomically: tokens go to PREFIX.bin.tmp, Finish writes PREFIX.idx.tmp
// and renames the .bin and then the .idx into place, so a reader that finds the new .idx
// also finds the new .bin. Until Finish, existing PREFIX.bin/.idx are untouched, and a
// writer destroyed without Finish (an error, an exception) removes its temporaries.
class MegatronDatasetWriter {
 public:
  // Creates PREFIX.bin.tmp. InvalidInput when `dtype` is a float type or the file cannot
  // be created (naming it).
  MegatronDatasetWriter(const std::string& prefix, MegatronDType dtype);
  ~MegatronDatasetWriter();
  MegatronDatasetWriter(const MegatronDatasetWriter&) = delete;
  MegatronDatasetWriter& operator=(const MegatronDatasetWriter&) = delete;

  // Appends one document (empty documents are allowed by the format and kept). Every id
  // is checked first, so on InvalidInput (an id outside the dtype's range 0..max, naming
  // the .bin, the document and the position; a document over INT32_MAX tokens) nothing
  // of the document was written and the writer can go on. InvalidInput on a write error.
  // InternalError after Finish.
  void AddDocument(std::span<const std::int64_t> tokens);

  // Writes the index and renames both files into place. InvalidInput naming the file on
  // an I/O error (the temporaries are then removed). InternalError when called twice.
  void Finish();

  MegatronDType dtype() const { return dtype_; }
  std::int64_t num_documents() const { return static_cast<std::int64_t>(lengths_.size()); }
  std::int64_t num_tokens() const { return num_tokens_; }

 private:
  void RemoveTemporaries() noexcept;

  std::string bin_path_;
  std::string idx_path_;
  std::string bin_tmp_;
  std::string idx_tmp_;
  MegatronDType dtype_;
  std::int64_t max_id_;
  std::ofstream bin_;
  std::vector<std::int32_t> lengths_;  // tokens per document (= per sequence)
  std::int64_t num_tokens_ = 0;
  std::string buffer_;  // one document's encoded bytes, reused
  bool finished_ = false;
};

}  // namespace hydraulis
