// Command-line flags: nccl-tests' full set (same letters, long names, defaults and checks) plus --json and --mem.
#include <getopt.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "perf/common.h"
#include "perf/data.h"

namespace chorus {
namespace perf {
namespace {

constexpr int kOptJson = 1000;
constexpr int kOptMem = 1001;

void usage(const char* program) {
  std::printf(
      "USAGE: %s \n\t"
      "[-t,--nthreads <num threads>] \n\t"
      "[-g,--ngpus <ranks per thread>] \n\t"
      "[-b,--minbytes <min size in bytes>] \n\t"
      "[-e,--maxbytes <max size in bytes>] \n\t"
      "[-i,--stepbytes <increment size>] \n\t"
      "[-f,--stepfactor <increment factor>] \n\t"
      "[-n,--iters <iteration count>] \n\t"
      "[-m,--agg_iters <aggregated iteration count>] \n\t"
      "[-w,--warmup_iters <warmup iteration count>] \n\t"
      "[-N,--run_cycles <cycle count> run & print each cycle (default: 1; 0=infinite)] \n\t"
      "[-p,--parallel_init <0/1>] \n\t"
      "[-c,--check <check iteration count>] \n\t"
      "[-o,--op <sum/prod/min/max/avg/mulsum/all>] \n\t"
      "[-d,--datatype <nccltype/all>] \n\t"
      "[-r,--root <root/all>] \n\t"
      "[-z,--blocking <0/1/2/3> 1=barrier after each inner iter (-m), 2=no barrier, 3=wait and barrier after each "
      "outer iter (-n)] \n\t"
      "[-y,--stream_null <0/1>] (GPU only) \n\t"
      "[-T,--timeout <time in seconds>] \n\t"
      "[-G,--cudagraph <num graph launches>] (GPU only) \n\t"
      "[-C,--report_cputime <0/1>] \n\t"
      "[-S,--report_timestamps <0/1> report timestamps (default 0)] \n\t"
      "[-J,--output_file <file> write JSON output to file (never overwrites: adds .N)] \n\t"
      "[-a,--average <0/1/2/3> report average iteration time <0=RANK0/1=AVG/2=MIN/3=MAX>] \n\t"
      "[-R,--local_register <0/1/2> enable local (1) or symmetric (2) buffer registration] \n\t"
      "[-x,--cta_policy <0/1/2> set CTA policy] (GPU only) \n\t"
      "[-D,--device_implementation <implementation number>] (GPU only) \n\t"
      "[-V,--device_cta_count <number>] (GPU only) \n\t"
      "[-M,--memory <0/1> enable memory usage report (default: 0)] \n\t"
      "[-u,--unalign <index of first element> Misalign source and destination buffers (default: 0)] \n\t"
      "[-I,--per_iter_timing <0/1> per-iteration timing (default: 0)] \n\t"
      "[-K,--per_iter_skip <count> exclude leading samples from -I summary stats (default: 0)] \n\t"
      "[--json <file> write this run's results as JSON (overwrites)] \n\t"
      "[--mem <host/device> buffer memory (default: device when a GPU is present, else host)] \n\t"
      "[-h,--help]\n",
      program);
}

int parseType(const char* text) {
  for (int t = 0; t < ncclNumTypes; t++)
    if (std::strcmp(text, typeName(static_cast<ncclDataType_t>(t))) == 0) return t;
  if (std::strcmp(text, "all") == 0) return -1;
  std::printf("invalid type %s, defaulting to %s .. \n", text, typeName(ncclFloat32));
  return ncclFloat32;
}

int parseOp(const char* text) {
  for (int o = 0; o < kNumPerfOps; o++)
    if (std::strcmp(text, opName(o)) == 0) return o;
  if (std::strcmp(text, "all") == 0) return -1;
  std::printf("invalid op %s, defaulting to %s .. \n", text, opName(kOpSum));
  return kOpSum;
}

int toInt(const char* text) { return static_cast<int>(std::strtol(text, nullptr, 0)); }

}  // namespace

double parseSize(const char* text) {
  double size = 0;
  char unit = 0;
  int n = std::sscanf(text, "%lf %1c", &size, &unit);
  if (n == 1) return size;
  if (n != 2) return -1;
  switch (unit) {
    case 'G':
    case 'g':
      return size * (1u << 30);
    case 'M':
    case 'm':
      return size * (1u << 20);
    case 'K':
    case 'k':
      return size * (1u << 10);
    default:
      return -1;
  }
}

int parseOptions(int argc, char** argv, const CollSpec& spec, Options* o) {
  static const struct option kLong[] = {{"nthreads", required_argument, nullptr, 't'},
                                        {"ngpus", required_argument, nullptr, 'g'},
                                        {"minbytes", required_argument, nullptr, 'b'},
                                        {"maxbytes", required_argument, nullptr, 'e'},
                                        {"stepbytes", required_argument, nullptr, 'i'},
                                        {"stepfactor", required_argument, nullptr, 'f'},
                                        {"iters", required_argument, nullptr, 'n'},
                                        {"agg_iters", required_argument, nullptr, 'm'},
                                        {"warmup_iters", required_argument, nullptr, 'w'},
                                        {"run_cycles", required_argument, nullptr, 'N'},
                                        {"parallel_init", required_argument, nullptr, 'p'},
                                        {"check", required_argument, nullptr, 'c'},
                                        {"op", required_argument, nullptr, 'o'},
                                        {"datatype", required_argument, nullptr, 'd'},
                                        {"root", required_argument, nullptr, 'r'},
                                        {"blocking", required_argument, nullptr, 'z'},
                                        {"stream_null", required_argument, nullptr, 'y'},
                                        {"timeout", required_argument, nullptr, 'T'},
                                        {"cudagraph", required_argument, nullptr, 'G'},
                                        {"report_cputime", required_argument, nullptr, 'C'},
                                        {"report_timestamps", required_argument, nullptr, 'S'},
                                        {"output_file", required_argument, nullptr, 'J'},
                                        {"average", required_argument, nullptr, 'a'},
                                        {"local_register", required_argument, nullptr, 'R'},
                                        {"cta_policy", required_argument, nullptr, 'x'},
                                        {"device_implementation", required_argument, nullptr, 'D'},
                                        {"device_cta_count", required_argument, nullptr, 'V'},
                                        {"memory", required_argument, nullptr, 'M'},
                                        {"unalign", required_argument, nullptr, 'u'},
                                        {"per_iter_timing", required_argument, nullptr, 'I'},
                                        {"per_iter_skip", required_argument, nullptr, 'K'},
                                        {"json", required_argument, nullptr, kOptJson},
                                        {"mem", required_argument, nullptr, kOptMem},
                                        {"help", no_argument, nullptr, 'h'},
                                        {nullptr, 0, nullptr, 0}};
  o->args.assign(argv, argv + argc);
  const char* program = spec.program;
  optind = 1;
  while (true) {
    int c = getopt_long(argc, argv, "t:g:b:e:i:f:n:m:w:N:p:I:K:c:o:d:r:z:y:T:hG:C:a:R:x:D:V:J:S:M:u:", kLong, nullptr);
    if (c == -1) break;
    double parsed;
    switch (c) {
      case 't':
        o->nThreads = toInt(optarg);
        break;
      case 'g':
        o->nGpus = toInt(optarg);
        break;
      case 'b':
      case 'e':
      case 'i':
        parsed = parseSize(optarg);
        if (parsed < 0) {
          std::fprintf(stderr, "invalid size specified for '%s'\n",
                       c == 'b'   ? "minbytes"
                       : c == 'e' ? "maxbytes"
                                  : "stepBytes");
          return 1;
        }
        (c == 'b' ? o->minBytes : c == 'e' ? o->maxBytes : o->stepBytes) = static_cast<size_t>(parsed);
        break;
      case 'f':
        o->stepFactor = static_cast<size_t>(std::strtoul(optarg, nullptr, 0));
        break;
      case 'n':
        o->iters = toInt(optarg);
        break;
      case 'm':
        o->aggIters = toInt(optarg);
        break;
      case 'w':
        o->warmupIters = toInt(optarg);
        break;
      case 'N':
        o->runCycles = toInt(optarg);
        break;
      case 'c':
        o->check = toInt(optarg);
        break;
      case 'p':
        o->parallelInit = toInt(optarg);
        break;
      case 'o':
        o->op = parseOp(optarg);
        break;
      case 'd':
        o->type = parseType(optarg);
        break;
      case 'r':
        o->root = std::strcmp(optarg, "all") == 0 ? -1 : toInt(optarg);
        break;
      case 'z':
        o->blocking = toInt(optarg);
        break;
      case 'y':
        o->streamNull = toInt(optarg);
        o->ignored.push_back("-y");
        break;
      case 'T':
        o->timeoutS = toInt(optarg);
        break;
      case 'G':
        o->cudaGraph = toInt(optarg);
        break;
      case 'C':
        o->reportCpuTime = toInt(optarg);
        break;
      case 'J':
        o->outputFile = optarg;
        break;
      case 'S':
        o->reportTimestamps = toInt(optarg);
        break;
      case 'a':
        o->average = toInt(optarg);
        break;
      case 'R':
        o->localRegister = toInt(optarg);
        break;
      case 'x':
        o->ctaPolicy = toInt(optarg);
        o->ignored.push_back("-x");
        break;
      case 'D':
        o->deviceImpl = toInt(optarg);
        o->ignored.push_back("-D");
        break;
      case 'V':
        o->deviceCtaCount = toInt(optarg);
        if (o->deviceCtaCount <= 0 || o->deviceCtaCount > 128) {
          std::fprintf(stderr,
                       "device_cta_count (-V) must be positive and less than 128, got %d. "
                       "Using default value 16.\n",
                       o->deviceCtaCount);
          o->deviceCtaCount = 16;
        }
        o->ignored.push_back("-V");
        break;
      case 'M':
        o->memoryReport = toInt(optarg);
        break;
      case 'u':
        o->unalign = toInt(optarg);
        break;
      case 'I':
        o->perIterTiming = toInt(optarg);
        break;
      case 'K':
        o->perIterSkip = toInt(optarg);
        break;
      case kOptJson:
        o->jsonFile = optarg;
        break;
      case kOptMem:
        if (std::strcmp(optarg, "host") == 0) {
          o->mem = MemKind::kHost;
        } else if (std::strcmp(optarg, "device") == 0) {
          o->mem = MemKind::kDevice;
        } else {
          std::fprintf(stderr, "--mem must be host or device, got '%s'\n", optarg);
          return 1;
        }
        break;
      case 'h':
        usage(program);
        return 0;
      default:
        usage(program);
        return 1;
    }
  }
  if (optind < argc) {
    std::fprintf(stderr, "%s: unexpected argument '%s'\n", program, argv[optind]);
    usage(program);
    return 1;
  }
  // The same checks and fallbacks as nccl-tests, in the same order.
  if (o->nThreads < 1 || o->nGpus < 1) {
    std::fprintf(stderr, "-t and -g must be at least 1 (got %d and %d)\n", o->nThreads, o->nGpus);
    return 1;
  }
  if (o->iters < 1 || o->aggIters < 1 || o->warmupIters < 0 || o->check < 0 || o->runCycles < 0) {
    std::fprintf(stderr, "-n and -m must be at least 1, and -w, -c and -N at least 0\n");
    return 1;
  }
  if (o->stepFactor <= 1 && o->stepBytes == 0 && o->minBytes < o->maxBytes) {
    std::fprintf(stderr, "stepbytes (-i) must be positive when stepfactor (-f) is not above 1\n");
    return 1;
  }
  if (o->minBytes > o->maxBytes) {
    std::fprintf(stderr, "invalid sizes for 'minbytes' and 'maxbytes': %llu > %llu\n",
                 static_cast<unsigned long long>(o->minBytes), static_cast<unsigned long long>(o->maxBytes));
    return 1;
  }
  if (o->deviceImpl > 0 && o->localRegister != 2) {
    std::fprintf(stderr, "device implementation (-D > 0) requires enabling symmetric memory registration (-R 2)\n");
    return 1;
  }
  if (o->perIterTiming != 0 && o->perIterTiming != 1) {
    std::fprintf(stderr, "per-iteration timing (-I) only supports 0=off or 1=on. Disabling.\n");
    o->perIterTiming = 0;
  }
  if (o->perIterTiming && o->cudaGraph >= 1) {
    std::fprintf(stderr, "per-iteration timing (-I) is incompatible with CUDA graph mode (-G). Disabling.\n");
    o->perIterTiming = 0;
  }
  if (o->blocking == 3 && o->cudaGraph >= 1) {
    std::fprintf(stderr, "blocking mode (-z 3) is incompatible with CUDA graph mode (-G). Disabling.\n");
    o->blocking = 0;
  }
  if (o->perIterSkip < 0 || o->perIterSkip >= o->iters) {
    std::fprintf(stderr, "per-iteration skip (-K) must be between 0 and %d. Disabling.\n", o->iters - 1);
    o->perIterSkip = 0;
  }
  if (o->perIterSkip && !o->perIterTiming) {
    std::fprintf(stderr, "per-iteration skip (-K) requires per-iteration timing (-I 1). Disabling.\n");
    o->perIterSkip = 0;
  }
  if (o->localRegister < 0 || o->localRegister > 2) {
    std::fprintf(stderr, "-R must be 0, 1 or 2 (got %d)\n", o->localRegister);
    return 1;
  }
  return -1;
}

}  // namespace perf
}  // namespace chorus
