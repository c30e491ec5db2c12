#!/usr/bin/env bash
# Measures chorus against Open MPI on this machine, host memory, NP ranks (default 2): all_reduce, all_gather,
# reduce_scatter and alltoall with the same flags (default -b 8 -e 64M -f 2). For each collective it runs, back
# to back, two pairs that launch alike: unbound (chorus under chorusrun, mpi_perf under mpirun --bind-to none)
# and bound to a core each (both under mpirun, whose default binds -np 2 to cores). It writes the raw logs and
# JSON to OUT (default docs/perf/raw), each log headed by its command line, the date and the machine's load.
# REPEATS (default 3) rounds of all of it, interleaved, so compare.py can take medians over a noisy machine.
#
#   BIN=build-perf/perf perf/compare_cpu.sh
set -euo pipefail
BIN=${BIN:-build/perf}
OUT=${OUT:-docs/perf/raw}
NP=${NP:-2}
REPEATS=${REPEATS:-3}
FLAGS=${FLAGS:-"-b 8 -e 64M -f 2"}
DATE=$(date -u +%Y-%m-%d)
MPIRUN=(mpirun --allow-run-as-root --oversubscribe -np "$NP")
mkdir -p "$OUT"

run() {  # run LOG CMD...: the command's stdout to LOG, after a header saying what ran where and when
  local log=$1
  shift
  {
    echo "# command: $*"
    echo "# date: $(date -u '+%Y-%m-%d %H:%M:%S UTC'); host: $(hostname); cpu: $(lscpu | sed -n 's/^Model name: *//p')" \
         "x $(nproc) cores; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
    "$@"
    echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
  } > "$log"
  echo "wrote $log"
}

for round in $(seq 1 "$REPEATS"); do
  for pair in "allreduce all_reduce_perf" "allgather all_gather_perf" "reducescatter reduce_scatter_perf" \
              "alltoall alltoall_perf"; do
    read -r op tool <<< "$pair"
    base="$OUT/$DATE-cpu-$op"
    # shellcheck disable=SC2086  # FLAGS is a word list on purpose
    run "$base-chorus-r$round.txt" "$BIN/chorusrun" -n "$NP" "$BIN/$tool" $FLAGS --json "$base-chorus-r$round.json"
    # shellcheck disable=SC2086
    run "$base-mpi-r$round.txt" "${MPIRUN[@]}" --bind-to none "$BIN/mpi_perf" -op "$op" $FLAGS \
      --json "$base-mpi-r$round.json"
    # shellcheck disable=SC2086
    run "$base-chorus-bound-r$round.txt" "${MPIRUN[@]}" "$BIN/$tool" $FLAGS --json "$base-chorus-bound-r$round.json"
    # shellcheck disable=SC2086
    run "$base-mpi-bound-r$round.txt" "${MPIRUN[@]}" "$BIN/mpi_perf" -op "$op" $FLAGS \
      --json "$base-mpi-bound-r$round.json"
  done
done
