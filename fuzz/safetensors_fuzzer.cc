// Hugging Face safetensors files: ParseSafetensors, and for a valid one that every tensor's
// bytes lie inside the file and that writing the header again and reading it gives the same
// tensors.
#include <span>

#include "fuzz_input.h"
#include "hydraulis/checkpoint/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hydraulis;
  fuzz::ExpectValidOrInvalidInput([&] {
    const auto file = std::as_bytes(std::span(data, size));
    const SafetensorsHeader header = ParseSafetensors(file, "m.safetensors");
    std::vector<SafetensorsEntry> entries;
    for (const SafetensorsTensor& t : header.tensors) {
      fuzz::Require(header.data_offset + t.end <= size, "tensor bytes inside the file");
      entries.push_back(
          {t.name, t.dtype, t.shape, file.subspan(header.data_offset + t.begin, t.end - t.begin)});
    }
    std::string again = SafetensorsHeaderBytes(entries, header.metadata);
    for (const SafetensorsEntry& e : entries) {
      again.append(reinterpret_cast<const char*>(e.bytes.data()), e.bytes.size());
    }
    const SafetensorsHeader reread = ParseSafetensors(
        std::as_bytes(std::span(again.data(), again.size())), "written.safetensors");
    fuzz::Require(
        reread.tensors.size() == header.tensors.size() && reread.metadata == header.metadata,
        "a valid file's tensors and metadata survive writing them again");
  });
  return 0;
}
