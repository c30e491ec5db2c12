#include "device/emu_runtime.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "kernels/device_kernel.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

namespace chorus_test {
namespace {

thread_local int tCurrentDevice = 0;
thread_local int tSetupDepth = 0;

/// Marks a new mapping all accessible to AddressSanitizer (nothing without it). In a rank forked from a test process
/// with threads, the shadow of these addresses may still hold the poison of a thread stack that was there in the
/// parent.
void unpoisonNewMapping(void* p, size_t bytes) {
#if defined(__SANITIZE_ADDRESS__)
  __asan_unpoison_memory_region(p, bytes);
#else
  (void)p, (void)bytes;
#endif
}

struct HandleBytes {
  uint64_t pid;
  int32_t fd;
  uint64_t size;
};

// Random delays for stress runs: a thread-local generator, seeded per thread.
void maybeDelay(int percent, int maxUs) {
  if (percent <= 0) return;
  static std::atomic<uint64_t> seeds{0x5eed};
  thread_local std::mt19937_64 rng(seeds.fetch_add(0x9e3779b97f4a7c15ull));
  if (static_cast<int>(rng() % 100) >= percent) return;
  std::this_thread::sleep_for(std::chrono::microseconds(rng() % static_cast<uint64_t>(maxUs + 1)));
}

// The barrier of an emulated block of several threads (blockSync on the host).
class BlockBarrier final : public chorus::HostBlockBarrier {
 public:
  BlockBarrier(int n, int delayPercent, int delayMaxUs) : n_(n), delayPercent_(delayPercent), delayMaxUs_(delayMaxUs) {}
  void arrive() override {
    maybeDelay(delayPercent_, delayMaxUs_);
    std::unique_lock<std::mutex> lock(m_);
    uint64_t gen = gen_;
    if (++count_ == n_) {
      count_ = 0;
      gen_++;
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [&] { return gen_ != gen; });
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  int n_, count_ = 0;
  uint64_t gen_ = 0;
  int delayPercent_, delayMaxUs_;
};

}  // namespace

struct EmuGraph {
  struct Node {
    bool kernel;
    std::shared_ptr<chorus::DevWork> work;
    void* dst;
    const void* src;
    size_t bytes;
  };
  std::vector<Node> nodes;
};

struct EmuRuntime::Mem {
  struct Alloc {
    size_t size;
    int fd;
    int dev;
  };
  std::mutex mutex;
  std::map<char*, Alloc> allocs;   ///< device allocations by base
  std::map<char*, size_t> opened;  ///< IPC mappings
  std::set<void*> registered;      ///< hostRegister'ed ranges
  std::string lastError;
  void fail(const std::string& text) {
    std::lock_guard<std::mutex> lock(mutex);
    lastError = text;
  }
};

struct EmuRuntime::Exec {
  struct Stream;
  struct Event {
    Stream* stream = nullptr;  ///< where it was last recorded (null: never)
    uint64_t target = 0;       ///< that stream's work up to this count
    uint64_t captureId = 0;    ///< nonzero: recorded inside that capture
  };
  struct Item {
    enum Kind { kKernel, kCopy, kHost, kWait } kind = kHost;
    Item() = default;
    explicit Item(Kind k) : kind(k) {}
    std::shared_ptr<chorus::DevWork> work;
    void* dst = nullptr;
    const void* src = nullptr;
    size_t bytes = 0;
    std::function<void()> fn;
    Stream* waitStream = nullptr;
    uint64_t waitTarget = 0;
  };
  struct Stream {
    cudaStream_t handle = nullptr;
    uint64_t id = 0;  ///< cudaStreamGetId's: unique in the process, unlike the handle
    int dev = 0;
    std::mutex m;  // guards the queue and counters
    std::condition_variable cv;
    std::deque<Item> q;
    uint64_t enqueued = 0, done = 0;
    std::thread worker;
    // Capture state, guarded by Exec::mutex.
    bool capturing = false;
    Capture mode = Capture::kGlobal;
    std::thread::id owner;
    uint64_t captureId = 0;
    std::shared_ptr<EmuGraph> graph;
    bool invalidated = false;
  };
  struct Device {
    std::mutex m;
    std::condition_variable cv;
    int used = 0;  ///< blocks of running kernels
  };

  std::mutex mutex;                         // guards streams, devices and every stream's capture state
  std::map<cudaStream_t, Stream*> streams;  // never freed: workers run until the process exits
  std::set<cudaStream_t> destroyed;         // handles destroyed and not made again
  uint64_t nextStreamId = 1;
  std::map<int, Device*> devices;
  uint64_t nextCaptureId = 0;
};

namespace {

std::mutex gInstancesMutex;
std::vector<EmuRuntime*>& instances() {
  static auto* v = new std::vector<EmuRuntime*>();
  return *v;
}

}  // namespace

// A forked child has none of the parent's threads: its streams start empty (the old ones are leaked on purpose,
// their mutexes may have been held), and the memory bookkeeping gets a fresh mutex.
void emuAfterFork() {
  new (&gInstancesMutex) std::mutex();
  for (EmuRuntime* rt : instances()) {
    new (&rt->mem_->mutex) std::mutex();
    rt->exec_ = new EmuRuntime::Exec();
  }
}

EmuRuntime::EmuRuntime() : mem_(new Mem()), exec_(new Exec()) {
  static std::once_flag once;
  std::call_once(once, []() { pthread_atfork(nullptr, nullptr, []() { emuAfterFork(); }); });
  std::lock_guard<std::mutex> lock(gInstancesMutex);
  instances().push_back(this);
}

// Workers may still run (a kernel past its test): the state stays, leaked, for them.
EmuRuntime::~EmuRuntime() {
  std::lock_guard<std::mutex> lock(gInstancesMutex);
  auto& v = instances();
  for (size_t i = 0; i < v.size(); i++)
    if (v[i] == this) v.erase(v.begin() + static_cast<long>(i));
}

namespace {

// The CPUs the calling thread may run on, comma-separated ("0,1"); "" when they cannot be read.
std::string callingThreadCpus() {
  cpu_set_t cpus;
  std::string list;
  if (pthread_getaffinity_np(pthread_self(), sizeof(cpus), &cpus) != 0) return list;
  for (int c = 0; c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, &cpus)) list += (list.empty() ? "" : ",") + std::to_string(c);
  return list;
}

}  // namespace

// ---- capture rules ----------------------------------------------------------------------------------------------

namespace {

// Whether a capture restricts calls of the calling thread (CUDA's capture interaction modes).
bool restricts(const EmuRuntime::Exec::Stream& s) {
  if (!s.capturing || tSetupDepth > 0) return false;
  if (s.mode == EmuRuntime::Capture::kGlobal) return true;
  return s.mode == EmuRuntime::Capture::kThreadLocal && s.owner == std::this_thread::get_id();
}

}  // namespace

// A call CUDA may refuse during a capture: refused (and the capture invalidated) when a capture restricts this
// thread, or always while any capture is active (`always`). Returns true when refused.
static bool refused(EmuRuntime::Exec* ex, EmuRuntime::Mem* mem, const char* call, bool always) {
  std::string who;
  {
    std::lock_guard<std::mutex> lock(ex->mutex);
    for (auto& [h, s] : ex->streams) {
      if (!s->capturing || !(always || restricts(*s))) continue;
      s->invalidated = true;
      if (who.empty()) who = "stream " + std::to_string(reinterpret_cast<uintptr_t>(h));
    }
  }
  if (who.empty()) return false;
  mem->fail(std::string("emu: ") + call + " while " + who +
            " is being captured: operation not permitted when stream is capturing (the capture is invalidated)");
  return true;
}

#define EMU_REFUSE(call, always, ret)                   \
  do {                                                  \
    if (refused(exec_, mem_, call, always)) return ret; \
  } while (0)

// ---- streams ------------------------------------------------------------------------------------------------------

namespace {

using Exec = EmuRuntime::Exec;

void runKernel(EmuRuntime* rt, Exec* ex, const chorus::DevWork& w, int dev);

void workerLoop(EmuRuntime* rt, Exec* ex, Exec::Stream* s) {
  for (;;) {
    Exec::Item it;
    {
      std::unique_lock<std::mutex> lock(s->m);
      s->cv.wait(lock, [&] { return !s->q.empty(); });
      it = std::move(s->q.front());
      s->q.pop_front();
    }
    switch (it.kind) {
      case Exec::Item::kKernel:
        runKernel(rt, ex, *it.work, s->dev);
        break;
      case Exec::Item::kCopy:
        std::memmove(it.dst, it.src, it.bytes);
        break;
      case Exec::Item::kHost:
        it.fn();
        break;
      case Exec::Item::kWait: {
        std::unique_lock<std::mutex> lock(it.waitStream->m);
        it.waitStream->cv.wait(lock, [&] { return it.waitStream->done >= it.waitTarget; });
        break;
      }
    }
    std::lock_guard<std::mutex> lock(s->m);
    s->done++;
    s->cv.notify_all();
  }
}

Exec::Stream* streamOf(EmuRuntime* rt, Exec* ex, cudaStream_t h) {
  std::lock_guard<std::mutex> lock(ex->mutex);
  auto it = ex->streams.find(h);
  if (it != ex->streams.end()) return it->second;
  if (ex->destroyed.count(h) != 0) {
    // CUDA has no answer here: on an H200 this crashed the driver. Counted for the tests; a fresh stream goes on.
    rt->destroyedStreamUses++;
    std::fprintf(stderr, "emu: stream %p used after cudaStreamDestroy\n", static_cast<void*>(h));
  }
  auto* s = new Exec::Stream();
  s->handle = h;
  s->id = ex->nextStreamId++;
  s->dev = tCurrentDevice;
  s->worker = std::thread(workerLoop, rt, ex, s);
  s->worker.detach();
  ex->streams[h] = s;
  return s;
}

// Queues an item; returns the stream's work count including it.
uint64_t enqueue(Exec::Stream* s, Exec::Item it) {
  std::lock_guard<std::mutex> lock(s->m);
  s->q.push_back(std::move(it));
  s->cv.notify_all();
  return ++s->enqueued;
}

void waitIdle(Exec::Stream* s) {
  std::unique_lock<std::mutex> lock(s->m);
  uint64_t target = s->enqueued;
  s->cv.wait(lock, [&] { return s->done >= target; });
}

Exec::Device* deviceOf(Exec* ex, int dev) {
  std::lock_guard<std::mutex> lock(ex->mutex);
  auto& d = ex->devices[dev];
  if (d == nullptr) d = new Exec::Device();
  return d;
}

// A kernel starts once all its blocks fit on the device; its blocks then run one after the other (each channel is
// an independent schedule that every rank runs in the same order), or side by side with concurrentBlocks, as on a
// GPU, each on threadsPerBlock threads.
void runKernel(EmuRuntime* rt, Exec* ex, const chorus::DevWork& w, int dev) {
  Exec::Device* d = deviceOf(ex, dev);
  int need = std::min<int>(w.nChannels, std::max(1, rt->residentBlocks));
  {
    std::unique_lock<std::mutex> lock(d->m);
    d->cv.wait(lock, [&] { return d->used + need <= std::max(1, rt->residentBlocks); });
    d->used += need;
  }
  maybeDelay(rt->delayPercent, rt->delayMaxUs);
  const int nt = std::max(1, rt->threadsPerBlock);
  auto runBlock = [&](int b) {
    chorus::DevShared shared;
    if (nt == 1) {
      chorus::runDevBlock(w, b, shared, 0, 1);
      return;
    }
    BlockBarrier barrier(nt, rt->delayPercent, rt->delayMaxUs);
    std::vector<std::thread> threads;
    for (int t = 0; t < nt; t++) {
      threads.emplace_back([&, t]() {
        chorus::tHostBlockBarrier = &barrier;
        chorus::runDevBlock(w, b, shared, t, nt);
        chorus::tHostBlockBarrier = nullptr;
      });
    }
    for (auto& t : threads) t.join();
  };
  if (rt->concurrentBlocks && w.nChannels > 1) {
    std::vector<std::thread> blocks;
    for (int b = 0; b < w.nChannels; b++) blocks.emplace_back(runBlock, b);
    for (auto& t : blocks) t.join();
  } else {
    for (int b = 0; b < w.nChannels; b++) runBlock(b);
  }
  {
    std::lock_guard<std::mutex> lock(d->m);
    d->used -= need;
    d->cv.notify_all();
  }
  rt->kernelsRun++;
}

}  // namespace

// ---- GpuRuntime ---------------------------------------------------------------------------------------------------

ncclResult_t EmuRuntime::getDevice(int* dev) {
  *dev = tCurrentDevice;
  return ncclSuccess;
}

ncclResult_t EmuRuntime::setDevice(int dev) {
  if (dev < 0 || dev >= devices) {
    mem_->fail("emu: invalid device " + std::to_string(dev));
    return ncclUnhandledCudaError;
  }
  tCurrentDevice = dev;
  return ncclSuccess;
}

int64_t EmuRuntime::busId(int dev) {
  EMU_REFUSE("busId", false, -1);
  return dev;
}

chorus::MemKind EmuRuntime::pointerKind(const void* p, int* dev) {
  EMU_REFUSE("pointerKind (cudaPointerGetAttributes)", false, chorus::MemKind::kHost);
  std::lock_guard<std::mutex> lock(mem_->mutex);
  const char* c = static_cast<const char*>(p);
  auto it = mem_->allocs.upper_bound(const_cast<char*>(c));
  if (it == mem_->allocs.begin()) return chorus::MemKind::kHost;
  --it;
  if (c < it->first + it->second.size) {
    *dev = it->second.dev;
    return chorus::MemKind::kDevice;
  }
  return chorus::MemKind::kHost;
}

ncclResult_t EmuRuntime::deviceAlloc(size_t bytes, void** p) {
  EMU_REFUSE("deviceAlloc (cudaMalloc)", false, ncclUnhandledCudaError);
  int fd = memfd_create("chorus-emu", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    mem_->fail(std::string("emu: memfd: ") + strerror(errno));
    if (fd >= 0) close(fd);
    return ncclUnhandledCudaError;
  }
  void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) {
    close(fd);
    mem_->fail(std::string("emu: mmap: ") + strerror(errno));
    return ncclUnhandledCudaError;
  }
  unpoisonNewMapping(m, bytes);
  std::lock_guard<std::mutex> lock(mem_->mutex);
  mem_->allocs[static_cast<char*>(m)] = Mem::Alloc{bytes, fd, tCurrentDevice};
  *p = m;
  return ncclSuccess;
}

void EmuRuntime::deviceFree(void* p) {
  EMU_REFUSE("deviceFree (cudaFree)", true, );
  deviceSynchronize();  // cudaFree waits for the device
  std::lock_guard<std::mutex> lock(mem_->mutex);
  auto it = mem_->allocs.find(static_cast<char*>(p));
  if (it == mem_->allocs.end()) return;
  munmap(p, it->second.size);
  close(it->second.fd);
  mem_->allocs.erase(it);
}

ncclResult_t EmuRuntime::hostAllocMapped(size_t bytes, void** host, void** dev) {
  EMU_REFUSE("hostAllocMapped (cudaHostAlloc)", false, ncclUnhandledCudaError);
  {
    std::string cpus = callingThreadCpus();
    std::lock_guard<std::mutex> lock(mem_->mutex);
    hostAllocCpus = std::move(cpus);
  }
  *host = *dev = calloc(1, bytes);
  return *host ? ncclSuccess : ncclSystemError;
}

void EmuRuntime::hostFree(void* host) {
  EMU_REFUSE("hostFree (cudaFreeHost)", true, );
  deviceSynchronize();
  free(host);
}

ncclResult_t EmuRuntime::hostRegister(void* p, size_t, void** dev) {
  EMU_REFUSE("hostRegister (cudaHostRegister)", false, ncclUnhandledCudaError);
  std::string cpus = callingThreadCpus();
  std::lock_guard<std::mutex> lock(mem_->mutex);
  hostRegisterCpus = std::move(cpus);
  if (!mem_->registered.insert(p).second) {
    mem_->lastError = "hostRegister: memory already registered";
    return ncclUnhandledCudaError;
  }
  *dev = p;
  return ncclSuccess;
}

void EmuRuntime::hostUnregister(void* p) {
  EMU_REFUSE("hostUnregister (cudaHostUnregister)", false, );
  std::lock_guard<std::mutex> lock(mem_->mutex);
  mem_->registered.erase(p);
}

size_t EmuRuntime::registeredCount() {
  std::lock_guard<std::mutex> lock(mem_->mutex);
  return mem_->registered.size();
}

size_t EmuRuntime::allocationCount() {
  std::lock_guard<std::mutex> lock(mem_->mutex);
  return mem_->allocs.size();
}

ncclResult_t EmuRuntime::addressRange(const void* p, void** base, size_t* bytes) {
  EMU_REFUSE("addressRange (cuMemGetAddressRange)", false, ncclUnhandledCudaError);
  std::lock_guard<std::mutex> lock(mem_->mutex);
  const char* c = static_cast<const char*>(p);
  auto it = mem_->allocs.upper_bound(const_cast<char*>(c));
  if (it != mem_->allocs.begin()) {
    --it;
    if (c < it->first + it->second.size) {
      *base = it->first;
      *bytes = it->second.size;
      return ncclSuccess;
    }
  }
  mem_->lastError = "emu: addressRange of a pointer that is not device memory";
  return ncclUnhandledCudaError;
}

ncclResult_t EmuRuntime::ipcGetHandle(void* p, chorus::IpcHandle* h) {
  EMU_REFUSE("ipcGetHandle", false, ncclUnhandledCudaError);
  std::lock_guard<std::mutex> lock(mem_->mutex);
  auto it = mem_->allocs.find(static_cast<char*>(p));
  if (it == mem_->allocs.end()) {
    mem_->lastError = "emu: ipcGetHandle of a pointer that is not an allocation base";
    return ncclUnhandledCudaError;
  }
  HandleBytes hb{static_cast<uint64_t>(getpid()), it->second.fd, it->second.size};
  std::memset(h, 0, sizeof(*h));
  std::memcpy(h->bytes, &hb, sizeof(hb));
  return ncclSuccess;
}

ncclResult_t EmuRuntime::ipcOpenHandle(const chorus::IpcHandle& h, void** p) {
  EMU_REFUSE("ipcOpenHandle", false, ncclUnhandledCudaError);
  HandleBytes hb;
  std::memcpy(&hb, h.bytes, sizeof(hb));
  char path[64];
  snprintf(path, sizeof(path), "/proc/%lu/fd/%d", static_cast<unsigned long>(hb.pid), hb.fd);
  int fd = open(path, O_RDWR);
  void* m = fd >= 0 ? mmap(nullptr, hb.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
  int e = errno;
  if (fd >= 0) close(fd);
  std::lock_guard<std::mutex> lock(mem_->mutex);
  if (m == MAP_FAILED) {
    mem_->lastError = std::string("emu: opening ") + path + ": " + strerror(e);
    return ncclUnhandledCudaError;
  }
  unpoisonNewMapping(m, hb.size);
  mem_->opened[static_cast<char*>(m)] = hb.size;
  *p = m;
  return ncclSuccess;
}

void EmuRuntime::ipcCloseHandle(void* p) {
  EMU_REFUSE("ipcCloseHandle", false, );
  std::lock_guard<std::mutex> lock(mem_->mutex);
  auto it = mem_->opened.find(static_cast<char*>(p));
  if (it == mem_->opened.end()) return;
  munmap(p, it->second);
  mem_->opened.erase(it);
}

bool EmuRuntime::gpuDirectRdma(int, chorus::GpuDirectPaths* paths, std::string* why) {
  paths->peerMemory = gpuDirect && peerMemory;
  paths->dmaBuf = gpuDirect && dmaBuf;
  if (!gpuDirect) *why = "emu: gpuDirect is off";
  else if (!peerMemory && !dmaBuf) *why = "emu: neither peer memory nor dma-buf";
  return paths->peerMemory || paths->dmaBuf;
}

ncclResult_t EmuRuntime::dmaBufFd(void* p, size_t bytes, int* fd, uint64_t* offset) {
  *fd = -1;
  if (!gpuDirect || !dmaBuf || dmaBufFails) {
    mem_->fail("emu: dmaBufFd: the driver exports no dma-buf");
    return ncclUnhandledCudaError;
  }
  // The dma-buf is the allocation's own memfd: a net can map it at *offset and find the bytes at p.
  std::lock_guard<std::mutex> lock(mem_->mutex);
  char* at = static_cast<char*>(p);
  for (const auto& [base, a] : mem_->allocs) {
    if (at < base || at + bytes > base + a.size) continue;
    *fd = fcntl(a.fd, F_DUPFD_CLOEXEC, 0);
    *offset = static_cast<uint64_t>(at - base);
    if (*fd >= 0) return ncclSuccess;
    mem_->lastError = std::string("emu: dmaBufFd: dup: ") + strerror(errno);
    return ncclUnhandledCudaError;
  }
  mem_->lastError = "emu: dmaBufFd: no device allocation holds the range";
  return ncclUnhandledCudaError;
}

int EmuRuntime::computeCapability(int) { return computeCap; }

bool EmuRuntime::canAccessPeer(int, int) {
  EMU_REFUSE("canAccessPeer", false, false);
  return peerAccess;
}

ncclResult_t EmuRuntime::enablePeerAccess(int) {
  EMU_REFUSE("enablePeerAccess", false, ncclUnhandledCudaError);
  return ncclSuccess;
}

int EmuRuntime::maxResidentBlocks(int) {
  EMU_REFUSE("maxResidentBlocks (occupancy query)", false, 0);
  return residentBlocks;
}

uint64_t EmuRuntime::clockTicksPerMs(int) {
  EMU_REFUSE("clockTicksPerMs (device attribute)", false, 0);
  return 1000000;
}

void EmuRuntime::beginSetup() { tSetupDepth++; }
void EmuRuntime::endSetup() { tSetupDepth--; }

ncclResult_t EmuRuntime::streamCaptureInfo(cudaStream_t h, bool* capturing, uint64_t* id) {
  Exec::Stream* s = streamOf(this, exec_, h);
  std::lock_guard<std::mutex> lock(exec_->mutex);
  *capturing = s->capturing;
  *id = s->capturing ? s->captureId : 0;
  return ncclSuccess;
}

bool EmuRuntime::streamId(cudaStream_t h, uint64_t* id) {
  Exec::Stream* s = streamOf(this, exec_, h);
  {
    std::lock_guard<std::mutex> lock(exec_->mutex);
    if (s->capturing) {
      s->invalidated = true;
    } else {
      *id = s->id;
      return true;
    }
  }
  mem_->fail("emu: streamId (cudaStreamGetId) of a stream that is being captured (the capture is invalidated)");
  return false;
}

void EmuRuntime::createStream(cudaStream_t h) {
  std::lock_guard<std::mutex> lock(exec_->mutex);
  exec_->destroyed.erase(h);
}

void EmuRuntime::destroyStream(cudaStream_t h) {
  std::lock_guard<std::mutex> lock(exec_->mutex);
  exec_->streams.erase(h);  // the Stream stays (leaked): its worker runs what was queued, and events may name it
  exec_->destroyed.insert(h);
}

ncclResult_t EmuRuntime::eventCreate(void** ev) {
  EMU_REFUSE("eventCreate", false, ncclUnhandledCudaError);
  *ev = new Exec::Event();
  return ncclSuccess;
}

void EmuRuntime::eventDestroy(void* ev) {
  EMU_REFUSE("eventDestroy", false, );
  delete static_cast<Exec::Event*>(ev);  // waits already queued copied what they need
}

ncclResult_t EmuRuntime::eventRecord(void* evp, cudaStream_t h) {
  auto* ev = static_cast<Exec::Event*>(evp);
  Exec::Stream* s = streamOf(this, exec_, h);
  {
    std::lock_guard<std::mutex> lock(exec_->mutex);
    if (s->capturing) {  // a node of the capture: replays keep the capture's order, which this respects
      ev->stream = s;
      ev->captureId = s->captureId;
      ev->target = 0;
      return ncclSuccess;
    }
  }
  std::lock_guard<std::mutex> lock(s->m);
  ev->stream = s;
  ev->captureId = 0;
  ev->target = s->enqueued;  // everything queued so far
  return ncclSuccess;
}

ncclResult_t EmuRuntime::streamWaitEvent(cudaStream_t h, void* evp) {
  auto* ev = static_cast<Exec::Event*>(evp);
  Exec::Stream* s = streamOf(this, exec_, h);
  {
    std::lock_guard<std::mutex> lock(exec_->mutex);
    if (s->capturing || ev->captureId != 0) {
      if (s->capturing && ev->captureId == s->captureId) {  // an edge inside the capture
        streamWaits++;
        return ncclSuccess;
      }
      if (s->capturing) s->invalidated = true;
      mem_->fail(std::string("emu: streamWaitEvent across a capture boundary (an event recorded ") +
                 (ev->captureId != 0 ? "inside a capture" : "outside the capture") +
                 "): cudaErrorStreamCaptureIsolation");
      return ncclUnhandledCudaError;
    }
  }
  if (ev->stream == nullptr) return ncclSuccess;  // never recorded: nothing to wait for
  streamWaits++;
  Exec::Item it(Exec::Item::kWait);
  it.waitStream = ev->stream;
  it.waitTarget = ev->target;
  enqueue(s, std::move(it));
  return ncclSuccess;
}

namespace {

// Records into the stream's capture, if it is capturing. Returns false when the work must be queued instead; sets
// *res when the capture was invalidated earlier (CUDA fails every later capture call then).
bool captured(Exec* ex, Exec::Stream* s, EmuGraph::Node node, ncclResult_t* res, EmuRuntime::Mem* mem) {
  std::lock_guard<std::mutex> lock(ex->mutex);
  if (!s->capturing) return false;
  if (s->invalidated) {
    mem->fail("emu: operation failed due to a previous error during capture");
    *res = ncclUnhandledCudaError;
    return true;
  }
  s->graph->nodes.push_back(std::move(node));
  *res = ncclSuccess;
  return true;
}

}  // namespace

ncclResult_t EmuRuntime::memcpyAsync(void* dst, const void* src, size_t bytes, cudaStream_t h) {
  Exec::Stream* s = streamOf(this, exec_, h);
  copies++;
  ncclResult_t res;
  if (captured(exec_, s, EmuGraph::Node{false, nullptr, dst, src, bytes}, &res, mem_)) return res;
  Exec::Item it(Exec::Item::kCopy);
  it.dst = dst;
  it.src = src;
  it.bytes = bytes;
  enqueue(s, std::move(it));
  return ncclSuccess;
}

namespace {
thread_local int tDirectLaunches = 0;
thread_local int tLaneLaunches = 0;
void countDirect(EmuRuntime* rt, const chorus::DevWork& w) {
  if (w.direct == chorus::kDevDirectIpc) {
    rt->ipcLaunches++;
    return;
  }
  if (w.direct == chorus::kDevDirectWindows) {
    rt->windowLaunches++;
    return;
  }
  rt->directLaunches++;
  tDirectLaunches++;
}
}  // namespace

int EmuRuntime::directLaunchesOfThisThread() { return tDirectLaunches; }
int EmuRuntime::laneLaunchesOfThisThread() { return tLaneLaunches; }

ncclResult_t EmuRuntime::launch(const chorus::DevWork& work, cudaStream_t h) {
  Exec::Stream* s = streamOf(this, exec_, h);
  auto w = std::make_shared<chorus::DevWork>(work);
  if (beforeLaunch) beforeLaunch(*w);
  lastChannels = work.nChannels;
  lastLanes = chorus::workLanes(work);
  lastThreads = work.threads;
  int ordered = 0;
  const int scheduleChannels = work.nChannels / chorus::workLanes(work);
  if (work.direct == chorus::kDevThroughFifos && scheduleChannels <= chorus::kDevMaxChannels)
    for (int i = 0; i < work.chanFirst[scheduleChannels] && i < chorus::kDevMaxRuns; i++)
      ordered += work.runs[i].ordered != 0 ? 1 : 0;
  lastOrderedRuns = ordered;
  int lag = 0;
  for (int ch = 0; ch < work.nChannels / chorus::workLanes(work) && ch < chorus::kDevMaxChannels; ch++)
    if (work.chanLagFrom[ch] >= 0) lag = std::max(lag, static_cast<int>(work.chanLag[ch]));
  lastMaxLag = lag;
  if (chorus::workLanes(work) > 1) tLaneLaunches++;
  ncclResult_t res;
  if (captured(exec_, s, EmuGraph::Node{true, w, nullptr, nullptr, 0}, &res, mem_)) {
    if (res == ncclSuccess) launches++;
    if (res == ncclSuccess && work.direct) countDirect(this, work);
    return res;
  }
  Exec::Item it(Exec::Item::kKernel);
  it.work = std::move(w);
  enqueue(s, std::move(it));
  launches++;
  if (work.direct) countDirect(this, work);
  return ncclSuccess;
}

ncclResult_t EmuRuntime::streamSynchronize(cudaStream_t h) {
  Exec::Stream* s = streamOf(this, exec_, h);
  {
    std::lock_guard<std::mutex> lock(exec_->mutex);
    if (s->capturing) {
      s->invalidated = true;
      mem_->fail("emu: streamSynchronize of a stream that is being captured (the capture is invalidated)");
      return ncclUnhandledCudaError;
    }
  }
  waitIdle(s);  // another stream than a capturing one: allowed in every mode
  return ncclSuccess;
}

ncclResult_t EmuRuntime::deviceSynchronize() {
  EMU_REFUSE("deviceSynchronize", true, ncclUnhandledCudaError);
  std::vector<Exec::Stream*> mine;
  {
    std::lock_guard<std::mutex> lock(exec_->mutex);
    for (auto& [h, s] : exec_->streams)
      if (s->dev == tCurrentDevice) mine.push_back(s);
  }
  for (Exec::Stream* s : mine) waitIdle(s);
  return ncclSuccess;
}

ncclResult_t EmuRuntime::copyToHost(void* dst, const void* src, size_t bytes) {
  EMU_REFUSE("copyToHost (cudaMemcpy)", false, ncclUnhandledCudaError);
  __atomic_thread_fence(__ATOMIC_ACQUIRE);
  std::memcpy(dst, src, bytes);
  return ncclSuccess;
}

ncclResult_t EmuRuntime::copyToDevice(void* dst, const void* src, size_t bytes) {
  EMU_REFUSE("copyToDevice (cudaMemcpy)", false, ncclUnhandledCudaError);
  std::memcpy(dst, src, bytes);
  __atomic_thread_fence(__ATOMIC_RELEASE);
  return ncclSuccess;
}

std::string EmuRuntime::lastError() {
  std::lock_guard<std::mutex> lock(mem_->mutex);
  return mem_->lastError;
}

// ---- the test's side --------------------------------------------------------------------------------------------

ncclResult_t EmuRuntime::beginCapture(cudaStream_t h, Capture mode) {
  Exec::Stream* s = streamOf(this, exec_, h);
  std::lock_guard<std::mutex> lock(exec_->mutex);
  if (s->capturing) {
    mem_->fail("emu: beginCapture: the stream is already capturing");
    return ncclInvalidUsage;
  }
  s->capturing = true;
  s->mode = mode;
  s->owner = std::this_thread::get_id();
  s->captureId = ++exec_->nextCaptureId;
  s->graph = std::make_shared<EmuGraph>();
  s->invalidated = false;
  return ncclSuccess;
}

ncclResult_t EmuRuntime::endCapture(cudaStream_t h, std::shared_ptr<EmuGraph>* graph) {
  Exec::Stream* s = streamOf(this, exec_, h);
  std::lock_guard<std::mutex> lock(exec_->mutex);
  graph->reset();
  if (!s->capturing) {
    mem_->fail("emu: endCapture: the stream is not capturing");
    return ncclInvalidUsage;
  }
  s->capturing = false;
  bool bad = s->invalidated;
  s->invalidated = false;
  if (bad) return ncclUnhandledCudaError;  // lastError() names the call that invalidated it
  *graph = std::move(s->graph);
  return ncclSuccess;
}

ncclResult_t EmuRuntime::graphLaunch(const std::shared_ptr<EmuGraph>& graph, cudaStream_t h) {
  Exec::Stream* s = streamOf(this, exec_, h);
  for (const EmuGraph::Node& n : graph->nodes) {
    Exec::Item it(n.kernel ? Exec::Item::kKernel : Exec::Item::kCopy);
    it.work = n.work;
    it.dst = n.dst;
    it.src = n.src;
    it.bytes = n.bytes;
    enqueue(s, std::move(it));
  }
  return ncclSuccess;
}

void EmuRuntime::enqueueHost(cudaStream_t h, std::function<void()> fn) {
  Exec::Item it(Exec::Item::kHost);
  it.fn = std::move(fn);
  enqueue(streamOf(this, exec_, h), std::move(it));
}

DevBuf::DevBuf(EmuRuntime& rt, size_t bytes) : rt_(rt) {
  chorus::SetupScope setup(&rt_);
  if (rt_.deviceAlloc(bytes ? bytes : 1, &p_) != ncclSuccess) abort();
}

DevBuf::~DevBuf() { rt_.deviceFree(p_); }

}  // namespace chorus_test
