#!/usr/bin/env python3
"""Tables of docs/perf/net.md, "12. UCX: two ways over one endpoint", from the runs' .log tables.

python3 table.py   for each setup (h4: 4 hosts x 1 rank, x42: 4 x 2, h2: 2 x 1): the UCX net with CHORUS_UCX_TWO_WAY=0
                   (w0) and 1 (w1, the default), two runs each, and Open MPI (from the w1 runs) at 8 B - 32 KB; times in
                   us, ranges over the runs.
"""
import importlib.util, os

here = os.path.dirname(os.path.abspath(__file__))
# compare(), from section 11's script
_spec = importlib.util.spec_from_file_location('slot', os.path.join(here, '..', '2026-11-29-ucx-slot', 'table.py'))
_slot = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_slot)


def table(setup):
    _slot.compare(here, setup, ('w0', 'w1'), ('one endpoint each way', 'two ways over one'), 'w1')


if __name__ == '__main__':
    for s in ('h4', 'x42', 'h2'):
        table(s)
