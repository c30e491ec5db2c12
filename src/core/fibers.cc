#include "core/fibers.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

#if CHORUS_FIBERS_ASM
// A switch saves what the SysV ABI has the callee keep (rbx, rbp, r12-r15, the SSE and x87 control words) on the old
// stack, stores its stack pointer, and loads the new one. swapcontext also saves the signal mask with a system call:
// on the 2-core CI VM a hand-off between two tasks took 2.2 us through it and 0.04 us through this. A new stack is laid out as a switch would leave it, returning into
// fiber_start, which calls rbx(r12).
extern "C" void chorus_fiber_switch(void** saveSp, void* newSp);
extern "C" void chorus_fiber_start();
asm(R"(
  .text
  .globl chorus_fiber_switch
  .hidden chorus_fiber_switch
  .type chorus_fiber_switch, @function
chorus_fiber_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size chorus_fiber_switch, .-chorus_fiber_switch

  .globl chorus_fiber_start
  .hidden chorus_fiber_start
  .type chorus_fiber_start, @function
chorus_fiber_start:
  movq %r12, %rdi
  callq *%rbx
  ud2
  .size chorus_fiber_start, .-chorus_fiber_start
)");
#endif

namespace chorus {
namespace {

constexpr size_t kStackBytes = 512 * 1024;  // mapped, not touched: pages appear as the task uses them

}  // namespace

void Fibers::Context::prepare(void* stack, size_t bytes, void (*fn)(void*), void* arg) {
#if CHORUS_FIBERS_ASM
  uintptr_t top = (reinterpret_cast<uintptr_t>(stack) + bytes) & ~uintptr_t(15);
  auto* sp = reinterpret_cast<uint64_t*>(top - 64 - 16);  // 16-byte aligned: fiber_start calls with rsp % 16 == 0
  uint32_t mxcsr;
  uint16_t fpucw;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(fpucw));
  sp[0] = mxcsr | (static_cast<uint64_t>(fpucw) << 32);
  sp[1] = sp[2] = sp[3] = 0;                      // r15, r14, r13
  sp[4] = reinterpret_cast<uint64_t>(arg);        // r12
  sp[5] = reinterpret_cast<uint64_t>(fn);         // rbx
  sp[6] = 0;                                      // rbp
  sp[7] = reinterpret_cast<uint64_t>(&chorus_fiber_start);  // where the switch returns to
  this->sp = sp;
#else
  getcontext(&uc);
  uc.uc_stack.ss_sp = stack;
  uc.uc_stack.ss_size = bytes;
  uc.uc_link = nullptr;
  const uintptr_t a = reinterpret_cast<uintptr_t>(arg), f = reinterpret_cast<uintptr_t>(fn);
  makecontext(&uc, reinterpret_cast<void (*)()>(&Context::start), 4, static_cast<unsigned>(f),
              static_cast<unsigned>(f >> 32), static_cast<unsigned>(a), static_cast<unsigned>(a >> 32));
#endif
}

#if !CHORUS_FIBERS_ASM
void Fibers::Context::start(unsigned fLo, unsigned fHi, unsigned aLo, unsigned aHi) {
  auto fn = reinterpret_cast<void (*)(void*)>((static_cast<uintptr_t>(fHi) << 32) | fLo);
  fn(reinterpret_cast<void*>((static_cast<uintptr_t>(aHi) << 32) | aLo));
}
#endif

void Fibers::Context::switchTo(Context* to) {
#if CHORUS_FIBERS_ASM
  chorus_fiber_switch(&sp, to->sp);
#else
  swapcontext(&uc, &to->uc);
#endif
}

Fibers::~Fibers() {
  for (Fiber& f : fibers_)
    if (f.stack) munmap(f.stack, f.stackBytes);
}

void Fibers::entry(void* self) { static_cast<Fibers*>(self)->body(); }

void Fibers::body() {
  Fiber& f = fibers_[cur_];
  const ncclResult_t res = (*tasks_)[cur_]();
  if (res != ncclSuccess && stop_ == ncclSuccess) stop_ = res;
  f.done = true;
  live_--;
  f.ctx.switchTo(&main_);  // never resumed: run() prepares the stack afresh
}

ncclResult_t Fibers::run(const std::vector<Task>& tasks) {
  const int n = static_cast<int>(tasks.size());
  stop_ = ncclSuccess;
  mapErrno_ = 0;
  if (n == 1) return tasks[0]();
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  if (static_cast<int>(fibers_.size()) < n) fibers_.resize(n);
  for (int i = 0; i < n; i++) {
    Fiber& f = fibers_[i];
    if (!f.stack) {
      void* p = mmap(nullptr, kStackBytes + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                     -1, 0);
      if (p == MAP_FAILED) {
        mapErrno_ = errno;
        return ncclSystemError;  // before any task ran
      }
      mprotect(p, page, PROT_NONE);  // the stack grows down onto this page: an overflow faults instead of corrupting
      f.stack = p;
      f.stackBytes = kStackBytes + page;
    }
    f.ctx.prepare(static_cast<char*>(f.stack) + page, kStackBytes, &Fibers::entry, this);
    f.done = false;
  }
  tasks_ = &tasks;
  live_ = n;
  backoff_.reset();
  running_ = true;
  // Sweeps: a task runs when it can (its wait is over, or it has not started), or when it has been polled kPolls
  // times in vain (its own checks are due), or when another has failed (it is to return). A sweep in which none
  // could run backs off.
  while (live_ > 0) {
    bool ran = false;
    for (int i = 0; i < n; i++) {
      Fiber& f = fibers_[i];
      if (f.done) continue;
      if (f.ready && stop_ == ncclSuccess && !f.ready(f.arg)) {
        if (++f.polls < kPolls) continue;
      } else {
        ran = true;
      }
      f.ready = nullptr;
      f.polls = 0;
      cur_ = i;
      main_.switchTo(&f.ctx);
    }
    if (ran) {
      backoff_.reset();
    } else if (poll_ == nullptr) {
      backoff_.pause();
    } else if (!poll_(pollArg_)) {
      backoff_.yield();
    }
  }
  running_ = false;
  tasks_ = nullptr;
  return stop_;
}

bool Fibers::wait(bool (*ready)(void*), void* arg) {
  if (!running_ || live_ <= 1) return false;
  Fiber& f = fibers_[cur_];
  f.ready = ready;
  f.arg = arg;
  f.ctx.switchTo(&main_);
  return true;
}

}  // namespace chorus
