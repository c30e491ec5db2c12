// chorusrun: starts n local ranks of a program without MPI, torchrun-style.
//
//   chorusrun -n 4 [--timeout S] [--grace S] [--port P] [--bind-to core|none] [--] prog args...
//
// Every child gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1, MASTER_PORT (a free
// port) and CHORUS_STORE_TOKEN (a random secret the perf tools' store checks). The children share a new
// process group, so chorusrun forwards each signal it receives exactly once (a terminal's ^C reaches only
// chorusrun) and can end their whole trees. When a rank fails (non-zero exit or a signal), the others get
// SIGTERM and, after the grace period, SIGKILL; chorusrun then exits with the first failure's status (128 +
// signal for a signal, 124 for --timeout), else 0. Waiting blocks in sigtimedwait: no polling loop.
// --bind-to core pins rank r to the r-th CPU it may use (modulo their count), as mpirun's default does.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kForwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};

void usage(FILE* out) {
  std::fprintf(
      out,
      "usage: chorusrun -n N [--timeout S] [--grace S] [--port P] [--bind-to core|none] [--] program [args...]\n"
      "  -n, -np N      number of local ranks (processes)\n"
      "  --timeout S    end every rank after S seconds and exit 124 (default: no limit)\n"
      "  --grace S      seconds between SIGTERM and SIGKILL when ending ranks (default 5)\n"
      "  --port P       MASTER_PORT to hand out (default: a free port)\n"
      "  --bind-to B    core: pin rank r to the r-th usable CPU; none (default): no pinning\n"
      "Each rank gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT and\n"
      "CHORUS_STORE_TOKEN. Exit status: the first failing rank's (128+signal if killed), 124 on timeout.\n");
}

// Whether `port` (0: any) can be bound on the loopback now; *got is the port bound.
bool tryBind(int port, int* got) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  socklen_t len = sizeof(a);
  bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
            getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  if (ok) *got = ntohs(a.sin_port);
  close(fd);
  return ok;
}

// A port nobody listens on now; rank 0 of the job binds it moments later. It is taken below the kernel's ephemeral
// range (net.ipv4.ip_local_port_range), which the kernel hands to every outgoing connection and port-0 bind: a port
// from that range could be taken by another process in between (seen with several jobs on a busy machine).
int freePort() {
  int low = 32768;
  if (FILE* f = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "r")) {
    if (std::fscanf(f, "%d", &low) != 1) low = 32768;
    std::fclose(f);
  }
  const int from = 10000;
  if (low - from >= 1000) {
    unsigned seed = static_cast<unsigned>(getpid()) ^
                    static_cast<unsigned>(std::chrono::steady_clock::now().time_since_epoch().count());
    for (int i = 0; i < 64; i++) {
      int port = from + static_cast<int>(rand_r(&seed) % static_cast<unsigned>(low - from)), got = -1;
      if (tryBind(port, &got)) return got;
    }
  }
  int got = -1;
  return tryBind(0, &got) ? got : -1;  // the kernel's choice
}

std::string randomToken() {
  unsigned char bytes[16] = {0};
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    if (read(fd, bytes, sizeof(bytes)) != static_cast<ssize_t>(sizeof(bytes))) std::memset(bytes, 0, sizeof(bytes));
    close(fd);
  }
  // Without /dev/urandom the token still separates jobs, if not attackers.
  unsigned long long fallback = static_cast<unsigned long long>(getpid()) ^
                                static_cast<unsigned long long>(Clock::now().time_since_epoch().count());
  std::string hex;
  char buf[3];
  for (size_t i = 0; i < sizeof(bytes); i++) {
    std::snprintf(buf, sizeof(buf), "%02x", bytes[i] ^ static_cast<unsigned char>(fallback >> (8 * (i % 8))));
    hex += buf;
  }
  return hex;
}

bool parsePositive(const char* text, double* out) {
  char* end = nullptr;
  double v = std::strtod(text, &end);
  if (end == text || *end != '\0' || v < 0) return false;
  *out = v;
  return true;
}

// Pins the calling process to the index-th CPU of its affinity mask (wrapping around).
void bindToCpu(int index) {
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return;
  int n = CPU_COUNT(&allowed);
  if (n <= 0) return;
  int want = index % n;
  for (int c = 0; c < CPU_SETSIZE; c++) {
    if (!CPU_ISSET(c, &allowed) || want-- != 0) continue;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(c, &one);
    sched_setaffinity(0, sizeof(one), &one);
    return;
  }
}

struct Child {
  pid_t pid = -1;
  bool alive = false;
};

}  // namespace

int main(int argc, char** argv) {
  int n = 0;
  double timeoutS = 0, graceS = 5;
  int port = 0;
  bool bind = false;
  int i = 1;
  for (; i < argc; i++) {
    std::string a = argv[i];
    auto value = [&](const char* flag) -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "chorusrun: %s needs a value\n", flag);
        std::exit(2);
      }
      return argv[++i];
    };
    double v = 0;
    if (a == "--") {
      i++;
      break;
    } else if (a == "-h" || a == "--help") {
      usage(stdout);
      return 0;
    } else if (a == "-n" || a == "-np" || a == "--np" || a == "--nproc") {
      if (!parsePositive(value("-n"), &v) || v < 1) {
        std::fprintf(stderr, "chorusrun: -n needs a positive count\n");
        return 2;
      }
      n = static_cast<int>(v);
    } else if (a == "--timeout") {
      if (!parsePositive(value("--timeout"), &timeoutS)) return 2;
    } else if (a == "--grace") {
      if (!parsePositive(value("--grace"), &graceS)) return 2;
    } else if (a == "--port") {
      if (!parsePositive(value("--port"), &v) || v < 1 || v > 65535) return 2;
      port = static_cast<int>(v);
    } else if (a == "--bind-to") {
      std::string how = value("--bind-to");
      if (how != "core" && how != "none") {
        std::fprintf(stderr, "chorusrun: --bind-to takes core or none\n");
        return 2;
      }
      bind = how == "core";
    } else if (!a.empty() && a[0] == '-') {
      std::fprintf(stderr, "chorusrun: unknown option %s\n", a.c_str());
      usage(stderr);
      return 2;
    } else {
      break;
    }
  }
  if (n < 1 || i >= argc) {
    usage(stderr);
    return 2;
  }
  char** program = argv + i;
  if (port == 0) port = freePort();
  if (port <= 0) {
    std::fprintf(stderr, "chorusrun: cannot find a free port: %s\n", std::strerror(errno));
    return 1;
  }
  const std::string token = randomToken();

  // Signals are taken with sigtimedwait, so they stay blocked here; children unblock them before exec.
  sigset_t waitSet, oldMask;
  sigemptyset(&waitSet);
  sigaddset(&waitSet, SIGCHLD);
  for (int s : kForwarded) sigaddset(&waitSet, s);
  sigprocmask(SIG_BLOCK, &waitSet, &oldMask);

  std::vector<Child> children(static_cast<size_t>(n));
  pid_t group = 0;
  int alive = 0;
  int status = 0;  // the first failure's exit status
  bool failed = false;
  auto endAll = [&](int sig) {
    if (group > 0) kill(-group, sig);
  };
  for (int r = 0; r < n; r++) {
    pid_t pid = fork();
    if (pid < 0) {
      std::fprintf(stderr, "chorusrun: fork for rank %d failed: %s\n", r, std::strerror(errno));
      endAll(SIGKILL);
      failed = true;
      status = 1;
      break;
    }
    if (pid == 0) {
      setpgid(0, group);  // group 0: the first child founds it
      sigprocmask(SIG_SETMASK, &oldMask, nullptr);
      if (bind) bindToCpu(r);
      setenv("RANK", std::to_string(r).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(n).c_str(), 1);
      setenv("LOCAL_WORLD_SIZE", std::to_string(n).c_str(), 1);
      setenv("MASTER_ADDR", "127.0.0.1", 1);
      setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      setenv("CHORUS_STORE_TOKEN", token.c_str(), 1);
      setenv("CHORUSRUN", "1", 1);
      execvp(program[0], program);
      std::fprintf(stderr, "chorusrun: rank %d: cannot run %s: %s\n", r, program[0], std::strerror(errno));
      _exit(127);
    }
    if (group == 0) group = pid;
    setpgid(pid, group);  // also from the parent, so no signal can race the child's own setpgid
    children[r].pid = pid;
    children[r].alive = true;
    alive++;
  }

  auto start = Clock::now();
  Clock::time_point killAt = Clock::time_point::max();  // SIGKILL deadline once ranks are being ended
  int interrupts = 0;
  while (alive > 0) {
    auto now = Clock::now();
    auto next = killAt;
    if (timeoutS > 0 && !failed)
      next =
          std::min(next, start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeoutS)));
    // Wake by SIGCHLD or a forwarded signal; the timeout only serves the deadlines (at most an hour apart).
    Clock::duration wait = std::chrono::hours(1);
    if (next - now < wait) wait = std::max(next - now, Clock::duration(0));
    auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(wait).count();
    timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
    siginfo_t info;
    int sig = sigtimedwait(&waitSet, &info, &ts);
    if (sig > 0 && sig != SIGCHLD) {
      endAll(sig);
      if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP || sig == SIGQUIT) {
        if (++interrupts > 1) endAll(SIGKILL);  // a second ^C means now
        if (!failed) {
          failed = true;
          status = 128 + sig;
        }
      }
    }
    // Reap whatever exited (SIGCHLD may stand for several children).
    while (true) {
      int ws = 0;
      pid_t pid = waitpid(-1, &ws, WNOHANG);
      if (pid <= 0) break;
      for (int r = 0; r < n; r++) {
        if (children[r].pid != pid || !children[r].alive) continue;
        children[r].alive = false;
        alive--;
        int code = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
        if (code != 0 && !failed) {
          failed = true;
          status = code;
          if (WIFEXITED(ws)) {
            std::fprintf(stderr, "chorusrun: rank %d (pid %d) exited with status %d; ending the other ranks\n", r,
                         static_cast<int>(pid), code);
          } else {
            std::fprintf(stderr, "chorusrun: rank %d (pid %d) was killed by signal %d (%s); ending the other ranks\n",
                         r, static_cast<int>(pid), WTERMSIG(ws), strsignal(WTERMSIG(ws)));
          }
          endAll(SIGTERM);
          killAt = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(graceS));
        }
      }
    }
    now = Clock::now();
    if (alive > 0 && !failed && timeoutS > 0 && now - start >= std::chrono::duration<double>(timeoutS)) {
      std::fprintf(stderr, "chorusrun: timeout after %g s with %d rank(s) still running; ending them\n", timeoutS,
                   alive);
      failed = true;
      status = 124;
      endAll(SIGTERM);
      killAt = now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(graceS));
    }
    if (failed && killAt == Clock::time_point::max()) {
      killAt = now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(graceS));
    }
    if (alive > 0 && now >= killAt) {
      std::fprintf(stderr, "chorusrun: %d rank(s) ignored SIGTERM for %g s; sending SIGKILL\n", alive, graceS);
      endAll(SIGKILL);
      killAt = Clock::time_point::max() - std::chrono::hours(1);  // once; keep reaping
    }
  }
  return status;
}
