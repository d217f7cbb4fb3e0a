// Where a rank computes and in which precision. fp32 everywhere is the reference the
// equivalence tests hold; bf16 is the mixed precision Megatron users expect: bf16 weights
// and activations for compute, fp32 master weights and AdamW moments in the optimizer's
// shards, gradients accumulated over micro-batches and reduced in fp32, loss in fp32
// (docs/runtime.md, "Device and precision").
#pragma once

#include <ATen/ATen.h>

#include <string>

namespace hydraulis {

enum class DeviceKind { kCpu, kCuda };
enum class Precision { kFp32, kBf16 };

struct ComputeOptions {
  DeviceKind device = DeviceKind::kCpu;
  // The CUDA device of this rank (torchrun's LOCAL_RANK); ignored on the CPU. >= 0.
  int device_index = 0;
  Precision precision = Precision::kFp32;
};

// "cpu" / "cuda", "fp32" / "bf16"; the parsers throw InvalidInput naming `what` (the flag
// or field the text came from) and the accepted values.
std::string ToString(DeviceKind device);
std::string ToString(Precision precision);
DeviceKind ParseDeviceKind(const std::string& text, const std::string& what);
Precision ParsePrecision(const std::string& text, const std::string& what);

// CUDA devices this process sees (0 when the torch build or the machine has none).
int CudaDeviceCount();

// The defaults a user expects: cuda and bf16 when a GPU is visible, else cpu and fp32.
ComputeOptions DefaultComputeOptions(int device_index);

// InvalidInput, before any work, when the options cannot run here: cuda without a visible
// GPU, a device_index this process does not see, bf16 on a GPU older than compute
// capability 8.0 (no bf16 tensor cores).
void CheckComputeAvailable(const ComputeOptions& options);

// The torch device and the dtype of weights and activations.
at::Device TorchDevice(const ComputeOptions& options);
at::ScalarType ComputeDtype(const ComputeOptions& options);

// The PyTorch this runtime was built against, e.g. "PyTorch 2.11.0, CUDA 13.0" (for
// `hydraulis --version` and logs).
std::string TorchBuildDescription();

// "cuda:0 bf16" and the like, for logs.
std::string Describe(const ComputeOptions& options);

}  // namespace hydraulis
