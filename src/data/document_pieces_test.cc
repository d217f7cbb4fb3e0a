// Long documents in context-length pieces: exact pieces on small cases, every next-token
// target in exactly one piece on random and real lengths, and the sampler that takes them
// whole, so that an epoch trains every target of the corpus once.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <vector>

#include "../base/test_support.h"
#include "hydraulis/base/error.h"
#include "hydraulis/base/rng.h"
#include "hydraulis/data/batch_sampler.h"
#include "hydraulis/data/document_pieces.h"
#include "hydraulis/data/lengths.h"

namespace hydraulis {
namespace {

using Lengths = std::vector<std::int64_t>;

struct Span {
  std::int64_t document, offset, length;
  bool operator==(const Span&) const = default;
};

std::vector<Span> Spans(const std::vector<DocumentPiece>& pieces) {
  std::vector<Span> out;
  for (const DocumentPiece& p : pieces) out.push_back({p.document, p.offset, p.length});
  return out;
}

TEST(DocumentPiecesTest, SplitOverlapsByOneToken) {
  // 10 tokens at context 4: [0,4) [3,7) [6,10), targets 1-3, 4-6, 7-9. 11 tokens: a last
  // piece of 2. 5 tokens: [0,4) [3,5). 4 tokens and 1 token: whole.
  const Lengths lengths{10, 11, 5, 4, 1};
  EXPECT_EQ(Spans(MakeDocumentPieces(lengths, 4, LongDocuments::kSplit, "t")),
            (std::vector<Span>{{0, 0, 4},
                               {0, 3, 4},
                               {0, 6, 4},
                               {1, 0, 4},
                               {1, 3, 4},
                               {1, 6, 4},
                               {1, 9, 2},
                               {2, 0, 4},
                               {2, 3, 2},
                               {3, 0, 4},
                               {4, 0, 1}}));
  EXPECT_EQ(Spans(MakeDocumentPieces(lengths, 4, LongDocuments::kTruncate, "t")),
            (std::vector<Span>{{0, 0, 10}, {1, 0, 11}, {2, 0, 5}, {3, 0, 4}, {4, 0, 1}}));
}

// Every target position 1..s-1 of every document in exactly one piece; pieces within
// the context and their documents; documents within the context whole.
void ExpectEveryTargetOnce(const Lengths& lengths, std::int64_t max_len) {
  const std::vector<DocumentPiece> pieces =
      MakeDocumentPieces(lengths, max_len, LongDocuments::kSplit, "t");
  std::vector<std::int64_t> targets(lengths.size(), 0);
  std::int64_t previous_end = 0, previous_document = -1;
  for (const DocumentPiece& p : pieces) {
    const std::int64_t s = lengths[static_cast<std::size_t>(p.document)];
    ASSERT_LE(p.length, max_len);
    ASSERT_GE(p.offset, 0);
    ASSERT_LE(p.offset + p.length, s);
    if (s <= max_len) {
      ASSERT_EQ(p.offset, 0);
      ASSERT_EQ(p.length, s);
    } else {
      ASSERT_GE(p.length, 2);
    }
    // Consecutive pieces of one document share exactly one token.
    if (p.document == previous_document) {
      ASSERT_EQ(p.offset, previous_end - 1);
    } else {
      ASSERT_EQ(p.offset, 0);
      ASSERT_EQ(p.document, previous_document + 1);
    }
    previous_document = p.document;
    previous_end = p.offset + p.length;
    targets[static_cast<std::size_t>(p.document)] += p.length - 1;
  }
  ASSERT_EQ(previous_document + 1, static_cast<std::int64_t>(lengths.size()));
  for (std::size_t d = 0; d < lengths.size(); ++d) {
    ASSERT_EQ(targets[d], lengths[d] - 1) << "document " << d;
  }
}

TEST(DocumentPiecesTest, EveryTargetInExactlyOnePieceOnRandomLengths) {
  Rng rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    const std::int64_t max_len = 2 + static_cast<std::int64_t>(rng.Below(40));
    Lengths lengths(1 + rng.Below(30));
    for (auto& s : lengths) s = 1 + static_cast<std::int64_t>(rng.Below(200));
    SCOPED_TRACE("trial " + std::to_string(trial));
    ExpectEveryTargetOnce(lengths, max_len);
  }
}

TEST(DocumentPiecesTest, EveryTargetInExactlyOnePieceOnRealLengths) {
  const Lengths lengths = ReadLengths(test_support::RealLengthsPath());
  for (std::int64_t max_len : {512, 4096, 32768}) ExpectEveryTargetOnce(lengths, max_len);
}

TEST(DocumentPiecesTest, RejectNamesTheFirstLongDocumentAndTheCount) {
  const std::string message = test_support::InvalidInputMessage([] {
    MakeDocumentPieces(Lengths{3, 9, 2, 12}, 8, LongDocuments::kReject, "--data c");
  });
  EXPECT_NE(message.find("--data c: document 1 has 9 tokens, more than the context length 8 "
                         "(2 such document(s))"),
            std::string::npos)
      << message;
  EXPECT_EQ(MakeDocumentPieces(Lengths{3, 8}, 8, LongDocuments::kReject, "c").size(), 2u);
}

TEST(DocumentPiecesTest, RejectsBadInput) {
  test_support::InvalidInputMessage(
      [] { MakeDocumentPieces(Lengths{3}, 1, LongDocuments::kSplit, "c"); });
  EXPECT_NE(test_support::InvalidInputMessage([] {
              MakeDocumentPieces(Lengths{3, 0}, 8, LongDocuments::kSplit, "c");
            }).find("c: document 1 has length 0"),
            std::string::npos);
  EXPECT_EQ(ParseName("split", kLongDocumentsNames, "--long-documents"), LongDocuments::kSplit);
  EXPECT_NE(test_support::InvalidInputMessage([] {
              ParseName("cut", kLongDocumentsNames, "--long-documents");
            }).find("--long-documents: expected split, truncate or reject"),
            std::string::npos);
}

TEST(DocumentPiecesTest, PieceTokensAreTheStretch) {
  const std::vector<std::int64_t> doc{10, 11, 12, 13, 14};
  EXPECT_EQ(PieceTokens(doc, {0, 3, 2}), (std::vector<std::int64_t>{13, 14}));
  EXPECT_EQ(PieceTokens(doc, {0, 0, 5}), doc);
  EXPECT_THROW(PieceTokens(doc, {0, 4, 2}), InternalError);
}

// The sampler with whole_documents never cuts: each batch is within half a piece of the
// budget (or one piece), and each epoch's batches hold every piece once, whole. With the
// pieces, every target of the corpus is trained once per epoch.
TEST(DocumentPiecesTest, WholeDocumentSamplingTrainsEveryTargetOncePerEpoch) {
  Rng rng(9);
  Lengths lengths(400);
  for (auto& s : lengths) s = 1 + static_cast<std::int64_t>(rng.Below(3000));
  const std::int64_t max_len = 1024;
  const std::vector<DocumentPiece> pieces =
      MakeDocumentPieces(lengths, max_len, LongDocuments::kSplit, "t");
  Lengths piece_lengths;
  for (const DocumentPiece& p : pieces) piece_lengths.push_back(p.length);
  for (std::int64_t budget : {1, 700, 4096, 50'000}) {
    SamplerOptions options{budget, max_len, 3};
    options.whole_documents = true;
    BatchSampler sampler(piece_lengths, options);
    // The stream of pieces, batch after batch (a batch may run on into the next epoch).
    std::vector<std::int64_t> stream;
    while (stream.size() < pieces.size()) {
      const SampledBatch b = sampler.Next();
      std::int64_t tokens = 0;
      for (std::size_t i = 0; i < b.lengths.size(); ++i) {
        const DocumentPiece& p = pieces[static_cast<std::size_t>(b.dataset_indices[i])];
        ASSERT_EQ(b.lengths[i], p.length);  // nothing cut
        tokens += b.lengths[i];
        stream.push_back(b.dataset_indices[i]);
      }
      // Within half a piece of the budget, or one piece over it.
      ASSERT_TRUE(std::abs(tokens - budget) * 2 <= max_len || b.lengths.size() == 1)
          << tokens << " against " << budget;
    }
    std::map<std::int64_t, std::int64_t> targets;  // document: targets trained in epoch 0
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      const DocumentPiece& p = pieces[static_cast<std::size_t>(stream[i])];
      targets[p.document] += p.length - 1;
    }
    for (std::size_t d = 0; d < lengths.size(); ++d) {
      ASSERT_EQ(targets[static_cast<std::int64_t>(d)], lengths[d] - 1) << "document " << d;
    }
  }
}

}  // namespace
}  // namespace hydraulis
