#!/usr/bin/env python3
"""Tables of docs/perf/net.md, "10. Two ways over one socket", from the runs' .log tables (the functions of
../2026-11-29-delayed-acks/table.py).

python3 table.py small   one socket each way (t0) against two ways over one socket (t1) at 8 B - 32 KB, Open MPI over all runs
python3 table.py mid     16-64 KB, 4 hosts x 1 (h4) and 4 x 2 (x42), chorus only, two runs of each
"""
import importlib.util, os, sys

here = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location('acks', os.path.join(here, '..', '2026-11-29-delayed-acks', 'table.py'))
acks = importlib.util.module_from_spec(spec)
spec.loader.exec_module(acks)

if __name__ == '__main__':
    small = sys.argv[1] == 'small'
    for s in ('h4', 'x42', 'h2') if small else ('h4', 'x42'):
        acks.table('small' if small else 'mid', s, small, here, 't0', 't1', ('one-way', 'two-way'))
