"""NCCL through torch.distributed on the same ranks, for the comparisons in bench_collectives and
bench_fused. Only where every rank has a GPU of its own (NCCL refuses two ranks on one GPU)."""
from __future__ import annotations

import os
import socket


def start(world, ordinal: int):
    """``torch.distributed`` initialised over NCCL on ``world``'s ranks, or None when the ranks share
    GPUs or torch is missing. Rank 0 picks a free port and every rank learns it over MPI."""
    from ..launch import Device
    if Device.available() < world.size:
        return None
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        return None
    port = None
    if world.rank == 0:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    port = world.allgather(port, what="nccl port")[0]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(ordinal)
    dist.init_process_group("nccl", rank=world.rank, world_size=world.size)
    return dist


def time_ms(fn, repeats: int, warmup: int = 2) -> float:
    """Median CUDA-event time of ``fn()`` on torch's current stream (GPU time, as pkptx's is measured)."""
    import statistics

    import torch

    from ..launch.timing import hold
    from .common import GPU_ONLY_NS
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        hold(torch.cuda.current_stream().cuda_stream, GPU_ONLY_NS)
        start.record()
        fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end))
    return statistics.median(samples)
