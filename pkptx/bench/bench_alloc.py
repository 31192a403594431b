"""Allocation benchmark: host us per allocate+free pair for the allocators pkptx can use.

    python -m pkptx bench alloc [--record] [--quick]

Rows: synchronous cuMemAlloc/cuMemFree, the driver's stream-ordered pool (DriverPool), pkptx's own
CachingPool, and ``pkptx.launch.empty`` end to end (DeviceArray + default pool + free on collection).
"""
from __future__ import annotations

import sys

import numpy as np

from ..launch import CachingPool, DeviceArray, Device, DriverPool, Stream, empty
from ..launch.driver import call
from .common import host_us, parse_args, report

SIZES = (256, 64 << 10, 16 << 20)


def verify(pool, stream, nbytes: int) -> None:
    """Memory from ``pool`` holds what is written to it."""
    ptr = pool.allocate(nbytes, stream.cu)
    arr = DeviceArray.from_pointer(ptr, (nbytes,), "uint8").fill(0x3C, stream)
    if not np.all(arr.to_numpy(stream) == 0x3C):
        raise SystemExit(f"{type(pool).__name__}: allocation of {nbytes} bytes does not hold its data")
    pool.free(ptr, nbytes, stream.cu)


def main(argv=None) -> int:
    args = parse_args(__doc__.splitlines()[0], argv)
    device = Device(0).set_current()
    stream = Stream(device)
    calls = 500 if args.quick else 5000
    driver_pool, caching_pool = DriverPool(device), CachingPool(device)
    rows = []
    for nbytes in SIZES:
        for pool in (driver_pool, caching_pool):
            verify(pool, stream, nbytes)

        def sync_pair():
            call("cuMemFree", call("cuMemAlloc", nbytes))

        def pool_pair(pool):
            def go():
                pool.free(pool.allocate(nbytes, stream.cu), nbytes, stream.cu)
            return go

        rows.append([f"{nbytes:>9} B", host_us(sync_pair, max(calls // 10, 50), device=device),
                     host_us(pool_pair(driver_pool), calls, device=device),
                     host_us(pool_pair(caching_pool), calls, device=device),
                     host_us(lambda: empty(nbytes, "uint8", device, stream), calls, device=device)])
    report("Allocation: host us per allocate + free", ["size", "cuMemAlloc+Free", "DriverPool", "CachingPool",
                                                        "empty() (driver pool)"], rows,
           "DriverPool: cuMemAllocFromPoolAsync/cuMemFreeAsync, release threshold = keep all; CachingPool: "
           "cuMemAlloc blocks reused per (stream, size class).", args.record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
