#!/usr/bin/env python3
"""Checks that the perf tools print nccl-tests' format and write consistent JSON.

Runs all_reduce_perf under chorusrun (2 processes) and with -g 2 (one process, two ranks), then every other
tool once with small sizes, and checks: the header lines, the "# Rank" lines, the table's column count, the
sizes the flags ask for, #wrong == 0, the busbw factor of each collective, the trailer, and the JSON fields.
It never judges performance (tests never time; perf/ measures).

    tests/perf_format_test.py --bin-dir build/perf
    tests/perf_format_test.py --bin-dir build/perf --mpirun "mpirun --allow-run-as-root --oversubscribe -np 2"

With --mpirun it checks instead all_reduce_perf and mpi_perf (same table) under that MPI launcher.
"""
import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile

NRANKS = 2
# busbw / algbw for 2 ranks, per tool (nccl-tests' factors: 2(n-1)/n, (n-1)/n or 1).
BUS_FACTOR = {
    "all_reduce_perf": 2 * (NRANKS - 1) / NRANKS,
    "all_gather_perf": (NRANKS - 1) / NRANKS,
    "reduce_scatter_perf": (NRANKS - 1) / NRANKS,
    "broadcast_perf": 1.0,
    "reduce_perf": 1.0,
    "alltoall_perf": (NRANKS - 1) / NRANKS,
    "gather_perf": (NRANKS - 1) / NRANKS,
    "scatter_perf": (NRANKS - 1) / NRANKS,
    "sendrecv_perf": 1.0,
    "hypercube_perf": 1.0,
}
# Tools whose in-place result nccl-tests does not check (#wrong is N/A).
NO_INPLACE_CHECK = {"alltoall_perf", "sendrecv_perf"}
# Size column for a requested size with 2 ranks (per-rank blocks rounded down to 16 bytes, as nccl-tests does).
LAYOUT_GATHER = {"all_gather_perf", "reduce_scatter_perf", "alltoall_perf", "gather_perf", "scatter_perf",
                 "hypercube_perf"}

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)
    return cond


def run(cmd, timeout=60):
    env = dict(os.environ)
    env.setdefault("CHORUS_TIMEOUT_S", "20")
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout, env=env)
    if p.returncode != 0:
        print(p.stdout)
        print(p.stderr, file=sys.stderr)
    check(p.returncode == 0, f"{' '.join(cmd)} exited {p.returncode}")
    return p.stdout


def expected_sizes(lo, hi, factor):
    sizes, s = [], lo
    while s <= hi:
        sizes.append(s)
        s *= factor
    return sizes


def reported_size(tool, size, elt=4):
    if tool not in LAYOUT_GATHER:
        return size
    base = (size // elt // NRANKS) & ~(16 // elt - 1)
    return base * NRANKS * elt


def parse(tool, out, sizes, nranks, same_pid):
    """Checks one run's text; returns the rows as lists of fields."""
    lines = out.splitlines()
    tag = f"[{tool}]"
    version = r"# .*nccl-tests [0-9.]+ format\)" + ("" if tool == "mpi_perf" else r" nccl-headers=\d+ nccl-library=\d+")
    check(lines and re.match(version, lines[0]), f"{tag} version line: {lines[:1]}")
    # Exactly once: only process 0 prints, as nccl-tests under MPI.
    check(lines.count(f"# Collective test starting: {tool}") == 1, f"{tag} one 'Collective test starting' line")
    check(any(re.match(r"# nThread \d+ nGpus \d+ minBytes \d+ maxBytes \d+ step: \d+\((factor|bytes)\) warmup iters: "
                       r"\d+ iters: \d+ agg iters: \d+ validation: \d+ graph: \d+", l) for l in lines),
          f"{tag} '# nThread' line")
    check(any(l.startswith("# Memory: host") for l in lines), f"{tag} host memory note")
    check("# Using devices" in lines, f"{tag} '# Using devices'")
    rank_lines = [l for l in lines if l.startswith("#  Rank")]
    check(len(rank_lines) == nranks, f"{tag} {len(rank_lines)} '#  Rank' lines, want {nranks}")
    pids = set()
    for i, l in enumerate(rank_lines):
        m = re.match(r"#  Rank +(\d+) Group +(\d+) Pid +(\d+) on +(\S+) device +host \[(.*)\] (.+)$", l)
        if check(m is not None, f"{tag} rank line format: {l!r}"):
            check(int(m.group(1)) == i, f"{tag} rank lines in order: {l!r}")
            pids.add(m.group(3))
    check((len(pids) == 1) == same_pid, f"{tag} pids {pids}: same process expected {same_pid}")
    hdr = [i for i, l in enumerate(lines) if re.match(r"#\s+size\s+count\s+type\s+redop\s+root\s+time\s+algbw", l)]
    if not check(len(hdr) == 1, f"{tag} one table header"):
        return []
    check("out-of-place" in lines[hdr[0] - 1] and "in-place" in lines[hdr[0] - 1], f"{tag} placement header")
    check(len(lines[hdr[0]].split()) == 14, f"{tag} header has 13 column names")
    check(re.match(r"#\s+\(B\)\s+\(elements\)", lines[hdr[0] + 1]) is not None, f"{tag} units line")
    rows = []
    for l in lines[hdr[0] + 2:]:
        if l.startswith("#") or not l.strip():
            break
        rows.append(l.split())
    for r in rows:
        check(len(r) == 13, f"{tag} row has 13 columns: {r}")
    got = [int(r[0]) for r in rows if len(r) == 13]
    want = [reported_size(tool, s) for s in sizes]
    check(got == want, f"{tag} sizes {got}, want {want}")
    for r in rows:
        if len(r) != 13:
            continue
        check(r[2] == "float", f"{tag} type column {r[2]}")
        for col in (5, 6, 7, 9, 10, 11):
            check(re.match(r"^\d+(\.\d+)?(e[+-]\d+)?$", r[col]) is not None, f"{tag} numeric column {col}: {r}")
        check(r[8] == "0", f"{tag} out-of-place #wrong {r[8]} at size {r[0]}")
        want_inplace = "N/A" if tool in NO_INPLACE_CHECK else "0"
        check(r[12] == want_inplace, f"{tag} in-place #wrong {r[12]} at size {r[0]} (want {want_inplace})")
    check("# Out of bounds values : 0 OK" in lines, f"{tag} 'Out of bounds values : 0 OK' trailer")
    avg = [l for l in lines if l.startswith("# Avg bus bandwidth")]
    check(len(avg) == 1 and re.match(r"# Avg bus bandwidth    : [0-9.e+-]+", avg[0]) is not None,
          f"{tag} 'Avg bus bandwidth' trailer: {avg}")
    check(f"# Collective test concluded: {tool}" in lines, f"{tag} 'Collective test concluded' line")
    return rows


def check_json(tool, path, rows, nranks, args_tail):
    tag = f"[{tool} json]"
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        check(False, f"{tag} unreadable: {e}")
        return
    for key in ("version", "tool", "library", "command_line", "args", "date", "start_time", "host", "nranks",
                "config", "devices", "results", "out_of_bounds", "average_bus_bandwidth"):
        check(key in doc, f"{tag} key {key}")
    check(doc.get("tool") == tool, f"{tag} tool {doc.get('tool')}")
    check(doc.get("nranks") == nranks, f"{tag} nranks {doc.get('nranks')}")
    check(doc.get("memory") == "host", f"{tag} memory {doc.get('memory')}")
    check(doc.get("command_line", "").endswith(args_tail), f"{tag} command line {doc.get('command_line')!r}")
    check(len(doc.get("devices", [])) == nranks, f"{tag} devices")
    check(doc.get("out_of_bounds", {}).get("count") == 0, f"{tag} out_of_bounds")
    results = doc.get("results", [])
    check(len(results) == len(rows), f"{tag} {len(results)} results for {len(rows)} rows")
    factor = BUS_FACTOR[tool]
    for res, row in zip(results, rows):
        check(res.get("size") == int(row[0]) and res.get("count") == int(row[1]), f"{tag} size/count {res}")
        for placement in ("out_of_place", "in_place"):
            p = res.get(placement)
            if not check(isinstance(p, dict), f"{tag} {placement} at size {res.get('size')}"):
                continue
            for key in ("time", "alg_bw", "bus_bw", "nwrong"):
                check(key in p, f"{tag} {placement}.{key}")
            t, alg, bus = p.get("time", 0), p.get("alg_bw", 0), p.get("bus_bw", 0)
            check(t > 0, f"{tag} {placement}.time {t}")
            if alg > 1e-4:
                check(abs(bus / alg - factor) < 1e-3, f"{tag} busbw/algbw {bus / alg:.4f}, want {factor:.4f}")
            wrong = p.get("nwrong")
            if placement == "in_place" and tool in NO_INPLACE_CHECK:
                check(wrong is None, f"{tag} in-place nwrong should be null")
            else:
                check(wrong == 0, f"{tag} {placement}.nwrong {wrong}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin-dir", required=True, help="folder holding chorusrun and the *_perf tools")
    ap.add_argument("--mpirun", help="MPI launcher command for 2 processes: check the tools under MPI instead")
    a = ap.parse_args()
    b = a.bin_dir
    chorusrun = os.path.join(b, "chorusrun")
    if a.mpirun:
        return check_mpi(b, shlex.split(a.mpirun))
    with tempfile.TemporaryDirectory() as tmp:
        # 1. Two processes under chorusrun, the README's shape.
        out_json = os.path.join(tmp, "out.json")
        flags = ["-b", "8", "-e", "1M", "-f", "4", "-n", "3", "-w", "1", "--json", out_json]
        out = run([chorusrun, "-n", "2", "--timeout", "60", os.path.join(b, "all_reduce_perf")] + flags)
        rows = parse("all_reduce_perf", out, expected_sizes(8, 1 << 20, 4), 2, same_pid=False)
        check_json("all_reduce_perf", out_json, rows, 2, " ".join(flags))

        # 2. One process, two ranks (-g 2).
        g_json = os.path.join(tmp, "g2.json")
        flags = ["-g", "2", "-b", "8", "-e", "1M", "-f", "4", "-n", "3", "-w", "1", "--json", g_json]
        out = run([os.path.join(b, "all_reduce_perf")] + flags)
        rows = parse("all_reduce_perf", out, expected_sizes(8, 1 << 20, 4), 2, same_pid=True)
        check_json("all_reduce_perf", g_json, rows, 2, " ".join(flags))

        # 3. Every other tool once, small sizes.
        for tool in sorted(BUS_FACTOR):
            if tool == "all_reduce_perf":
                continue
            path = os.path.join(tmp, tool + ".json")
            flags = ["-b", "1K", "-e", "64K", "-f", "8", "-n", "2", "-w", "1", "--json", path]
            out = run([chorusrun, "-n", "2", "--timeout", "60", os.path.join(b, tool)] + flags)
            rows = parse(tool, out, expected_sizes(1024, 64 << 10, 8), 2, same_pid=False)
            check_json(tool, path, rows, 2, " ".join(flags))

        # 4. A bad flag is refused with a non-zero status and a usage text.
        p = subprocess.run([os.path.join(b, "all_reduce_perf"), "--no-such-flag"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=30)
        check(p.returncode != 0 and "USAGE" in p.stdout, "bad flag: non-zero exit and usage")

    return summary()


def check_mpi(b, mpirun):
    """all_reduce_perf (ids over MPI) and mpi_perf (Open MPI's collectives) print the same table under mpirun."""
    with tempfile.TemporaryDirectory() as tmp:
        flags = ["-b", "8", "-e", "1M", "-f", "4", "-n", "3", "-w", "1"]
        for tool, cmd in (("all_reduce_perf", [os.path.join(b, "all_reduce_perf")]),
                          ("mpi_perf", [os.path.join(b, "mpi_perf"), "-op", "allreduce"])):
            if not os.path.exists(cmd[0]):
                print(f"skipping {tool}: not built")
                continue
            path = os.path.join(tmp, tool + ".json")
            out = run(mpirun + cmd + flags + ["--json", path])
            BUS_FACTOR.setdefault("mpi_perf", BUS_FACTOR["all_reduce_perf"])
            rows = parse(tool, out, expected_sizes(8, 1 << 20, 4), 2, same_pid=False)
            check_json(tool, path, rows, 2, " ".join(flags + ["--json", path]))
    return summary()


def summary():
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("perf format: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
