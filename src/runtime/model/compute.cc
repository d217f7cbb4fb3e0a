#include "hydraulis/runtime/model/compute.h"

#include <torch/version.h>

#ifdef HYDRAULIS_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <cuda.h>
#endif

#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <string>
#include <string_view>

#include "hydraulis/base/enum_names.h"
#include "hydraulis/base/error.h"

namespace hydraulis {
namespace {

// bf16 tensor cores (and bf16 in cuBLAS) start with Ampere.
constexpr int kBf16MinComputeMajor = 8;

constexpr EnumNames<DeviceKind, 2> kDeviceNames{
    {{DeviceKind::kCpu, "cpu"}, {DeviceKind::kCuda, "cuda"}}};
constexpr EnumNames<Precision, 2> kPrecisionNames{
    {{Precision::kFp32, "fp32"}, {Precision::kBf16, "bf16"}}};

}  // namespace

std::string ToString(DeviceKind device) { return std::string(NameOf(device, kDeviceNames)); }
std::string ToString(Precision precision) {
  return std::string(NameOf(precision, kPrecisionNames));
}

DeviceKind ParseDeviceKind(const std::string& text, const std::string& what) {
  return ParseName(text, kDeviceNames, what);
}

Precision ParsePrecision(const std::string& text, const std::string& what) {
  return ParseName(text, kPrecisionNames, what);
}

int CudaDeviceCount() {
#ifdef HYDRAULIS_WITH_CUDA
  return at::detail::getCUDAHooks().hasCUDA() ? static_cast<int>(at::cuda::device_count()) : 0;
#else
  return 0;
#endif
}

int ParseLocalRank(const char* text) {
  if (text == nullptr || *text == '\0') return 0;
  errno = 0;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || value < 0 || value > INT_MAX) {
    throw InvalidInput("environment: LOCAL_RANK: expected a GPU index (an integer >= 0), got " +
                       QuoteForMessage(text));
  }
  return static_cast<int>(value);
}

void CheckDeviceIndex(int device_index, int visible) {
  if (device_index < 0 || device_index >= visible) {
    throw InvalidInput("device cuda: this rank's device index (LOCAL_RANK) is " +
                       std::to_string(device_index) + " but the process sees " +
                       std::to_string(visible) +
                       " GPU(s) (one rank per GPU; CUDA_VISIBLE_DEVICES limits which)");
  }
}

ComputeOptions DefaultComputeOptions(int device_index) {
  ComputeOptions o;
  if (CudaDeviceCount() > 0) {
    o.device = DeviceKind::kCuda;
    o.device_index = device_index;
    o.precision = Precision::kBf16;
  }
  return o;
}

ComputeOptions ResolveComputeOptions(const std::string& device, const std::string& precision,
                                     int local_rank, const std::string& device_field,
                                     const std::string& precision_field) {
  ComputeOptions c = DefaultComputeOptions(local_rank);
  if (!device.empty()) {
    c.device = ParseDeviceKind(device, device_field);
    c.device_index = local_rank;
    c.precision = c.device == DeviceKind::kCuda ? Precision::kBf16 : Precision::kFp32;
  }
  if (!precision.empty()) c.precision = ParsePrecision(precision, precision_field);
  try {
    CheckComputeAvailable(c);
  } catch (const InvalidInput& e) {
    throw InvalidInput(device_field + " " + ToString(c.device) + " " + precision_field + " " +
                       ToString(c.precision) + ": " + e.what());
  }
  return c;
}

void CheckComputeAvailable(const ComputeOptions& o) {
  if (o.device == DeviceKind::kCpu) return;
#ifndef HYDRAULIS_WITH_CUDA
  throw InvalidInput("device cuda: this hydraulis was built against a PyTorch without CUDA");
#else
  const int count = CudaDeviceCount();
  if (count == 0) {
    throw InvalidInput("device cuda: no CUDA GPU is visible to this process (use device cpu)");
  }
  CheckDeviceIndex(o.device_index, count);
  if (o.precision == Precision::kBf16) {
    const cudaDeviceProp* prop =
        at::cuda::getDeviceProperties(static_cast<c10::DeviceIndex>(o.device_index));
    if (prop->major < kBf16MinComputeMajor) {
      throw InvalidInput("precision bf16: GPU " + std::to_string(o.device_index) + " (" +
                         prop->name + ", compute capability " + std::to_string(prop->major) + "." +
                         std::to_string(prop->minor) + ") has no bf16 support; use precision fp32");
    }
  }
#endif
}

void UseDevice(const ComputeOptions& o) {
  if (o.device != DeviceKind::kCuda) return;
#ifdef HYDRAULIS_WITH_CUDA
  CheckDeviceIndex(o.device_index, CudaDeviceCount());
  c10::cuda::set_device(static_cast<c10::DeviceIndex>(o.device_index));
#else
  throw InvalidInput("device cuda: this hydraulis was built against a PyTorch without CUDA");
#endif
}

std::int64_t DeviceMemoryBytes(const ComputeOptions& o) {
#ifdef HYDRAULIS_WITH_CUDA
  if (o.device == DeviceKind::kCuda) {
    CheckDeviceIndex(o.device_index, CudaDeviceCount());
    return static_cast<std::int64_t>(
        at::cuda::getDeviceProperties(static_cast<c10::DeviceIndex>(o.device_index))
            ->totalGlobalMem);
  }
#endif
  (void)o;
  return static_cast<std::int64_t>(sysconf(_SC_PHYS_PAGES)) *
         static_cast<std::int64_t>(sysconf(_SC_PAGESIZE));
}

void SynchronizeDevice(const ComputeOptions& o) {
  if (o.device != DeviceKind::kCuda) return;
#ifdef HYDRAULIS_WITH_CUDA
  c10::cuda::device_synchronize();
#endif
}

at::Device TorchDevice(const ComputeOptions& o) {
  if (o.device == DeviceKind::kCpu) return at::Device(at::kCPU);
  return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(o.device_index));
}

at::ScalarType ComputeDtype(const ComputeOptions& o) {
  return o.precision == Precision::kBf16 ? at::kBFloat16 : at::kFloat;
}

std::string TorchBuildDescription() {
  std::string text = std::string("PyTorch ") + TORCH_VERSION;
#ifdef HYDRAULIS_WITH_CUDA
  text += std::string(", CUDA ") + std::to_string(CUDA_VERSION / 1000) + "." +
          std::to_string(CUDA_VERSION % 1000 / 10);
#else
  text += ", CPU only";
#endif
  return text;
}

std::optional<double> PeakTflopsOfDevice(std::string_view name) {
  struct Peak {
    std::string_view part;
    double tflops;
  };
  // Most specific names first: "H100 PCIe" before "H100".
  constexpr Peak kPeaks[] = {{"GH200", 989},     {"H200 NVL", 835}, {"H200", 989},
                             {"H100 PCIe", 756}, {"H100 NVL", 835}, {"H100", 989},
                             {"H800 PCIe", 756}, {"H800", 989},     {"A100", 312},
                             {"A800", 312},      {"B200", 2250}};
  for (const Peak& p : kPeaks) {
    if (name.find(p.part) != std::string_view::npos) return p.tflops;
  }
  return std::nullopt;
}

std::optional<double> PeakTflops(const ComputeOptions& o) {
  if (o.device != DeviceKind::kCuda || o.precision != Precision::kBf16) return std::nullopt;
#ifdef HYDRAULIS_WITH_CUDA
  if (o.device_index >= 0 && o.device_index < CudaDeviceCount()) {
    return PeakTflopsOfDevice(
        at::cuda::getDeviceProperties(static_cast<c10::DeviceIndex>(o.device_index))->name);
  }
#endif
  return std::nullopt;
}

std::int64_t PeakMemoryBytes(const ComputeOptions& o) {
#ifdef HYDRAULIS_WITH_CUDA
  if (o.device == DeviceKind::kCuda) {
    const auto device = static_cast<c10::DeviceIndex>(o.device_index);
    namespace allocator = c10::cuda::CUDACachingAllocator;
    const std::int64_t peak =
        allocator::getDeviceStats(device)
            .allocated_bytes[static_cast<std::size_t>(c10::CachingAllocator::StatType::AGGREGATE)]
            .peak;
    allocator::resetPeakStats(device);
    return peak;
  }
#endif
  (void)o;
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<std::int64_t>(usage.ru_maxrss) * 1024;  // kilobytes on Linux
}

std::string Describe(const ComputeOptions& o) {
  std::string device = ToString(o.device);
  if (o.device == DeviceKind::kCuda) device.append(":").append(std::to_string(o.device_index));
  return device + " " + ToString(o.precision);
}

std::string DeviceLine(const ComputeOptions& o, int rank, int world_size) {
  std::string line = "rank " + std::to_string(rank) + " of " + std::to_string(world_size) + ": ";
  if (o.device != DeviceKind::kCuda) return line + Describe(o);
  line += ToString(o.device) + ":" + std::to_string(o.device_index) + " (";
#ifdef HYDRAULIS_WITH_CUDA
  if (o.device_index >= 0 && o.device_index < CudaDeviceCount()) {
    line += at::cuda::getDeviceProperties(static_cast<c10::DeviceIndex>(o.device_index))->name;
    line += "; ";
  }
#endif
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  line += "LOCAL_RANK " + std::to_string(o.device_index) + " of " +
          std::to_string(CudaDeviceCount()) + " visible GPU(s)";
  if (visible != nullptr) line += std::string(", CUDA_VISIBLE_DEVICES=") + visible;
  return line + ") " + ToString(o.precision);
}

}  // namespace hydraulis
