// Finds out, without linking CUDA, whether this process can see a GPU, and whether a buffer
// is device memory. This build has no GPU backend yet, so a device buffer must be refused
// with a clear error rather than handed to the host path (which would fault).
#pragma once

namespace chorus {

/// Number of CUDA devices visible to this process (0 when the CUDA runtime or driver is absent).
int visibleCudaDevices();

/// Whether ptr is device memory (not host or managed memory). False when no GPU is visible.
bool isDevicePointer(const void* ptr);

}  // namespace chorus
