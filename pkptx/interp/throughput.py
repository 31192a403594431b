"""The interpreter's throughput figure: ``python -m pkptx.interp.throughput [ops] [threads]``.

An f32 loop (add, mul and fma in turn, as many ops as asked) over one block, run once; prints
warp-instructions per CPU-second (what the interpreter costs) and per wall-clock second (what a shared
machine gives it)."""
from __future__ import annotations

import sys
import time

import numpy as np

from ..isa import Kernel, Param, address, f32, u32, u64
from .machine import Machine


def loop_kernel(ops: int) -> Kernel:
    k = Kernel(f"f32_loop_{ops}", [Param("x", u64, pointer=True)], max_threads=1024)
    b = k.builder()
    i = b.mad(u32, b.special("ctaid.x"), b.special("ntid.x"), b.special("tid.x"), mode="lo")
    p = b.add(u64, b.load_param("x"), b.mul(u32, i, 4, mode="wide"))
    v = b.ld(f32, address(p), space="global")
    acc = b.mov(f32, v)
    for j in range(ops):
        if j % 3 == 0:
            b.add(f32, acc, v, into=acc)
        elif j % 3 == 1:
            b.mul(f32, acc, 0.5, into=acc)
        else:
            b.fma(f32, acc, v, acc, rnd="rn", into=acc)
    b.st(f32, address(p), acc, space="global")
    b.ret()
    return k


def measure(ops: int = 2000, threads: int = 512) -> dict:
    """Warp-instructions executed and their rates per CPU-second and per wall-clock second."""
    m = Machine()
    m.launch(loop_kernel(ops), 1, threads, np.ones(threads, np.float32))
    cpu, wall = time.process_time(), time.perf_counter()
    m.run()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return dict(steps=m.steps, cpu_s=cpu, wall_s=wall, per_cpu_s=m.steps / max(cpu, 1e-9),
                per_wall_s=m.steps / max(wall, 1e-9))


def main(argv: list[str]) -> None:
    r = measure(*(int(a) for a in argv[:2]))
    print(f"{r['steps']} warp-instructions: {r['per_cpu_s']:.3g} per CPU-second, {r['per_wall_s']:.3g} per "
          f"wall-clock second")


if __name__ == "__main__":
    main(sys.argv[1:])
