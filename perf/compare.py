#!/usr/bin/env python3
"""Prints a Markdown table comparing two perf runs size by size: their JSON, or the text table nccl-tests (and
chorus's perf tools) print.

    perf/compare.py chorus.json mpi.json [--placement out_of_place|in_place] [--names chorus "Open MPI"]
    perf/compare.py c1.json,c2.json,c3.json m1.json,m2.json,m3.json     # medians of repeated runs

Columns: size, each side's time (us) and busbw (GB/s), and the ratio busbw(first) / busbw(second), which equals
time(second) / time(first): above 1 the first side is faster. A comma-separated list stands for repeated runs
of one configuration: each size then shows the median time (and the busbw of that time). Only sizes present on
both sides are listed.
"""
import argparse
import json
import statistics
import sys


def parse_text(text):
    """The results of a run's printed table (nccl-tests' format) in the JSON layout: {"tool", "results": [...]}.

    Rows are: size count type redop root, then time algbw busbw #wrong out of place and again in place. A run
    that stopped half-way keeps the rows it completed."""
    doc = {"results": []}
    for line in text.splitlines():
        f = line.split()
        if line.startswith("# Collective test starting:"):
            doc["tool"] = f[-1]
        if len(f) < 13 or line.startswith("#") or not f[0].isdigit():
            continue
        try:
            oop = {"time": float(f[5]), "alg_bw": float(f[6]), "bus_bw": float(f[7])}
            ip = {"time": float(f[9]), "alg_bw": float(f[10]), "bus_bw": float(f[11])}
        except ValueError:
            continue
        doc["results"].append({"size": int(f[0]), "out_of_place": oop, "in_place": ip})
    if not doc["results"]:
        raise ValueError("no result rows")
    return doc


def read_doc(path):
    """A run from a JSON file, or from a log holding the printed table."""
    with open(path) as f:
        text = f.read()
    try:
        return json.loads(text)
    except ValueError:
        try:
            return parse_text(text)
        except ValueError as e:
            raise ValueError(f"{path}: neither JSON nor a results table ({e})")


def load(paths, placement):
    """Reads one run (JSON or a printed table) or a comma-separated list of them; returns (first doc,
    {size: (time_us, busbw)})."""
    docs, samples = [], {}
    for path in paths.split(","):
        doc = read_doc(path)
        docs.append(doc)
        for r in doc.get("results", []):
            p = r.get(placement)
            t = p and p.get("time", p.get("cpu_time"))
            if t and r.get("size", 0) > 0:
                samples.setdefault(r["size"], []).append((t, p.get("bus_bw", 0.0)))
    out = {}
    for size, pts in samples.items():
        # busbw is a constant over the time for one size, so the median time carries the median busbw.
        t = statistics.median(p[0] for p in pts)
        k = pts[0][0] * pts[0][1]
        out[size] = (t, k / t if t else 0.0)
    return docs[0], out


def human(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:g} {unit}"
        n /= 1024


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("first")
    ap.add_argument("second")
    ap.add_argument("--placement", default="out_of_place", choices=["out_of_place", "in_place"])
    ap.add_argument("--names", nargs=2, default=None, help="column names of the two runs")
    a = ap.parse_args()
    try:
        d1, r1 = load(a.first, a.placement)
        d2, r2 = load(a.second, a.placement)
    except (OSError, ValueError) as e:
        sys.exit(f"compare.py: {e}")
    n1, n2 = a.names or (d1.get("library", "first"), d2.get("library", "second"))
    print(f"| size | {n1} time (us) | {n2} time (us) | {n1} busbw (GB/s) | {n2} busbw (GB/s) | {n1}/{n2} |")
    print("|---:|---:|---:|---:|---:|---:|")
    for size in sorted(set(r1) & set(r2)):
        (t1, b1), (t2, b2) = r1[size], r2[size]
        ratio = t2 / t1 if t1 and t2 else float("nan")
        print(f"| {human(size)} | {t1:.2f} | {t2:.2f} | {b1:.3f} | {b2:.3f} | {ratio:.2f} |")


if __name__ == "__main__":
    main()
