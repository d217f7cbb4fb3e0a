// A checkpoint's meta.json: ParseCheckpointMeta, and for a valid one that writing it back
// and reading it again gives the same meta and shard records.
#include "fuzz_input.h"
#include "hydraulis/checkpoint/checkpoint_meta.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hydraulis;
  fuzz::ExpectValidOrInvalidInput([&] {
    const CheckpointMetaFile file =
        ParseCheckpointMeta(fuzz::AsText(data, size), "meta.json", "step-00000012");
    fuzz::Require(file.meta.step == 12, "step matches the directory");
    if (!file.verified()) return;
    const std::string text = CheckpointMetaToJson(file.meta, file.shards);
    const CheckpointMetaFile again = ParseCheckpointMeta(text, "written.json", "step-00000012");
    fuzz::Require(CheckpointMetaToJson(again.meta, again.shards) == text,
                  "a parsed meta.json round-trips");
  });
  return 0;
}
