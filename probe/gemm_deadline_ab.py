"""Dev probe: the GEMM with and without the mbarrier deadline, and cuBLAS, timed interleaved."""
import os, sys, statistics
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))
import torch
from common import GPU_ONLY_NS
from pkptx.launch import Device, LoadedKernel, Stream, from_dlpack, time_cuda
from pkptx.ops import common as ops_common
from pkptx.ops.gemm import gemm, choose_config
from pkptx.templates.kernels import gemm as g
from pkptx.primitives import pipeline as pipe  # the GEMM's waits go through Pipeline
dev = Device(0).set_current()
orig = pipe.wait_parity
def variant(bounded, cfg):
    pipe.wait_parity = orig if bounded else (lambda b, bar, par, *, deadline, abandon=False, name="mbwait": orig(b, bar, par, deadline=None, abandon=abandon, name=name))
    try:
        return LoadedKernel.load(g.build(cfg).compile(), dev)
    finally:
        pipe.wait_parity = orig
stream = Stream(); ts = torch.cuda.ExternalStream(stream.handle)
for m, n, k in [(4096, 4096, 4096), (8192, 8192, 8192), (8192, 8192, 1024)]:
    with torch.cuda.stream(ts):
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16); b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    A, B, C = from_dlpack(a), from_dlpack(b), from_dlpack(c)
    cfg = choose_config(m, n, k, "bf16", "bf16", "nk", sm_count=dev.sm_count, smem_limit=dev.smem_per_block_optin)
    kernels = {"bounded": variant(True, cfg), "unbounded": variant(False, cfg)}
    key = (g.build.__module__, cfg, dev.ordinal)
    res = {"bounded": [], "unbounded": [], "cublas": []}
    for _ in range(5):
        for name, kern in kernels.items():
            ops_common._loaded[key] = kern
            res[name].append(time_cuda(lambda: gemm(A, B, C, stream=stream), stream=stream, warmup=2, repeats=10, hold_ns=GPU_ONLY_NS).median_ms)
        with torch.cuda.stream(ts):
            res["cublas"].append(time_cuda(lambda: torch.matmul(a, b.T, out=c), stream=stream, warmup=2, repeats=10, hold_ns=GPU_ONLY_NS).median_ms)
    med = {k2: statistics.median(v) for k2, v in res.items()}
    print(f"{m}x{n}x{k} {cfg.tile_m}x{cfg.tile_n}/{cfg.stages}: bounded {med['bounded']*1e3:.1f} us, unbounded {med['unbounded']*1e3:.1f} us, "
          f"cuBLAS {med['cublas']*1e3:.1f} us; cuBLAS/bounded {med['cublas']/med['bounded']:.3f}, cuBLAS/unbounded {med['cublas']/med['unbounded']:.3f}", flush=True)
