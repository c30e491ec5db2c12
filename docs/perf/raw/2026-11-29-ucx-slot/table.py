#!/usr/bin/env python3
"""Tables of docs/perf/net.md, "11. A UCX slot as one message", from the runs' .log tables.

python3 table.py   for each setup (h4: 4 hosts x 1 rank, x42: 4 x 2, h2: 2 x 1): the UCX net before (base: build
                   f065145), now (new) and now with CHORUS_NET_SLOT_MESSAGE_MAX_BYTES=0 (zero), two runs each, and
                   Open MPI (from the "new" runs) at 8 B - 32 KB; times in us, ranges over the runs.
"""
import glob, importlib.util, math, os

here = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location('acks', os.path.join(here, '..', '2026-11-29-delayed-acks', 'table.py'))
_acks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_acks)
parse, rng, median = _acks.parse, _acks.rng, _acks.median


def geo(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def compare(folder, setup, vs, names, mpi_from):
    """The UCX rows of the runs folder/small/SETUP-V-r*.log for each tag V of vs (the first is the baseline), named
    `names`, with Open MPI's column from the runs of tag mpi_from; then each tag's ratio to the baseline (geometric
    mean of the mean times) and mpi_from's to Open MPI (of the medians)."""
    runs = {v: [parse(f) for f in sorted(glob.glob(f'{folder}/small/{setup}-{v}-r*.log'))] for v in vs}
    keys = sorted(k for k in runs[vs[0]][0] if k[1] == 'UCX')
    print(f'\n{setup}\n\n| collective | size (B) | ' + ' | '.join(names) + ' | Open MPI |\n|---|---|' + '---|' * (len(vs) + 1))
    ratio, mpi_ratio = {v: [] for v in vs[1:]}, []
    for k in keys:
        t = {v: [r[k] for r in runs[v] if k in r] for v in vs}
        mpi = [r[(k[0], 'MPI', k[2])] for r in runs[mpi_from] if (k[0], 'MPI', k[2]) in r]
        for v in vs[1:]:
            ratio[v].append((sum(t[v]) / len(t[v])) / (sum(t[vs[0]]) / len(t[vs[0]])))
        mpi_ratio.append(median(t[mpi_from]) / median(mpi))
        print(f'| {k[0]} | {k[2]} | ' + ' | '.join(rng(t[v]) for v in vs) + f' | {rng(mpi)} |')
    each = ', '.join(f'{names[vs.index(v)]} / {names[0]} {geo(ratio[v]):.3f}' for v in vs[1:])
    print(f'\ngeometric means of the mean times: {each} ({len(keys)} sizes); {names[vs.index(mpi_from)]} / Open MPI '
          f'(medians) {geo(mpi_ratio):.3f}; sizes within 5% of Open MPI or faster: '
          f'{sum(x <= 1.05 for x in mpi_ratio)} of {len(keys)}')


def table(setup):
    compare(here, setup, ('base', 'new', 'zero'), ('before', 'now', 'now, setting 0'), 'new')


if __name__ == '__main__':
    for s in ('h4', 'x42', 'h2'):
        table(s)
