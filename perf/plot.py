#!/usr/bin/env python3
"""Plots bus bandwidth and latency against message size from perf runs.

Reads one or more runs: their JSON (all_reduce_perf --json/-J, mpi_perf --json, or nccl-tests' own -J output) or
the logs holding the table they print (nccl-tests' format, compare.py's parse_text)
and writes one PNG with two panels: busbw (GB/s) and time (us) against size (bytes), one line per run,
out-of-place solid and in-place dashed. A comma-separated list of files is one series: the median of repeated
runs (see compare.py).

    perf/plot.py -o allreduce.png chorus.json mpi.json
    perf/plot.py --label chorus --label "Open MPI" -o cmp.png c1.json,c2.json,c3.json m1.json,m2.json,m3.json
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare  # noqa: E402  (the median loader, shared with the table)


def load_run(paths, label):
    series = {}
    doc = None
    for placement in ("out_of_place", "in_place"):
        doc, data = compare.load(paths, placement)
        series[placement] = sorted((size, bw, t) for size, (t, bw) in data.items())
    if not any(series.values()):
        raise ValueError(f"{paths}: no results")
    if label is None:
        lib = doc.get("library", "nccl")
        tool = doc.get("tool", "")
        nranks = doc.get("nranks")
        label = f"{lib} {tool}" + (f" ({nranks} ranks)" if nranks else "")
    return label, series


def human_size(n):
    for unit in ("", "K", "M", "G"):
        if n < 1024:
            return f"{n:g}{unit}"
        n /= 1024
    return f"{n:g}T"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json", nargs="+", help="JSON files written by --json or -J, or logs of the printed table")
    ap.add_argument("-o", "--output", default="perf.png", help="PNG to write (default perf.png)")
    ap.add_argument("--label", action="append", help="legend label per file, in order")
    ap.add_argument("--title", default=None, help="figure title")
    ap.add_argument("--no-inplace", action="store_true", help="plot out-of-place results only")
    args = ap.parse_args()

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("plot.py needs matplotlib, which this Python (%s) lacks: install it with "
                 "'apt-get install python3-matplotlib' (then run /usr/bin/python3 perf/plot.py) or "
                 "'pip install matplotlib'" % sys.executable)

    labels = args.label or []
    runs = []
    for i, path in enumerate(args.json):
        try:
            runs.append(load_run(path, labels[i] if i < len(labels) else None))
        except (OSError, ValueError, KeyError, json.JSONDecodeError) as e:
            sys.exit(f"plot.py: cannot read {path}: {e}")

    fig, (bw_ax, lat_ax) = plt.subplots(1, 2, figsize=(13, 5))
    for idx, (label, series) in enumerate(runs):
        color = f"C{idx}"
        for placement, style in (("out_of_place", "-"), ("in_place", "--")):
            pts = series.get(placement, [])
            if not pts or (args.no_inplace and placement == "in_place"):
                continue
            sizes = [p[0] for p in pts]
            name = label if placement == "out_of_place" else f"{label} (in place)"
            bw_ax.plot(sizes, [p[1] for p in pts], style, color=color, marker=".", label=name)
            lat_ax.plot(sizes, [p[2] for p in pts], style, color=color, marker=".", label=name)
    all_sizes = sorted({p[0] for _, s in runs for pts in s.values() for p in pts})
    ticks = all_sizes[::max(1, len(all_sizes) // 12)]
    for ax in (bw_ax, lat_ax):
        ax.set_xscale("log", base=2)
        ax.set_xticks(ticks)
        ax.set_xticklabels([human_size(t) for t in ticks], rotation=45)
        ax.set_xlabel("message size (bytes)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    bw_ax.set_ylabel("bus bandwidth (GB/s)")
    bw_ax.set_title("busbw vs size")
    lat_ax.set_yscale("log")
    lat_ax.set_ylabel("time per call (us)")
    lat_ax.set_title("latency vs size")
    if args.title:
        fig.suptitle(args.title)
    fig.tight_layout()
    fig.savefig(args.output, dpi=110)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
