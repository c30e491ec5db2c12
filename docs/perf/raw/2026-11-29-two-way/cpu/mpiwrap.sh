#!/bin/bash
exec perf stat -x, -e task-clock,context-switches -o /tmp/pkt/ps-MPI-$OMPI_COMM_WORLD_RANK.txt "$@"
