// The environment `profile` measures under: one BLAS thread per rank and a malloc that keeps
// freed memory (launcher.h's kAllocatorTunables). OpenBLAS and glibc read it when the process
// starts, so it is set before a rank starts, or the process restarts itself into it.
#pragma once

namespace hydraulis::tools {

// Whether this process runs under the timing environment (every variable set as it asks).
bool HasTimingEnvironment();

// Sets the timing environment in this process, for the ranks it starts to inherit.
void SetTimingEnvironment();

// Re-executes this command with the timing environment (once: the new process has it).
// Returns only when that fails, after a warning; the profile is then measured as things are.
void RestartWithTimingEnvironment();

}  // namespace hydraulis::tools
