// The one place for the c10d details the runtime builds against (PyTorch 2.x wheels; it
// was libtorch 1.13 before, whose differences are noted where they were). The tensor code (ATen
// ops, autograd, CPU generators, torch::optim::AdamW) uses only APIs that are the same in both, and
// sidesteps the one behavioural difference it met (Optimizer::zero_grad zeroes in place in 1.13 but
// sets gradients to undefined by default in 2.x) with its own ZeroGradients. The c10d part
// (TCPStore, ProcessGroupGloo) is below, in namespace torch_compat; only .cc files include
// this header, so c10d and Gloo headers never reach the runtime's public API.
#pragma once

#include <torch/version.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

// Torch's CMake target torch_cpu (which `torch` links) defines USE_C10D_GLOO when libtorch
// was built with Gloo, as Debian's is; the Gloo process group is compiled out without it.
#ifndef USE_C10D_GLOO
#error "this libtorch was built without Gloo (USE_C10D_GLOO): the runtime needs ProcessGroupGloo"
#endif
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef USE_C10D_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#define HYDRAULIS_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||            \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

static_assert(HYDRAULIS_TORCH_AT_LEAST(2, 4), "hydraulis needs PyTorch 2.4 or newer");

namespace hydraulis {

// "1.13.0" and the like, for logs and error messages.
inline std::string TorchVersionString() { return TORCH_VERSION; }

namespace torch_compat {

// The object collectives are issued on. In 1.13 ProcessGroupGloo is itself a
// c10d::ProcessGroup; since 2.0 it is a c10d::Backend that a ProcessGroup dispatches to.
// allreduce / barrier (and reduce_scatter, allgather for the ZeRO follow-up) have the same
// signatures on both, so the runtime calls them on the Gloo object directly and never
// needs the 2.x ProcessGroup wrapper (nor its per-device backend registration).
using GlooGroup = c10d::ProcessGroupGloo;
// What the runtime issues collectives on: ProcessGroupGloo and ProcessGroupNCCL are both
// c10d::Backends since 2.0.
using Backend = c10d::Backend;
// What a collective or point-to-point call returns; c10d::Work (Work.hpp) in both.
using Work = c10d::Work;

// TCPStore: 1.13 and 2.x both take (host, TCPStoreOptions); the options struct is set
// field by field because 2.x adds fields (masterListenFd, useLibUV, ...) in between, so
// aggregate initialisation would differ. The deprecated positional constructor of 1.13 is
// gone in 2.x. is_server: this rank hosts the store (rank 0); it waits for world_size
// clients (itself included) for at most `timeout`.
inline c10::intrusive_ptr<c10d::Store> MakeTcpStore(const std::string& host, std::uint16_t port,
                                                    bool is_server, std::size_t world_size,
                                                    std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions options;
  options.port = port;
  options.isServer = is_server;
  options.numWorkers = world_size;
  options.waitWorkers = true;
  options.timeout = timeout;
  return c10::make_intrusive<c10d::TCPStore>(host, options);
}

// Keys of several groups (dp now; tp, pp and heterogeneous pipelines later) can share one
// store under different prefixes; PrefixStore is unchanged between the versions.
inline c10::intrusive_ptr<c10d::Store> MakePrefixStore(const std::string& prefix,
                                                       c10::intrusive_ptr<c10d::Store> store) {
  return c10::make_intrusive<c10d::PrefixStore>(prefix, std::move(store));
}

// ProcessGroupGloo::Options::create(timeout) and createDeviceForHostname /
// createDefaultDevice exist with these signatures in 1.13 and 2.x (in 2.x Options derives
// from Backend::Options instead of ProcessGroup::Options, invisible here). `timeout` bounds
// every collective: a dead or stuck peer becomes an exception, not a hang. An empty
// `hostname` binds the transport to the address this host's name resolves to (loopback
// when it does not resolve).
inline c10::intrusive_ptr<GlooGroup> MakeGlooGroup(const c10::intrusive_ptr<c10d::Store>& store,
                                                   int rank, int size, const std::string& hostname,
                                                   std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  options->devices.push_back(hostname.empty()
                                 ? c10d::ProcessGroupGloo::createDefaultDevice()
                                 : c10d::ProcessGroupGloo::createDeviceForHostname(hostname));
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, options);
}

#ifdef USE_C10D_NCCL
// A NCCL group on this process' current CUDA device (the caller sets it). `timeout` bounds
// every collective: NCCL's watchdog aborts the communicator of a stuck or dead peer.
inline c10::intrusive_ptr<c10d::Backend> MakeNcclGroup(const c10::intrusive_ptr<c10d::Store>& store,
                                                       int rank, int size,
                                                       std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, options);
}
#endif

}  // namespace torch_compat

}  // namespace hydraulis
