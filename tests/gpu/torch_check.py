#!/usr/bin/env python3
"""torch.distributed with the NCCL backend on chorus: run under LD_PRELOAD of chorus's libnccl.so.2.

Starts WORLD (default 2) processes on GPU 0 (several ranks may share one GPU with chorus), runs all_reduce,
all_gather, broadcast, reduce_scatter_tensor, all_to_all_single and a PREMUL_SUM all_reduce with a tensor factor
on CUDA tensors, checks every element against closed-form values, and prints which
NCCL library answered (torch.cuda.nccl.version() reports the loaded library's ncclGetVersion).
Exit status 0 only if every rank's checks pass.
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, world, port, failures):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dev = torch.device("cuda", int(os.environ.get("CHORUS_TORCH_DEVICE", "0")) % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=dev)
    ok = True
    for n in (1, 1031, 1 << 22):
        x = torch.arange(n, device=dev, dtype=torch.float32) % 13 + rank
        dist.all_reduce(x)
        want = (torch.arange(n, device=dev, dtype=torch.float32) % 13) * world + sum(range(world))
        ok &= bool(torch.equal(x, want))
        parts = [torch.empty(n, device=dev) for _ in range(world)]
        dist.all_gather(parts, torch.full((n,), float(rank), device=dev))
        ok &= all(bool(torch.all(p == r)) for r, p in enumerate(parts))
        b = torch.full((n,), float(rank), device=dev)
        dist.broadcast(b, src=world - 1)
        ok &= bool(torch.all(b == world - 1))
        rs = torch.empty(n, device=dev)
        dist.reduce_scatter_tensor(rs, torch.full((n * world,), float(rank + 1), device=dev))
        ok &= bool(torch.all(rs == world * (world + 1) / 2))
        # all_to_all_single runs as grouped ncclSend/ncclRecv; int64 keeps every value exact.
        src = torch.arange(n * world, device=dev, dtype=torch.int64) + rank * 10**9
        dst = torch.empty_like(src)
        dist.all_to_all_single(dst, src)
        idx = torch.arange(n, device=dev, dtype=torch.int64)
        ok &= all(bool(torch.equal(dst[q * n:(q + 1) * n], idx + rank * n + q * 10**9)) for q in range(world))
    # PREMUL_SUM with a tensor factor: NCCL's ncclScalarDevice (the factor is read on the GPU).
    make = getattr(dist, "_make_nccl_premul_sum", None)
    if make is not None:
        x = torch.full((4096,), float(rank + 1), device=dev)
        dist.all_reduce(x, op=make(torch.tensor([0.5], device=dev)))
        ok &= bool(torch.all(x == 0.5 * world * (world + 1) / 2))
    elif rank == 0:
        print("premul sum: this torch has no _make_nccl_premul_sum; not checked")
    torch.cuda.synchronize()
    if rank == 0:
        print(f"torch {torch.__version__}, NCCL version reported: {torch.cuda.nccl.version()}, world {world}")
    print(f"rank {rank}: {'ok' if ok else 'WRONG RESULTS'}", flush=True)
    if not ok:
        failures.put(rank)
    dist.destroy_process_group()


def main():
    world = int(os.environ.get("WORLD", "2"))
    port = 29500 + os.getpid() % 1000
    failures = mp.get_context("spawn").SimpleQueue()
    mp.spawn(worker, args=(world, port, failures), nprocs=world, join=True)
    bad = []
    while not failures.empty():
        bad.append(failures.get())
    print("torch_check:", "PASS" if not bad else f"FAIL on ranks {bad}")
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
