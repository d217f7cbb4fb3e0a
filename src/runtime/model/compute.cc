#include "hydraulis/runtime/model/compute.h"

#include <torch/version.h>

#ifdef HYDRAULIS_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <cuda.h>
#endif

#include <string>

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

ComputeOptions DefaultComputeOptions(int device_index) {
  ComputeOptions o;
  if (CudaDeviceCount() > 0) {
    o.device = DeviceKind::kCuda;
    o.device_index = device_index;
    o.precision = Precision::kBf16;
  }
  return o;
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
  if (o.device_index < 0 || o.device_index >= count) {
    throw InvalidInput("device cuda: this rank's device index (LOCAL_RANK) is " +
                       std::to_string(o.device_index) + " but the process sees " +
                       std::to_string(count) + " GPU(s)");
  }
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

std::string Describe(const ComputeOptions& o) {
  std::string device = ToString(o.device);
  if (o.device == DeviceKind::kCuda) device.append(":").append(std::to_string(o.device_index));
  return device + " " + ToString(o.precision);
}

}  // namespace hydraulis
