"""Does the tensor maps' L2 sector promotion change GEMM or attention time? For each shape, the op with the
model's schedule (or the default attention config) under every ``pkptx.ops.launches.TMA_L2_PROMOTION``
in ``--promotions``, against cuBLAS / cuDNN in the same run; each output checked first. Needs a GPU and torch.

    python probe/l2_promotion_probe.py [--promotions none,128,256] [--repeats 15]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

GEMM_SHAPES = [(16, 8192, 8192), (128, 8192, 8192), (3000, 5000, 2000), (512, 512, 512), (1024, 1024, 1024),
               (2048, 2048, 16384), (8192, 8192, 1024), (4096, 4096, 4096), (1024, 3072, 768), (64, 4096, 16384)]
ATTENTION_SHAPES = [(32, 16, 1024, 64), (16, 16, 2048, 64), (1, 32, 4096, 128), (1, 32, 16384, 128)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--promotions", default="none,128,256")
    ap.add_argument("--repeats", type=int, default=15)
    args = ap.parse_args(argv)
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from pkptx.bench.common import event_ms
    from pkptx.launch import Device, Stream
    from pkptx.ops import launches
    from pkptx.ops.attention import attention
    from pkptx.ops.gemm import gemm

    promotions = [None if p == "none" else int(p) for p in args.promotions.split(",")]
    stream = Stream.wrap(torch.cuda.current_stream().cuda_stream)
    print(f"# {Device.current().name}; repeats {args.repeats}; time in us, ratio = theirs / ours")

    def each_promotion(run, check, theirs_ms, label):
        cells = []
        for promotion in promotions:
            launches.TMA_L2_PROMOTION = promotion
            launches.clear()
            err = check()
            ours = event_ms(run, stream, repeats=args.repeats)
            cells.append(f"L2 {promotion or 'none'}: {ours * 1e3:.1f} ({theirs_ms / ours:.3f}, err {err:.0e})")
        print(f"{label} | theirs {theirs_ms * 1e3:.1f} | " + " | ".join(cells), flush=True)

    for m, n, k in GEMM_SHAPES:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        ref = a.float() @ b.float().T
        cublas = event_ms(lambda: torch.matmul(a, b.T, out=c), stream, repeats=args.repeats)

        def check():
            c.fill_(float("nan"))
            gemm(a, b, c, stream=stream)
            return ((c.float() - ref).norm() / ref.norm()).item()
        each_promotion(lambda: gemm(a, b, c, stream=stream), check, cublas, f"gemm {m}x{n}x{k}")
    for batch, heads, seq, dim in ATTENTION_SHAPES:
        q, k, v = (torch.randn(batch, seq, heads, dim, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        views = [x.transpose(1, 2) for x in (q, k, v)]
        out = torch.empty_like(q)
        for causal in (False, True):
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                ref = F.scaled_dot_product_attention(*views, is_causal=causal).transpose(1, 2).float()
                cudnn = event_ms(lambda: F.scaled_dot_product_attention(*views, is_causal=causal), stream,
                                 repeats=args.repeats)
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                flash = event_ms(lambda: F.scaled_dot_product_attention(*views, is_causal=causal), stream,
                                 repeats=args.repeats)

            def check():
                out.fill_(float("nan"))
                attention(q, k, v, causal=causal, out=out, stream=stream)
                return ((out.float() - ref).norm() / ref.norm()).item()
            each_promotion(lambda: attention(q, k, v, causal=causal, out=out, stream=stream), check, cudnn,
                           f"attention {batch}x{heads}x{seq}x{dim} causal={int(causal)} flash {flash * 1e3:.1f}")
    launches.TMA_L2_PROMOTION = None
    return 0


if __name__ == "__main__":
    sys.exit(main())
