// The one place for the c10d details the runtime builds against (PyTorch 2.x wheels): the
// TCPStore, prefix stores and the Gloo and NCCL process groups, in namespace torch_compat.
// Only .cc files include this header, so c10d and Gloo headers never reach the runtime's
// public API.
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

// "2.11.0" and the like, for logs and error messages.
inline std::string TorchVersionString() { return TORCH_VERSION; }

namespace torch_compat {

// The object collectives are issued on: ProcessGroupGloo is a c10d::Backend that a
// ProcessGroup would dispatch to; the runtime calls the backend directly and never needs
// the ProcessGroup wrapper (nor its per-device backend registration).
using GlooGroup = c10d::ProcessGroupGloo;
// What the runtime issues collectives on: ProcessGroupGloo and ProcessGroupNCCL are both
// c10d::Backends since 2.0.
using Backend = c10d::Backend;
// What a collective or point-to-point call returns (c10d/Work.hpp).
using Work = c10d::Work;

// TCPStore(host, TCPStoreOptions); the options are set field by field because releases
// add fields (masterListenFd, useLibUV, ...) in between, so aggregate initialisation would
// differ. is_server: this rank hosts the store (rank 0); it waits for world_size clients
// (itself included) for at most `timeout`.
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

// Keys of several groups (world, control, tp, pp, per-pipeline) share one store under
// different prefixes.
inline c10::intrusive_ptr<c10d::Store> MakePrefixStore(const std::string& prefix,
                                                       c10::intrusive_ptr<c10d::Store> store) {
  return c10::make_intrusive<c10d::PrefixStore>(prefix, std::move(store));
}

// A Gloo group over ProcessGroupGloo::Options::create(timeout). `timeout` bounds
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
