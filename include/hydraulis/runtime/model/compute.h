// Where a rank computes, in which precision, and what its forward keeps for the backward. fp32
// everywhere is the reference the equivalence tests hold; bf16 is the mixed precision Megatron
// users expect: bf16 weights and activations for compute, fp32 master weights and AdamW moments in
// the optimizer's shards, gradients accumulated over micro-batches and reduced in fp32, loss in
// fp32 (docs/runtime.md, "Device and precision").
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "hydraulis/spec/recompute.h"

namespace hydraulis {

enum class DeviceKind { kCpu, kCuda };
enum class Precision { kFp32, kBf16 };

struct ComputeOptions {
  DeviceKind device = DeviceKind::kCpu;
  // The CUDA device of this rank (torchrun's LOCAL_RANK); ignored on the CPU. >= 0.
  int device_index = 0;
  Precision precision = Precision::kFp32;
  // What a stage's forward keeps for its backward and what it runs again instead.
  Recompute recompute = Recompute::kNone;
};

// "cpu" / "cuda", "fp32" / "bf16"; the parsers throw InvalidInput naming `what` (the flag
// or field the text came from) and the accepted values.
std::string ToString(DeviceKind device);
std::string ToString(Precision precision);
DeviceKind ParseDeviceKind(const std::string& text, const std::string& what);
Precision ParsePrecision(const std::string& text, const std::string& what);

// CUDA devices this process sees (0 when the torch build or the machine has none).
int CudaDeviceCount();

// This rank's GPU under torchrun's convention: the LOCAL_RANK variable's text (`text`;
// nullptr or empty: 0). It indexes the GPUs the process sees, which CUDA numbers 0..n-1
// after CUDA_VISIBLE_DEVICES, so ranks 0-7 of a node take GPUs 0-7 and a job given
// CUDA_VISIBLE_DEVICES=4,5 puts LOCAL_RANK 1 on physical GPU 5. InvalidInput naming
// LOCAL_RANK when the text is not a non-negative integer.
int ParseLocalRank(const char* text);

// InvalidInput when GPU `device_index` is not one of the `visible` GPUs (the one line a
// LOCAL_RANK beyond the node's GPUs gets).
void CheckDeviceIndex(int device_index, int visible);

// The defaults a user expects: cuda and bf16 when a GPU is visible, else cpu and fp32.
ComputeOptions DefaultComputeOptions(int device_index);

// What a user's choices give on GPU `local_rank`: `device` and `precision` as texts
// (ParseDeviceKind, ParsePrecision), either empty for its default (the device: cuda when a
// GPU is visible, else cpu; the precision: bf16 on cuda, fp32 on cpu), checked with
// CheckComputeAvailable. InvalidInput naming `device_field` and `precision_field` (the
// caller's names for them).
ComputeOptions ResolveComputeOptions(const std::string& device, const std::string& precision,
                                     int local_rank, const std::string& device_field,
                                     const std::string& precision_field);

// InvalidInput, before any work, when the options cannot run here: cuda without a visible
// GPU, a device_index this process does not see, bf16 on a GPU older than compute
// capability 8.0 (no bf16 tensor cores).
void CheckComputeAvailable(const ComputeOptions& options);

// Makes the options' GPU the calling thread's current CUDA device (cudaSetDevice is per
// host thread), so what uses the current device rather than a tensor's lands on this
// rank's GPU: the CUDA context, NCCL's communicators and streams, the caching allocator's
// current stream, kernels' workspaces. Every rank's thread calls it before its first CUDA
// call; nothing on the CPU.
void UseDevice(const ComputeOptions& options);

// Bytes of memory the options' device has: the GPU's total memory, or this machine's
// physical memory on the CPU.
std::int64_t DeviceMemoryBytes(const ComputeOptions& options);

// Returns once everything queued on the options' GPU has run (nothing to wait for on the
// CPU): a timer around GPU work must stop after it, not when the host queued it.
void SynchronizeDevice(const ComputeOptions& options);

// The torch device and the dtype of weights and activations.
at::Device TorchDevice(const ComputeOptions& options);
at::ScalarType ComputeDtype(const ComputeOptions& options);

// The PyTorch this runtime was built against, e.g. "PyTorch 2.11.0, CUDA 13.0" (for
// `hydraulis --version` and logs).
std::string TorchBuildDescription();

// The dense bf16 peak (TFLOPS) of a GPU of this name, from the vendors' data sheets
// (A100/A800 312; H100/H800/H200/GH200 SXM 989, their PCIe/NVL forms 756 and 835; B200
// 2250), for MFU; nullopt for a name the table does not know.
std::optional<double> PeakTflopsOfDevice(std::string_view name);
// This rank's peak for MFU: PeakTflopsOfDevice of its GPU in bf16; nullopt on the CPU, in
// fp32 (whose peak the table does not hold) or for a GPU it does not know.
std::optional<double> PeakTflops(const ComputeOptions& options);

// The most memory this process held: on a GPU the caching allocator's peak of allocated
// bytes since the previous call (each call resets it, so it is per step when called once
// per step), on the CPU the peak resident set of the process since it started (getrusage).
std::int64_t PeakMemoryBytes(const ComputeOptions& options);

// "cuda:0 bf16" and the like, for logs.
std::string Describe(const ComputeOptions& options);

// A rank's start-up line: "rank 3 of 8: cuda:3 (NVIDIA H200; LOCAL_RANK 3 of 8 visible
// GPUs, CUDA_VISIBLE_DEVICES=...) bf16" on a GPU, "rank 0 of 2: cpu fp32" on the CPU.
std::string DeviceLine(const ComputeOptions& options, int rank, int world_size);

}  // namespace hydraulis
