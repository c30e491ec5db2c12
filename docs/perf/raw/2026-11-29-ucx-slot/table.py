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


def table(setup):
    vs = ('base', 'new', 'zero')
    runs = {v: [parse(f) for f in sorted(glob.glob(f'{here}/small/{setup}-{v}-r*.log'))] for v in vs}
    keys = sorted(k for k in runs['base'][0] if k[1] == 'UCX')
    print(f'\n{setup}\n\n| collective | size (B) | before | now | now, setting 0 | Open MPI |\n|---|---|---|---|---|---|')
    ratio = {'new': [], 'zero': [], 'mpi': []}
    for k in keys:
        t = {v: [r[k] for r in runs[v] if k in r] for v in vs}
        mpi = [r[(k[0], 'MPI', k[2])] for r in runs['new'] if (k[0], 'MPI', k[2]) in r]
        mean = {v: sum(t[v]) / len(t[v]) for v in vs}
        ratio['new'].append(mean['new'] / mean['base'])
        ratio['zero'].append(mean['zero'] / mean['base'])
        ratio['mpi'].append(median(t['new']) / median(mpi))
        print(f'| {k[0]} | {k[2]} | {rng(t["base"])} | {rng(t["new"])} | {rng(t["zero"])} | {rng(mpi)} |')
    print(f'\ngeometric means of the mean times: now / before {geo(ratio["new"]):.3f}, setting 0 / before '
          f'{geo(ratio["zero"]):.3f} ({len(keys)} sizes); now / Open MPI (medians) {geo(ratio["mpi"]):.3f}; sizes '
          f'where now is within 5% of Open MPI or faster: {sum(x <= 1.05 for x in ratio["mpi"])} of {len(keys)}')


if __name__ == '__main__':
    for s in ('h4', 'x42', 'h2'):
        table(s)
