#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "../base/test_support.h"
#include "hydraulis/base/error.h"
#include "hydraulis/base/rng.h"
#include "hydraulis/data/batch_sampler.h"
#include "hydraulis/data/document_length.h"
#include "hydraulis/data/lengths.h"

namespace hydraulis {
namespace {

using Lengths = std::vector<std::int64_t>;

const std::string kWikipediaLengths = test_support::SharedLengthsPath();

using test_support::InvalidInputMessage;

void ExpectParseError(const std::string& text, const std::string& fragment) {
  SCOPED_TRACE("input: " + text);
  const std::string msg = InvalidInputMessage([&] { ParseLengths(text, "docs.txt"); });
  EXPECT_EQ(msg.rfind("docs.txt", 0), 0u) << msg;
  EXPECT_NE(msg.find(fragment), std::string::npos) << msg << "\nexpected: " << fragment;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

// ---------------------------------------------------------------------------------------
// ParseLengths: line format.

TEST(ParseLengthsTest, OnePerLine) {
  EXPECT_EQ(ParseLengths("100\n200\n300\n", "a.txt"), (Lengths{100, 200, 300}));
  EXPECT_EQ(ParseLengths("7", "a.txt"), (Lengths{7}));
  EXPECT_EQ(ParseLengths("1\n2", "a.txt"), (Lengths{1, 2}));
  EXPECT_EQ(ParseLengths("4294967296\n", "a.txt"), (Lengths{kMaxDocumentTokens}));
}

// Lengths beyond kMaxDocumentTokens are rejected where they are read, so no later sum of
// lengths can wrap (two of 2^63 - 1 once planned with "-87042 tokens lost").
TEST(ParseLengthsTest, LengthsOverTheMaximumNameTheLineAndValue) {
  ExpectParseError("5\n4294967297\n", "docs.txt:2: a length must be at most 4294967296 tokens");
  ExpectParseError("9223372036854775807\n9223372036854775807\n",
                   "docs.txt:1: a length must be at most 4294967296 tokens (2^32), got "
                   "9223372036854775807");
  ExpectParseError("[1, 4294967297]", "docs.txt: [1]: a length must be at most 4294967296");
  EXPECT_EQ(ParseLengths("[4294967296]", "a.json"), (Lengths{kMaxDocumentTokens}));
  EXPECT_EQ(DocumentTooLongMessage(std::int64_t{1} << 40),
            "a length must be at most 4294967296 tokens (2^32), got 1099511627776");
}

// A length too large even for int64 is "too long", naming where and the value as written:
// unsigned JSON integers past INT64_MAX used to wrap to negatives ("must be an integer >= 1,
// got 9223372036854775808"), and 20 digits on a line read as malformed.
TEST(ParseLengthsTest, LengthsBeyondInt64AreTooLongNotMalformed) {
  for (const char* text : {"[9223372036854775808]", "[18446744073709551615]",
                           "[18446744073709551616]", "[1e30]", "[4294967297.0]"}) {
    ExpectParseError(text,
                     "docs.txt: [0]: a length must be at most 4294967296 tokens (2^32), got ");
  }
  ExpectParseError("[1, 9223372036854775808]", "got 9223372036854775808");
  ExpectParseError("5\n99999999999999999999\n",
                   "docs.txt:2: a length must be at most 4294967296 tokens (2^32), got "
                   "'99999999999999999999'");
  // Still malformed, not too long: a negative beyond int64, a fraction, a negative.
  ExpectParseError("-99999999999999999999\n", "docs.txt:1: a length must be an integer >= 1");
  ExpectParseError("[-9223372036854775809]", "a length must be an integer >= 1");
  ExpectParseError("[2.5]", "a length must be an integer >= 1, got 2.5");
  EXPECT_EQ(ParseLengths("[3.0]", "a.json"), (Lengths{3}));
}

TEST(ParseLengthsTest, SkipsBlankLinesAndComments) {
  const std::string text =
      "# token lengths\n"
      "\n"
      "100\n"
      "   \n"
      "  # indented comment 5\n"
      "\t200\t\n"
      "#300\n"
      "  400  \n"
      "\n\n";
  EXPECT_EQ(ParseLengths(text, "a.txt"), (Lengths{100, 200, 400}));
}

TEST(ParseLengthsTest, AcceptsCrLf) {
  EXPECT_EQ(ParseLengths("1\r\n22\r\n\r\n# c\r\n333\r\n", "a.txt"), (Lengths{1, 22, 333}));
  EXPECT_EQ(ParseLengths("5\r\n6", "a.txt"), (Lengths{5, 6}));
}

TEST(ParseLengthsTest, LineErrorsNameSourceAndLine) {
  ExpectParseError("10\nabc\n", "docs.txt:2:");
  ExpectParseError("10\nabc\n", "abc");
  // Blank lines and comments still count as lines.
  ExpectParseError("# header\n\n5\n0\n", "docs.txt:4:");
  ExpectParseError("# header\n\n5\n0\n", "'0'");
  ExpectParseError("-3\n", "docs.txt:1:");
  ExpectParseError("-3\n", "-3");
  ExpectParseError("1\r\n2\r\nx7\r\n", "docs.txt:3:");
  ExpectParseError("1\r\n2\r\nx7\r\n", "'x7'");
  ExpectParseError("1.5\n", "docs.txt:1:");
  ExpectParseError("12abc\n", "12abc");
  ExpectParseError("1\n2 3\n", "docs.txt:2:");
  ExpectParseError("99999999999999999999\n", "docs.txt:1:");
}

TEST(ParseLengthsTest, EmptyInputIsAnError) {
  for (const std::string text : {"", "\n", "  \n\n", "# only a comment\n", "\r\n# x\r\n"}) {
    SCOPED_TRACE("input: '" + text + "'");
    const std::string msg = InvalidInputMessage([&] { ParseLengths(text, "empty.txt"); });
    EXPECT_EQ(msg.rfind("empty.txt", 0), 0u) << msg;
  }
}

// ---------------------------------------------------------------------------------------
// ParseLengths: JSON arrays.

TEST(ParseLengthsTest, JsonArray) {
  EXPECT_EQ(ParseLengths("[5, 6, 7]", "a.json"), (Lengths{5, 6, 7}));
  EXPECT_EQ(ParseLengths("\n  [\n 1,\n 20000\n]\n", "a.json"), (Lengths{1, 20000}));
  EXPECT_EQ(ParseLengths("\r\n[3]\r\n", "a.json"), (Lengths{3}));
}

TEST(ParseLengthsTest, JsonErrorsNameSourceAndIndex) {
  ExpectParseError("[1, 0, 3]", ": [1]:");
  ExpectParseError("[1, 2, -2]", ": [2]:");
  ExpectParseError("[1, \"2\"]", ": [1]:");
  ExpectParseError("[2.5]", ": [0]:");
  ExpectParseError("[4, [1]]", ": [1]:");
  ExpectParseError("[4, null]", ": [1]:");
  ExpectParseError("[1, 2", "invalid JSON");
  ExpectParseError("[1, 2,]", "invalid JSON");
  const std::string msg = InvalidInputMessage([] { ParseLengths("[]", "empty.json"); });
  EXPECT_EQ(msg.rfind("empty.json", 0), 0u) << msg;
}

TEST(ParseLengthsTest, JsonAndLinesAgree) {
  Lengths lengths;
  Rng rng(5);
  std::string lines, json = "[";
  for (int i = 0; i < 500; ++i) {
    lengths.push_back(1 + static_cast<std::int64_t>(rng.Below(50'000)));
    lines += std::to_string(lengths.back()) + "\n";
    json += (i ? "," : "") + std::to_string(lengths.back());
  }
  json += "]";
  EXPECT_EQ(ParseLengths(lines, "l.txt"), lengths);
  EXPECT_EQ(ParseLengths(json, "l.json"), lengths);
}

TEST(ReadLengthsTest, MissingFileNamesThePath) {
  const std::string path = std::string(HYDRAULIS_SOURCE_DIR) + "/no/such/lengths.txt";
  const std::string msg = InvalidInputMessage([&] { ReadLengths(path); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
}

TEST(ReadLengthsTest, RealWikipediaLengths) {
  if (!std::filesystem::exists(kWikipediaLengths)) {
    GTEST_SKIP() << kWikipediaLengths << " is absent";
  }
  const Lengths data = ReadLengths(kWikipediaLengths);
  // Documented in shared/data/README.md.
  EXPECT_EQ(data.size(), 1'000'000u);
  EXPECT_EQ(*std::max_element(data.begin(), data.end()), 1'823'777);
  EXPECT_GE(*std::min_element(data.begin(), data.end()), 1);
  const double mean =
      static_cast<double>(std::accumulate(data.begin(), data.end(), std::int64_t{0})) /
      static_cast<double>(data.size());
  EXPECT_NEAR(mean, 1014, 1);
}

// ---------------------------------------------------------------------------------------
// BatchSampler.

Lengths SyntheticDataset(std::size_t n, std::uint64_t seed, std::int64_t max_len) {
  Rng rng(seed);
  Lengths out(n);
  for (auto& x : out)
    x = 1 + static_cast<std::int64_t>(rng.Below(static_cast<std::uint64_t>(max_len)));
  return out;
}

// Checks one batch: the tokens add up to the budget exactly, every length is the
// document's length cut to max_len, except the last, which may be cut further.
void CheckBatch(const SampledBatch& b, std::span<const std::int64_t> data,
                const SamplerOptions& o) {
  ASSERT_FALSE(b.lengths.empty());
  ASSERT_EQ(b.lengths.size(), b.dataset_indices.size());
  std::int64_t sum = 0;
  for (std::size_t i = 0; i < b.lengths.size(); ++i) {
    const std::int64_t idx = b.dataset_indices[i];
    ASSERT_GE(idx, 0);
    ASSERT_LT(idx, static_cast<std::int64_t>(data.size()));
    const std::int64_t full = std::min(data[static_cast<std::size_t>(idx)], o.max_len);
    EXPECT_GE(b.lengths[i], 1) << i;
    EXPECT_LE(b.lengths[i], o.max_len) << i;
    if (i + 1 < b.lengths.size()) {
      EXPECT_EQ(b.lengths[i], full) << "only the last document may be cut to the budget, " << i;
    } else {
      EXPECT_LE(b.lengths[i], full);
    }
    sum += b.lengths[i];
  }
  EXPECT_EQ(sum, o.tokens_per_batch);
}

bool SameBatch(const SampledBatch& a, const SampledBatch& b) {
  return a.lengths == b.lengths && a.dataset_indices == b.dataset_indices;
}

TEST(BatchSamplerTest, EveryBatchFillsTheBudgetExactly) {
  const Lengths data = SyntheticDataset(300, 11, 5000);
  for (std::int64_t budget : {1, 999, 4096, 20'000, 123'457}) {
    for (std::int64_t max_len : {1, 700, 4096, 1'000'000}) {
      SCOPED_TRACE(std::to_string(budget) + " tokens, max_len " + std::to_string(max_len));
      const SamplerOptions o{budget, max_len, 3};
      BatchSampler sampler(data, o);
      for (int step = 0; step < 25; ++step) CheckBatch(sampler.Next(), data, o);
    }
  }
}

TEST(BatchSamplerTest, LastDocumentIsTruncatedToTheBudget) {
  const Lengths data = {100, 100, 100};
  const SamplerOptions o{250, 1000, 1};
  BatchSampler sampler(data, o);
  const SampledBatch b = sampler.Next();
  EXPECT_EQ(b.lengths, (Lengths{100, 100, 50}));
  std::set<std::int64_t> distinct(b.dataset_indices.begin(), b.dataset_indices.end());
  EXPECT_EQ(distinct.size(), 3u);
  // A single document longer than the budget is cut to it.
  const Lengths one = {1'000'000};
  BatchSampler big(one, {4096, 32'768, 1});
  for (int i = 0; i < 3; ++i) {
    const SampledBatch x = big.Next();
    EXPECT_EQ(x.lengths, (Lengths{4096}));
    EXPECT_EQ(x.dataset_indices, (Lengths{0}));
  }
}

TEST(BatchSamplerTest, DocumentsAreCutToMaxLen) {
  const Lengths data = {50'000, 10, 70'000, 20, 32'768, 30'000};
  const SamplerOptions o{40'000, 32'768, 9};
  BatchSampler sampler(data, o);
  bool saw_cut = false;
  for (int step = 0; step < 30; ++step) {
    const SampledBatch b = sampler.Next();
    CheckBatch(b, data, o);
    for (std::size_t i = 0; i + 1 < b.lengths.size(); ++i) {
      saw_cut |=
          b.lengths[i] == 32'768 && data[static_cast<std::size_t>(b.dataset_indices[i])] > 32'768;
    }
  }
  EXPECT_TRUE(saw_cut);
}

TEST(BatchSamplerTest, SameSeedSameBatches) {
  const Lengths data = SyntheticDataset(1000, 2, 8000);
  const SamplerOptions o{30'000, 4096, 42};
  BatchSampler a(data, o), b(data, o);
  for (int step = 0; step < 40; ++step) {
    const SampledBatch x = a.Next(), y = b.Next();
    ASSERT_TRUE(SameBatch(x, y)) << "step " << step;
    EXPECT_EQ(a.position().epoch, b.position().epoch);
    EXPECT_EQ(a.position().offset, b.position().offset);
  }
}

TEST(BatchSamplerTest, DifferentSeedsDiffer) {
  const Lengths data = SyntheticDataset(1000, 2, 8000);
  BatchSampler a(data, {30'000, 4096, 1}), b(data, {30'000, 4096, 2});
  int differing = 0;
  for (int step = 0; step < 10; ++step) differing += SameBatch(a.Next(), b.Next()) ? 0 : 1;
  EXPECT_GE(differing, 9);
}

TEST(BatchSamplerTest, RestoreReproducesTheFollowingBatches) {
  const Lengths data = SyntheticDataset(200, 8, 3000);
  const SamplerOptions o{25'000, 2048, 17};
  BatchSampler original(data, o);
  // 200 documents of ~1,000 tokens: about ten batches an epoch, so the checkpoints
  // below fall inside and across epoch boundaries.
  for (int checkpoint : {0, 1, 5, 9, 23}) {
    SCOPED_TRACE("checkpoint after " + std::to_string(checkpoint) + " batches");
    BatchSampler a(data, o);
    for (int i = 0; i < checkpoint; ++i) a.Next();
    const SamplerPosition saved = a.position();
    std::vector<SampledBatch> expected;
    for (int i = 0; i < 20; ++i) expected.push_back(a.Next());
    EXPECT_GT(a.position().epoch, saved.epoch);

    // A fresh sampler with the same options, restored to the saved position.
    BatchSampler fresh(data, o);
    fresh.Restore(saved);
    EXPECT_EQ(fresh.position().epoch, saved.epoch);
    EXPECT_EQ(fresh.position().offset, saved.offset);
    for (int i = 0; i < 20; ++i) ASSERT_TRUE(SameBatch(fresh.Next(), expected[i])) << i;

    // The same sampler rewound to the saved position.
    a.Restore(saved);
    for (int i = 0; i < 20; ++i) ASSERT_TRUE(SameBatch(a.Next(), expected[i])) << i;

    // A sampler that already ran further, restored backwards.
    for (int i = 0; i < 50; ++i) original.Next();
    original.Restore(saved);
    for (int i = 0; i < 20; ++i) ASSERT_TRUE(SameBatch(original.Next(), expected[i])) << i;
  }
}

TEST(BatchSamplerTest, RestoreAtTheEndOfAnEpoch) {
  const Lengths data = {10, 20, 30, 40};
  const SamplerOptions o{100, 1000, 5};
  BatchSampler a(data, o);
  a.Next();  // one whole epoch
  const SamplerPosition end{0, 4};
  BatchSampler b(data, o);
  b.Restore(end);
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(SameBatch(a.Next(), b.Next())) << i;
}

TEST(BatchSamplerTest, RestoreRejectsInvalidPositions) {
  const Lengths data = {10, 20, 30};
  BatchSampler s(data, {15, 100, 1});
  for (const SamplerPosition p : {SamplerPosition{-1, 0}, SamplerPosition{0, -1},
                                  SamplerPosition{0, 4}, SamplerPosition{2, 100}}) {
    SCOPED_TRACE(std::to_string(p.epoch) + "/" + std::to_string(p.offset));
    InvalidInputMessage([&] { s.Restore(p); });
  }
}

TEST(BatchSamplerTest, RejectsInvalidOptions) {
  const Lengths data = {10, 20, 30};
  const Lengths none;
  InvalidInputMessage([&] { BatchSampler s(none, {}); });
  InvalidInputMessage([&] { BatchSampler s(data, {0, 100, 1}); });
  InvalidInputMessage([&] { BatchSampler s(data, {-5, 100, 1}); });
  InvalidInputMessage([&] { BatchSampler s(data, {100, 0, 1}); });
}

// With a budget equal to the dataset's tokens (and no cut), each batch is exactly one
// epoch: a permutation of the dataset, reshuffled every epoch.
TEST(BatchSamplerTest, EpochsRollOverOnATinyDataset) {
  const Lengths data = {3, 1, 4, 1, 5, 9, 2, 6};
  const std::int64_t total = std::accumulate(data.begin(), data.end(), std::int64_t{0});
  BatchSampler s(data, {total, 100, 12});
  std::set<Lengths> orders;
  for (int epoch = 0; epoch < 12; ++epoch) {
    const SampledBatch b = s.Next();
    Lengths sorted = b.dataset_indices;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, (Lengths{0, 1, 2, 3, 4, 5, 6, 7})) << "epoch " << epoch;
    for (std::size_t i = 0; i < b.lengths.size(); ++i) {
      EXPECT_EQ(b.lengths[i], data[static_cast<std::size_t>(b.dataset_indices[i])]);
    }
    orders.insert(b.dataset_indices);
  }
  EXPECT_GT(orders.size(), 6u) << "epochs should be shuffled differently";
}

// A budget larger than the whole dataset spans several epochs within one batch.
TEST(BatchSamplerTest, OneBatchCanSpanSeveralEpochs) {
  const Lengths data = {3, 4};
  BatchSampler s(data, {20, 100, 1});
  const SampledBatch b = s.Next();
  // 7 tokens per epoch: 7 + 7 + (3 or 4, then cut) = 20 tokens from 6 documents.
  ASSERT_EQ(b.lengths.size(), 6u);
  for (std::size_t e = 0; e < 3; ++e) {
    EXPECT_NE(b.dataset_indices[2 * e], b.dataset_indices[2 * e + 1]) << "epoch " << e;
  }
  EXPECT_EQ(std::accumulate(b.lengths.begin(), b.lengths.end(), std::int64_t{0}), 20);
  EXPECT_EQ(s.position().epoch, 2);
  EXPECT_EQ(s.position().offset, 2);
}

// Across batches, the documents consumed (the cut one included, once) form one
// permutation of the dataset per epoch: nothing is repeated or skipped.
TEST(BatchSamplerTest, EachEpochVisitsEveryDocumentOnce) {
  const Lengths data = SyntheticDataset(97, 4, 600);
  BatchSampler s(data, {1000, 400, 77});
  Lengths stream;
  while (stream.size() < 5 * data.size()) {
    const SampledBatch b = s.Next();
    stream.insert(stream.end(), b.dataset_indices.begin(), b.dataset_indices.end());
  }
  for (std::size_t e = 0; e < 5; ++e) {
    Lengths epoch(stream.begin() + static_cast<std::ptrdiff_t>(e * data.size()),
                  stream.begin() + static_cast<std::ptrdiff_t>((e + 1) * data.size()));
    std::sort(epoch.begin(), epoch.end());
    for (std::size_t i = 0; i < epoch.size(); ++i) {
      ASSERT_EQ(epoch[i], static_cast<std::int64_t>(i)) << "epoch " << e;
    }
  }
}

TEST(BatchSamplerTest, RealWikipediaLengths) {
  if (!std::filesystem::exists(kWikipediaLengths)) {
    GTEST_SKIP() << kWikipediaLengths << " is absent";
  }
  const Lengths data = ReadLengths(kWikipediaLengths);
  const SamplerOptions o{200'000, 32'768, 7};
  BatchSampler a(data, o), b(data, o), other(data, {200'000, 32'768, 8});
  std::set<std::int64_t> seen;
  int differing = 0;
  for (int step = 0; step < 50; ++step) {
    SCOPED_TRACE(step);
    const SampledBatch x = a.Next();
    CheckBatch(x, data, o);
    ASSERT_TRUE(SameBatch(x, b.Next()));
    differing += SameBatch(x, other.Next()) ? 0 : 1;
    // Far from the end of the first epoch: no document may repeat.
    for (std::int64_t idx : x.dataset_indices) EXPECT_TRUE(seen.insert(idx).second) << idx;
  }
  EXPECT_EQ(a.position().epoch, 0);
  EXPECT_EQ(a.position().offset, static_cast<std::int64_t>(seen.size()));
  EXPECT_EQ(differing, 50);

  // Restoring a checkpoint in the middle of the real data reproduces the run.
  const SamplerPosition saved = a.position();
  std::vector<SampledBatch> expected;
  for (int i = 0; i < 5; ++i) expected.push_back(a.Next());
  BatchSampler restored(data, o);
  restored.Restore(saved);
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(SameBatch(restored.Next(), expected[i])) << i;
}

// ---------------------------------------------------------------------------------------
// BatchSampler by document count.

SamplerOptions ByDocuments(std::int64_t documents, std::int64_t max_len, std::uint64_t seed) {
  SamplerOptions o;
  o.documents_per_batch = documents;
  o.max_len = max_len;
  o.seed = seed;
  return o;
}

TEST(BatchSamplerByDocumentsTest, ExactlyThatManyDocumentsCutToMaxLen) {
  const Lengths data = SyntheticDataset(50, 3, 9000);
  for (std::int64_t k : {1, 7, 50, 120}) {
    SCOPED_TRACE(k);
    SamplerOptions o = ByDocuments(k, 4096, 5);
    o.tokens_per_batch = 0;  // not used when sampling by count
    BatchSampler s(data, o);
    for (int step = 0; step < 10; ++step) {
      const SampledBatch b = s.Next();
      ASSERT_EQ(b.lengths.size(), static_cast<std::size_t>(k));
      ASSERT_EQ(b.dataset_indices.size(), static_cast<std::size_t>(k));
      for (std::size_t i = 0; i < b.lengths.size(); ++i) {
        EXPECT_EQ(b.lengths[i],
                  std::min(data[static_cast<std::size_t>(b.dataset_indices[i])], o.max_len));
      }
    }
  }
}

// Both modes walk the same shuffled stream: only where batches end differs.
TEST(BatchSamplerByDocumentsTest, SameDocumentStreamAsTheTokenBudget) {
  const Lengths data = SyntheticDataset(120, 6, 3000);
  BatchSampler by_tokens(data, {10'000, 1'000'000, 31});
  BatchSampler by_count(data, ByDocuments(9, 1'000'000, 31));
  Lengths a, b;
  while (a.size() < 400) {
    const SampledBatch x = by_tokens.Next();
    a.insert(a.end(), x.dataset_indices.begin(), x.dataset_indices.end());
  }
  while (b.size() < 400) {
    const SampledBatch x = by_count.Next();
    b.insert(b.end(), x.dataset_indices.begin(), x.dataset_indices.end());
  }
  a.resize(400);
  b.resize(400);
  EXPECT_EQ(a, b);
}

TEST(BatchSamplerByDocumentsTest, EpochsAndPositions) {
  const Lengths data = {5, 6, 7, 8, 9};
  BatchSampler s(data, ByDocuments(3, 100, 2));
  const SampledBatch first = s.Next();
  EXPECT_EQ(s.position().epoch, 0);
  EXPECT_EQ(s.position().offset, 3);
  const SampledBatch second = s.Next();  // 2 from epoch 0, 1 from epoch 1
  EXPECT_EQ(s.position().epoch, 1);
  EXPECT_EQ(s.position().offset, 1);
  Lengths epoch0 = first.dataset_indices;
  epoch0.insert(epoch0.end(), second.dataset_indices.begin(), second.dataset_indices.begin() + 2);
  std::sort(epoch0.begin(), epoch0.end());
  EXPECT_EQ(epoch0, (Lengths{0, 1, 2, 3, 4}));
}

TEST(BatchSamplerByDocumentsTest, RestoreReproducesTheFollowingBatches) {
  const Lengths data = SyntheticDataset(37, 12, 5000);
  const SamplerOptions o = ByDocuments(5, 2048, 8);
  for (int checkpoint : {0, 3, 7, 8, 20}) {
    SCOPED_TRACE(checkpoint);
    BatchSampler a(data, o);
    for (int i = 0; i < checkpoint; ++i) a.Next();
    const SamplerPosition saved = a.position();
    std::vector<SampledBatch> expected;
    for (int i = 0; i < 15; ++i) expected.push_back(a.Next());
    BatchSampler fresh(data, o);
    fresh.Restore(saved);
    for (int i = 0; i < 15; ++i) ASSERT_TRUE(SameBatch(fresh.Next(), expected[i])) << i;
    a.Restore(saved);
    for (int i = 0; i < 15; ++i) ASSERT_TRUE(SameBatch(a.Next(), expected[i])) << i;
  }
}

TEST(BatchSamplerByDocumentsTest, RejectsInvalidOptions) {
  const Lengths data = {10, 20, 30};
  const Lengths none;
  const std::string msg =
      InvalidInputMessage([&] { BatchSampler s(data, ByDocuments(-1, 100, 1)); });
  EXPECT_NE(msg.find("documents-per-batch"), std::string::npos) << msg;
  InvalidInputMessage([&] { BatchSampler s(data, ByDocuments(2, 0, 1)); });
  InvalidInputMessage([&] { BatchSampler s(none, ByDocuments(2, 100, 1)); });
}

}  // namespace
}  // namespace hydraulis
