#!/usr/bin/env python3
"""Tables of docs/perf/net.md, "12. UCX: two ways over one endpoint", from the runs' .log tables.

python3 table.py   for each setup (h4: 4 hosts x 1 rank, x42: 4 x 2, h2: 2 x 1): the UCX net with CHORUS_UCX_TWO_WAY=0
                   (w0) and 1 (w1, the default), two runs each, and Open MPI (from the w1 runs) at 8 B - 32 KB; times in
                   us, ranges over the runs.
"""
import glob, importlib.util, math, os

here = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location('acks', os.path.join(here, '..', '2026-11-29-delayed-acks', 'table.py'))
_acks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_acks)
parse, rng, median = _acks.parse, _acks.rng, _acks.median


def geo(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def table(setup):
    runs = {v: [parse(f) for f in sorted(glob.glob(f'{here}/small/{setup}-{v}-r*.log'))] for v in ('w0', 'w1')}
    keys = sorted(k for k in runs['w0'][0] if k[1] == 'UCX')
    print(f'\n{setup}\n\n| collective | size (B) | one endpoint each way | two ways over one | Open MPI |\n|---|---|---|---|---|')
    ratio, mpi_ratio = [], []
    for k in keys:
        t = {v: [r[k] for r in runs[v] if k in r] for v in runs}
        mpi = [r[(k[0], 'MPI', k[2])] for r in runs['w1'] if (k[0], 'MPI', k[2]) in r]
        ratio.append((sum(t['w1']) / len(t['w1'])) / (sum(t['w0']) / len(t['w0'])))
        mpi_ratio.append(median(t['w1']) / median(mpi))
        print(f'| {k[0]} | {k[2]} | {rng(t["w0"])} | {rng(t["w1"])} | {rng(mpi)} |')
    print(f'\ntwo-way / one-way, geometric mean of the mean times: {geo(ratio):.3f} ({len(keys)} sizes); two-way / '
          f'Open MPI (medians) {geo(mpi_ratio):.3f}; sizes within 5% of Open MPI or faster: '
          f'{sum(x <= 1.05 for x in mpi_ratio)} of {len(keys)}')


if __name__ == '__main__':
    for s in ('h4', 'x42', 'h2'):
        table(s)
