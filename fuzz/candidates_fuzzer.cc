// Candidate strategy sets, validated against the bundled tiny CPU profile: ParseCandidates,
// and for a valid set that writing it back and reading it again gives the same text.
#include "fuzz_input.h"
#include "hydraulis/spec/spec_io.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hydraulis;
  static const Profile profile =
      LoadProfile(std::string(HYDRAULIS_SOURCE_DIR) + "/configs/profiles/tiny-cpu.json");
  fuzz::ExpectValidOrInvalidInput([&] {
    const CandidateSet candidates =
        ParseCandidates(fuzz::AsText(data, size), "candidates.json", profile);
    const std::string text = CandidatesToJson(candidates);
    fuzz::Require(CandidatesToJson(ParseCandidates(text, "written.json", profile)) == text,
                  "a parsed candidate set round-trips through CandidatesToJson");
  });
  return 0;
}
