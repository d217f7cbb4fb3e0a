// Profiles (docs/spec-format.md): ParseProfile, and for a valid one that writing it back and
// reading it again gives the same text.
#include "fuzz_input.h"
#include "hydraulis/spec/spec_io.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hydraulis;
  fuzz::ExpectValidOrInvalidInput([&] {
    const Profile profile = ParseProfile(fuzz::AsText(data, size), "profile.json");
    const std::string text = ProfileToJson(profile);
    fuzz::Require(ProfileToJson(ParseProfile(text, "written.json")) == text,
                  "a parsed profile round-trips through ProfileToJson");
  });
  return 0;
}
