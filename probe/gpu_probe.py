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

from pkptx.launch import Device, empty, from_numpy, Kernel, time_cuda
dev = Device(0) if ONLY else None

@section("copy")
def _():
    from pkptx.templates.kernels import copy
    from pkptx.launch.driver import call
    cfg = copy.Config()
    k = Kernel.load(copy.build(cfg).compile())
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

@section("gemm-small")
def _():
    from pkptx.ops.gemm import gemm
    from pkptx.templates.kernels.gemm import Config
    rng = np.random.default_rng(1)
    m, n, k = 128, 256, 64
    a = bf(rng.standard_normal((m, k), dtype=np.float32)); b = bf(rng.standard_normal((n, k), dtype=np.float32))
    A, B = from_numpy(a), from_numpy(b)
    C = empty((m, n), ml_dtypes.bfloat16); C.fill(0x7FC0)
    gemm(A, B, C, config=Config()); dev.synchronize()
    ref = a.astype(np.float64) @ b.astype(np.float64).T
    got = C.to_numpy().astype(np.float64)
    print("rel err", np.linalg.norm(got - ref) / np.linalg.norm(ref), "nan", np.isnan(got).sum())
    bad = np.argwhere(np.abs(got - ref) > 0.05 * np.abs(ref).max())
    print("bad count", len(bad), bad[:10])

@section("gemm-correct")
def _():
    from pkptx.ops.gemm import gemm
    from pkptx.templates.kernels.gemm import Config
    rng = np.random.default_rng(1)
    for (m, n, k), cfg in [((256, 512, 128), Config()), ((384, 256, 320), Config()), ((128, 128, 64), Config(tile_n=128, stages=6)),
                           ((272, 400, 208), Config()), ((1024, 1024, 1024), None),
                           ((2048, 1024, 512), Config(stages=3))]:
        a = bf(rng.standard_normal((m, k), dtype=np.float32)); b = bf(rng.standard_normal((n, k), dtype=np.float32))
        A, B = from_numpy(a), from_numpy(b)
        C = empty((m, n), ml_dtypes.bfloat16); C.fill(0x7FC0)
        gemm(A, B, C, config=cfg); dev.synchronize()
        ref = a.astype(np.float64) @ b.astype(np.float64).T
        got = C.to_numpy().astype(np.float64)
        err = np.linalg.norm(got - ref) / np.linalg.norm(ref)
        print((m, n, k), cfg, "rel err", err, flush=True)

@section("gemm-speed")
def _():
    import torch
    from pkptx.ops.gemm import gemm
    for (m, n, k) in [(8192, 8192, 8192), (4096, 4096, 4096)]:
        A = torch.randn(m, k, device="cuda", dtype=torch.bfloat16); B = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        C = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        gemm(A, B, C); torch.cuda.synchronize()
        ref = A.float() @ B.float().T
        print("err", ((C.float() - ref).norm() / ref.norm()).item())
        def run(): gemm(A, B, C)
        def cub(): torch.matmul(A, B.T, out=C)
        t = time_cuda(run, warmup=3, repeats=20); tc = time_cuda(cub, warmup=3, repeats=20)
        fl = 2 * m * n * k
        print((m, n, k), "pkptx ms", t.median_ms, "TF", fl / (t.median_ms * 1e-3) / 1e12, "cublas ms", tc.median_ms, "TF", fl / (tc.median_ms * 1e-3) / 1e12, flush=True)

if ONLY is None:
    import subprocess
    wanted = sys.argv[1:] or SECTIONS
    for name in wanted:
        subprocess.run([sys.executable, __file__, "--one", name], timeout=300)

@section("gemm-variants")
def _():
    """Where the time goes at 8192^3: variants built directly (not through the cache)."""
    import torch
    import pkptx.ops.gemm as ops
    from pkptx.templates.kernels import gemm as g
    from pkptx.launch import TensorMap
    m = n = k = 8192
    A = torch.randn(m, k, device="cuda", dtype=torch.bfloat16); B = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    C = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    real_store = g._store
    def run_variant(label, cfg, store=True):
        g._store = real_store if store else (lambda *a, **kw: None)
        kern = Kernel.load(g.build(cfg).compile(use_cache=False))
        g._store = real_store
        ta = TensorMap.tiled(A, box=(cfg.tile_m, 64), swizzle=128); tb = TensorMap.tiled(B, box=(cfg.tile_n, 64), swizzle=128)
        tm, tn = m // cfg.tile_m, n // cfg.tile_n
        grid = min(132, tm * tn)
        st = ops.device_status(dev)
        launch = kern[grid, 128 * (1 + cfg.consumers), cfg.smem_bytes]
        f = lambda: launch(ta, tb, C, m, n, k, tm, tn, 0, 1, st.ptr, 10**10, 0)
        t = time_cuda(f, warmup=3, repeats=20)
        print(f"{label:40s} {t.median_ms:.3f} ms {2*m*n*k/(t.median_ms*1e-3)/1e12:.0f} TF", flush=True)
    run_variant("base 128x256 s4 g8", g.Config())
    run_variant("base again", g.Config())
    run_variant("g16", g.Config(group_m=16))
    run_variant("s3", g.Config(stages=3))
    tc = time_cuda(lambda: torch.matmul(A, B.T, out=C), warmup=3, repeats=20)
    print(f"cublas {tc.median_ms:.3f} ms {2*m*n*k/(tc.median_ms*1e-3)/1e12:.0f} TF")
