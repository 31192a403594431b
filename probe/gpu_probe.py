"""Early device probe: launch layer basics, bulk copy, GEMM correctness and speed. Not a test."""
import os, sys, time, traceback
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import numpy as np
import ml_dtypes

ONLY = sys.argv[sys.argv.index("--one") + 1] if "--one" in sys.argv else None
SECTIONS = []

def section(name):
    def deco(fn):
        SECTIONS.append(name)
        if ONLY != name:
            return fn
        t0 = time.time()
        try:
            fn()
            print(f"[{name}] ok ({time.time()-t0:.1f}s)", flush=True)
        except Exception:
            print(f"[{name}] FAILED", flush=True)
            traceback.print_exc()
        return fn
    return deco

from pkptx.launch import Device, empty, from_numpy, LoadedKernel, time_cuda
dev = Device(0) if ONLY else None

@section("copy")
def _():
    from pkptx.templates.kernels import copy
    from pkptx.launch.driver import call
    cfg = copy.Config()
    k = LoadedKernel.load(copy.build(cfg).compile())
    n = 1 << 30
    src = empty((n // 4,), np.uint32); dst = empty((n // 4,), np.uint32)
    host = np.random.randint(0, 2**32, size=n // 4, dtype=np.uint32)
    src.copy_from_numpy(host); dst.fill(0xDEADBEEF)
    k[dev.sm_count, 32, cfg.smem_bytes](dst, src, n)
    dev.synchronize()
    assert np.array_equal(dst.to_numpy(), host), "copy mismatch"
    t = time_cuda(lambda: k[dev.sm_count, 32, cfg.smem_bytes](dst, src, n), warmup=3, repeats=10)
    t2 = time_cuda(lambda: call("cuMemcpyDtoDAsync", dst.ptr, src.ptr, n, 0), warmup=3, repeats=10)
    print("copy ms", t.median_ms, "GB/s", 2 * n / t.median_ms / 1e6, "memcpy ms", t2.median_ms, "GB/s", 2 * n / t2.median_ms / 1e6)

def bf(x): return x.astype(ml_dtypes.bfloat16)

@section("gemm-correct")
def _():
    from pkptx.ops.gemm import GemmConfig, gemm
    from pkptx.templates.kernels.gemm import Config, reference
    rng = np.random.default_rng(1)
    OUT = {"bf16": ml_dtypes.bfloat16, "f32": np.float32, "f16": np.float16}
    for (m, n, k), cfg in [((256, 512, 128), Config()), ((384, 256, 320), Config()), ((128, 128, 64), Config(tile_n=128, stages=6)),
                           ((272, 400, 208), Config()), ((1024, 1024, 1024), None), ((2048, 1024, 512), Config(stages=3)),
                           ((256, 512, 128), Config(b_layout="kn")), ((272, 400, 208), Config(b_layout="kn")),
                           ((384, 640, 1024), Config(b_layout="kn", tile_n=128, stages=6)),
                           ((272, 400, 208), Config(out_dtype="f32")), ((256, 512, 192), Config(out_dtype="f16")),
                           ((256, 512, 192), Config(dtype="f16", out_dtype="f32", b_layout="kn"))]:
        dt = ml_dtypes.bfloat16 if (cfg is None or cfg.dtype == "bf16") else np.float16
        layout = cfg.b_layout if cfg else "nk"
        a = rng.standard_normal((m, k), dtype=np.float32).astype(dt)
        bshape = (n, k) if layout == "nk" else (k, n)
        b = rng.standard_normal(bshape, dtype=np.float32).astype(dt)
        A, B = from_numpy(a), from_numpy(b)
        out_dt = OUT[cfg.out_dtype] if cfg else ml_dtypes.bfloat16
        C = empty((m, n), out_dt); C.fill(0x7FC0 if out_dt is ml_dtypes.bfloat16 else 0x7E00 if out_dt is np.float16 else 0x7FC00000)
        gemm(A, B, C, config=cfg and GemmConfig(cfg.tile_m, cfg.tile_n, cfg.stages), b_layout=layout); dev.synchronize()
        ref = reference(a, b, layout)
        got = C.to_numpy().astype(np.float64)
        err = np.linalg.norm(got - ref) / np.linalg.norm(ref)
        print((m, n, k), layout, cfg and (cfg.out_dtype, cfg.tile_n, cfg.stages), "rel err", err, "nan", int(np.isnan(got).sum()), flush=True)

@section("gemm-speed")
def _():
    import torch
    from pkptx.ops.gemm import gemm
    from pkptx.launch import Stream
    for (m, n, k), layout in [((8192, 8192, 8192), "nk"), ((8192, 8192, 8192), "kn"), ((4096, 4096, 4096), "nk"), ((2048, 2048, 16384), "nk")]:
        A = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        B = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) if layout == "nk" else torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        C = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        s = Stream.wrap(torch.cuda.current_stream().cuda_stream)
        gemm(A, B, C, b_layout=layout, stream=s); torch.cuda.synchronize()
        ref = A.float() @ (B.float().T if layout == "nk" else B.float())
        print("err", ((C.float() - ref).norm() / ref.norm()).item())
        run = lambda: gemm(A, B, C, b_layout=layout, stream=s)
        cub = lambda: torch.matmul(A, B.T if layout == "nk" else B, out=C)
        t = time_cuda(run, stream=s, warmup=3, repeats=20); tc = time_cuda(cub, stream=s, warmup=3, repeats=20)
        fl = 2 * m * n * k
        print((m, n, k), layout, "pkptx ms %.3f TF %.0f cublas ms %.3f TF %.0f ratio %.3f" % (t.median_ms, fl / (t.median_ms * 1e-3) / 1e12, tc.median_ms, fl / (tc.median_ms * 1e-3) / 1e12, tc.median_ms / t.median_ms), flush=True)


if ONLY is None:
    import subprocess
    wanted = sys.argv[1:] or SECTIONS
    for name in wanted:
        subprocess.run([sys.executable, __file__, "--one", name], timeout=300)
