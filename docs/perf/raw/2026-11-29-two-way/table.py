#!/usr/bin/env python3
"""Tables of docs/perf/net.md, "10. Two ways over one socket", from the runs' .log tables.

python3 table.py small   one socket each way (t0) against two ways over one socket (t1) at 8 B - 32 KB, Open MPI over all runs
python3 table.py mid     16-64 KB, 4 hosts x 1 (h4) and 4 x 2 (x42), chorus only, two runs of each
"""
import glob, math, os, re, sys

here = os.path.dirname(os.path.abspath(__file__))


def parse(path):
    d = {}
    for line in open(path):
        m = re.match(r'\| (\w+) \| (.*?) \| (\d+) \| ([\d.]+) \|', line)
        if m and m.group(3) != '0':
            lib = 'MPI' if 'MPI' in m.group(2) else 'Socket'
            d[(m.group(1), lib, int(m.group(3)))] = float(m.group(4)) * 1000  # us
    return d


def rng(xs):
    xs = [round(x) for x in xs]
    return '%d-%d' % (min(xs), max(xs)) if xs else ''


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return (xs[n // 2] + xs[(n - 1) // 2]) / 2


def table(folder, setup, mpi_col):
    runs = {v: [parse(f) for f in sorted(glob.glob(f'{here}/{folder}/{setup}-{v}-r*.log'))] for v in ('t0', 't1')}
    keys = sorted(k for k in runs['t0'][0] if k[1] == 'Socket')
    print(f'\n{setup}\n\n| collective | size (B) | one-way | two-way |' + (' Open MPI |' if mpi_col else ''))
    print('|---|---|---|---|' + ('---|' if mpi_col else ''))
    logs, mlogs = [], []
    for k in keys:
        q = [r[k] for r in runs['t0'] if k in r]
        d = [r[k] for r in runs['t1'] if k in r]
        logs.append(math.log((sum(d) / len(d)) / (sum(q) / len(q))))
        cells = f'| {k[0]} | {k[2]} | {rng(q)} | {rng(d)} |'
        if mpi_col:
            mpi = [r[(k[0], 'MPI', k[2])] for v in runs for r in runs[v] if (k[0], 'MPI', k[2]) in r]
            mlogs.append(math.log(median(d) / median(mpi)))
            cells += f' {rng(mpi)} |'
        print(cells)
    print(f'\ntwo-way / one-way, geometric mean of the mean times: {math.exp(sum(logs) / len(logs)):.3f} ({len(logs)} sizes)')
    if mpi_col:
        print(f'two-way / Open MPI, geometric mean of the medians: {math.exp(sum(mlogs) / len(mlogs)):.3f}')


if __name__ == '__main__':
    if sys.argv[1] == 'small':
        for s in ('h4', 'x42', 'h2'):
            table('small', s, True)
    else:
        for s in ('h4', 'x42'):
            table('mid', s, False)
