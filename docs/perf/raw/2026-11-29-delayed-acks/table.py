#!/usr/bin/env python3
"""Tables of docs/perf/net.md, "9. Delayed ACKs", from the runs' .log tables.

python3 table.py small   quick ACKs (d0) against delayed ACKs (d1) at 8 B - 32 KB, Open MPI over all runs
python3 table.py mid     4 hosts x 2 ranks at 1-8 KB, chorus only, three runs of each
"""
import glob, importlib.util, math, os, sys

here = os.path.dirname(os.path.abspath(__file__))
# parse (a run's .log table: time in us by collective, library, size) and rng, from section 8's script
_spec = importlib.util.spec_from_file_location('stage', os.path.join(here, '..', '2026-11-29-stage', 'table.py'))
_stage = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_stage)
parse, rng = _stage.parse, _stage.rng


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return (xs[n // 2] + xs[(n - 1) // 2]) / 2


def table(folder, setup, mpi_col, base=here, old='d0', new='d1', names=('quick ACKs', 'delayed ACKs')):
    """old against new (the run folders' tags) in base/folder for setup; Open MPI's column from every run."""
    runs = {v: [parse(f) for f in sorted(glob.glob(f'{base}/{folder}/{setup}-{v}-r*.log'))] for v in (old, new)}
    keys = sorted(k for k in runs[old][0] if k[1] == 'Socket')
    print(f'\n{setup}\n\n| collective | size (B) | {names[0]} | {names[1]} |' + (' Open MPI |' if mpi_col else ''))
    print('|---|---|---|---|' + ('---|' if mpi_col else ''))
    logs, mlogs = [], []
    for k in keys:
        q = [r[k] for r in runs[old] if k in r]
        d = [r[k] for r in runs[new] if k in r]
        logs.append(math.log((sum(d) / len(d)) / (sum(q) / len(q))))
        cells = f'| {k[0]} | {k[2]} | {rng(q)} | {rng(d)} |'
        if mpi_col:
            mpi = [r[(k[0], 'MPI', k[2])] for v in runs for r in runs[v] if (k[0], 'MPI', k[2]) in r]
            mlogs.append(math.log(median(d) / median(mpi)))
            cells += f' {rng(mpi)} |'
        print(cells)
    print(f'\n{names[1]} / {names[0]}, geometric mean of the mean times: {math.exp(sum(logs) / len(logs)):.3f} '
          f'({len(logs)} sizes)')
    if mpi_col:
        print(f'{names[1]} / Open MPI, geometric mean of the medians: {math.exp(sum(mlogs) / len(mlogs)):.3f}')


if __name__ == '__main__':
    if sys.argv[1] == 'small':
        for s in ('h4', 'x42', 'h2'):
            table('small', s, True)
    else:
        table('x42mid', 'x42', False)
