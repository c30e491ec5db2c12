// A GPU runtime emulated on the host, for the CPU test suite. It proves the device path's logic (planning into
// DevWork, connections and rendezvous, the device platform's waits and failures, the kernel body compiled by g++,
// stream order, graph capture, co-located ranks) and nothing about real GPUs. It behaves like CUDA where chorus has
// to get CUDA's rules right, and is stricter where CUDA leaves room:
//
//  - "Device memory" is memfd-backed shared memory, so another process can map it through an "IPC handle"
//    (/proc/<pid>/fd/<fd>).
//  - Streams are asynchronous: each stream handle has a worker thread that runs its work in order (kernels, copies,
//    event waits, host functions). A call returns once its work is queued; results are there after
//    streamSynchronize (or deviceSynchronize). Events order streams as cudaEventRecord/cudaStreamWaitEvent do.
//  - deviceFree and hostFree synchronize the whole device first (cudaFree does), so a thread that frees waits for
//    every kernel of the device, including other ranks' kernels that wait for this thread's next call.
//  - A device runs at most `residentBlocks` blocks at once: a kernel starts only when all its blocks fit, so kernels
//    that wait for each other deadlock when they do not fit together, as on a full GPU. No other co-residency is
//    promised: two kernels run side by side only because they are on different streams and fit.
//  - A block may run on `threadsPerBlock` host threads sharing its DevShared, blockSync() being a barrier among
//    them; `delayPercent` delays some barrier arrivals and kernel starts at random (stress tests).
//  - Graph capture (beginCapture/endCapture/graphLaunch, the test's cudaStreamBeginCapture...): work enqueued on a
//    capturing stream is recorded instead of run, and replays run it again. While a capture is active, calls CUDA
//    may refuse fail and invalidate the capture: in global mode from any thread, in thread-local mode from the
//    capturing thread, every call but the capture-safe ones (runtime.h: SetupScope) unless made inside a
//    SetupScope; from any thread and in any mode, deviceSynchronize, deviceFree, hostFree, synchronizing a
//    capturing stream, and waiting on an event recorded outside the capture (or in it, from outside). Synchronizing
//    another stream is allowed, as in CUDA.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "runtime/runtime.h"

namespace chorus_test {

/// Work recorded by a capture (the emulated cudaGraph_t); replayed by EmuRuntime::graphLaunch.
struct EmuGraph;

/// Host emulation of chorus::GpuRuntime (tests only).
class EmuRuntime : public chorus::GpuRuntime {
 public:
  EmuRuntime();
  ~EmuRuntime() override;

  const char* name() const override { return "emu"; }
  int deviceCount() override { return devices; }
  ncclResult_t getDevice(int* dev) override;
  ncclResult_t setDevice(int dev) override;
  int64_t busId(int dev) override;
  chorus::MemKind pointerKind(const void* p, int* dev) override;
  ncclResult_t deviceAlloc(size_t bytes, void** p) override;
  void deviceFree(void* p) override;
  ncclResult_t hostAllocMapped(size_t bytes, void** host, void** dev) override;
  void hostFree(void* host) override;
  /// Like cudaHostRegister: registering the same memory twice fails.
  ncclResult_t hostRegister(void* p, size_t bytes, void** dev) override;
  void hostUnregister(void* p) override;
  ncclResult_t addressRange(const void* p, void** base, size_t* bytes) override;
  ncclResult_t ipcGetHandle(void* p, chorus::IpcHandle* h) override;
  ncclResult_t ipcOpenHandle(const chorus::IpcHandle& h, void** p) override;
  void ipcCloseHandle(void* p) override;
  bool canAccessPeer(int dev, int peerDev) override;
  bool gpuDirectRdma(int dev, chorus::GpuDirectPaths* paths, std::string* why) override;
  /// The memfd behind the device allocation that holds [p, p + bytes), duplicated, and p's offset into it: the tests'
  /// net checks in /proc/self/maps that it maps the buffer's own memory (the emulated "device memory" is host memory).
  ncclResult_t dmaBufFd(void* p, size_t bytes, int* fd, uint64_t* offset) override;
  int computeCapability(int dev) override;
  ncclResult_t enablePeerAccess(int peerDev) override;
  ncclResult_t streamCaptureInfo(cudaStream_t s, bool* capturing, uint64_t* id) override;
  /// Each stream has its own id, also one made with the handle of a destroyed one. Asked of a stream under capture it
  /// fails and invalidates the capture, as cudaStreamGetId did on the H100 (CUDA 13).
  bool streamId(cudaStream_t s, uint64_t* id) override;
  ncclResult_t eventCreate(void** ev) override;
  void eventDestroy(void* ev) override;
  ncclResult_t eventRecord(void* ev, cudaStream_t s) override;
  ncclResult_t streamWaitEvent(cudaStream_t s, void* ev) override;
  ncclResult_t memcpyAsync(void* dst, const void* src, size_t bytes, cudaStream_t s) override;
  /// A copy like memcpyAsync (counted in copies too, and in copyKernels).
  ncclResult_t copyKernelAsync(void* dst, const void* src, size_t bytes, cudaStream_t s) override {
    copyKernels++;
    return memcpyAsync(dst, src, bytes, s);
  }
  int maxResidentBlocks(int dev) override;
  void beginSetup() override;
  void endSetup() override;
  uint64_t clockTicksPerMs(int dev) override;  // deviceClock() is CLOCK_MONOTONIC ns on the host
  ncclResult_t launch(const chorus::DevWork& work, cudaStream_t stream) override;
  ncclResult_t streamSynchronize(cudaStream_t s) override;
  ncclResult_t deviceSynchronize() override;
  ncclResult_t copyToHost(void* dst, const void* src, size_t bytes) override;
  ncclResult_t copyToDevice(void* dst, const void* src, size_t bytes) override;
  std::string lastError() override;

  // ---- what a test does through the CUDA runtime ----
  enum class Capture { kGlobal, kThreadLocal, kRelaxed };
  /// cudaStreamBeginCapture.
  ncclResult_t beginCapture(cudaStream_t s, Capture mode);
  /// cudaStreamEndCapture: the recorded work, or an error (the capture was invalidated: lastError() says by what).
  ncclResult_t endCapture(cudaStream_t s, std::shared_ptr<EmuGraph>* graph);
  /// cudaGraphLaunch: queues the recorded work on s.
  ncclResult_t graphLaunch(const std::shared_ptr<EmuGraph>& graph, cudaStream_t s);
  /// cudaStreamCreate. Streams are made on first use with any handle; this makes a new stream where `s` names one
  /// destroyed.
  void createStream(cudaStream_t s);
  /// cudaStreamDestroy: returns at once, and work already queued on s still runs. Using s afterwards, until a
  /// createStream makes it again, counts in destroyedStreamUses.
  void destroyStream(cudaStream_t s);
  /// Queues fn on s (a stand-in for the user's own kernels: delays, gates).
  void enqueueHost(cudaStream_t s, std::function<void()> fn);
  /// Device allocations alive in this process.
  size_t allocationCount();
  /// Host ranges registered and not yet unregistered (this process).
  size_t registeredCount();

  // ---- knobs (set before the test's ranks start) ----
  int devices = 1;
  bool peerAccess = true;  ///< false: device connections fall back to pinned shared memory
  /// GPUDirect RDMA as the runtime reports it ("device memory" is host memory here, so a net that reads it with the
  /// CPU, as the tests' net plugin does, can serve it in place).
  bool gpuDirect = false;
  bool peerMemory = true;     ///< with gpuDirect: a peer-memory module is "loaded"
  bool dmaBuf = false;        ///< with gpuDirect: the driver "exports" dma-bufs (dmaBufFd)
  bool dmaBufFails = false;   ///< with dmaBuf: says it exports them, but dmaBufFd fails
  int computeCap = 90;        ///< computeCapability()
  int residentBlocks = 1024;  ///< blocks of the collective kernel one device runs at once (an H100 holds ~1000)
  int threadsPerBlock = 1;    ///< host threads per emulated block
  /// Blocks of one kernel run side by side (a thread each), as on a GPU, rather than one after the other: what
  /// blocks of one launch share (a FIFO, a counter) is then raced for.
  bool concurrentBlocks = false;
  /// Called with every launch's descriptor before it is queued (fault tests: a step counter moved under the kernel).
  std::function<void(chorus::DevWork&)> beforeLaunch;
  int delayPercent = 0;                     ///< percent of block barriers and kernel starts delayed (stress)
  int delayMaxUs = 50;                      ///< longest such delay
  std::atomic<int> launches{0};             ///< kernels launched (enqueued or captured), all threads
  std::atomic<int> kernelsRun{0};           ///< kernels that ran to the end
  std::atomic<int> copies{0};               ///< memcpyAsync and copyKernelAsync calls (enqueued or captured)
  std::atomic<int> copyKernels{0};          ///< copyKernelAsync calls
  std::atomic<int> streamWaits{0};          ///< streamWaitEvent calls that ordered one stream after another
  std::atomic<int> destroyedStreamUses{0};  ///< calls on a destroyed stream (CUDA: undefined; an H200 crashed)
  std::atomic<int> lastChannels{0};         ///< blocks of the last kernel launched
  std::atomic<int> lastLanes{0};            ///< blocks per channel of the last kernel launched (chorus::workLanes)
  std::atomic<int> lastThreads{0};          ///< threads per block the last kernel launched asked for (DevWork::threads)
  /// Step runs of the last kernel launched that name blocks by ring position (StepRun::ordered).
  std::atomic<int> lastOrderedRuns{0};
  /// The CPUs the thread that last called hostAllocMapped (hostRegister) could run on, comma-separated ("0,1").
  /// Written under the allocation lock (thread ranks call both at once); read them once no rank is in such a call.
  std::string hostAllocCpus, hostRegisterCpus;
  std::atomic<int> lastMaxLag{0};      ///< the largest channel lag (Schedule::lag) of the last kernel launched
  std::atomic<int> directLaunches{0};  ///< launched kernels on the thread ranks' own buffers (kDevDirectThreads)
  std::atomic<int> ipcLaunches{0};     ///< launched kernels through inboxes (kDevDirectIpc), by this process
  std::atomic<int> windowLaunches{0};  ///< launched kernels on registered windows (kDevDirectWindows), by this process
  /// Direct launches made by the calling thread (a thread rank's own).
  static int directLaunchesOfThisThread();
  /// Launches with several blocks per channel (DevWork::lanes > 1) made by the calling thread.
  static int laneLaunchesOfThisThread();

  struct Mem;
  struct Exec;

 private:
  Mem* mem_;    ///< allocations and registrations: survive fork, like the mappings they describe
  Exec* exec_;  ///< streams, events, captures, devices: remade empty in a forked child (its threads are gone)
  friend void emuAfterFork();
};

/// A host buffer pretending to be device memory of the test's EmuRuntime (freed at scope exit, which, like
/// cudaFree, waits for the device).
class DevBuf {
 public:
  DevBuf(EmuRuntime& rt, size_t bytes);
  ~DevBuf();
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  template <typename T>
  T* as() const {
    return static_cast<T*>(p_);
  }

 private:
  EmuRuntime& rt_;
  void* p_ = nullptr;
};

}  // namespace chorus_test
