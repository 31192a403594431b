"""Causal attention's task order, timed in one process against cuDNN and FlashAttention-2 (torch SDPA),
each output checked against cuDNN first: the fixed stride over tasks grouped by query block (K/V of a
(batch, head) re-read from HBM by each of its query blocks, far apart in time), drawn tasks in that order,
and drawn tasks grouped by (batch, head), longest first (the running tasks share their heads' K/V in L2;
the op's order since 2026-12-06). Branch attention-skip-padding holds a second set (padding warpgroups
without products, measured slower). Needs a GPU and torch.

    python probe/attention_order_probe.py [--shapes 32x16x1024x128,...] [--repeats 20]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SHAPES = [(32, 16, 1024, 128), (16, 16, 2048, 128), (8, 16, 4096, 128), (32, 16, 1024, 64), (16, 16, 2048, 64),
          (8, 16, 4096, 64), (2, 16, 16384, 64), (1, 32, 16384, 128)]


def variants(dim: int, kernel):
    """(label, config, task order function) per schedule compared."""
    drawn = kernel.default_config("bf16", dim, drawn=True)
    return [("stride, by query block", kernel.default_config("bf16", dim), lambda causal, drawn: 1),
            ("drawn, by query block", drawn, lambda causal, drawn: 1),
            ("drawn, by head", drawn, lambda causal, drawn: 0)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--shapes", default=None, help="comma-separated BxHxSxD list (default: the built-in list)")
    args = ap.parse_args(argv)
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from pkptx.bench.common import event_ms
    from pkptx.launch import Stream
    from pkptx.ops import attention as op
    from pkptx.ops import launches
    from pkptx.templates.kernels import attention as kernel

    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")] if args.shapes else SHAPES
    stream = Stream.wrap(torch.cuda.current_stream().cuda_stream)
    real_order = op.by_query_block
    print("| B x H x S x D | causal | schedule | rel err | TFLOP/s | vs cuDNN | vs flash |")
    print("|---|---|---|---|---|---|---|")
    for batch, heads, seq, dim in shapes:
        q, k, v = (torch.randn(batch, seq, heads, dim, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        views = [x.transpose(1, 2) for x in (q, k, v)]
        out = torch.empty_like(q)
        name = f"{batch}x{heads}x{seq}x{dim}"
        flop = 4 * batch * heads * seq * seq * dim / 2
        sdpa = lambda: F.scaled_dot_product_attention(*views, is_causal=True)      # noqa: E731
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            ref = sdpa().transpose(1, 2).float()
            cudnn = event_ms(sdpa, stream, repeats=args.repeats)
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            flash = event_ms(sdpa, stream, repeats=args.repeats)
        print(f"| {name} | yes | cuDNN / flash | - | {flop / cudnn / 1e9:.0f} / {flop / flash / 1e9:.0f} "
              f"| - | - |")
        for label, cfg, order in variants(dim, kernel):
            op.by_query_block = order
            launches.clear()
            try:
                out.fill_(float("nan"))
                op.attention(q, k, v, causal=True, out=out, stream=stream, config=cfg)
                err = ((out.float() - ref).norm() / ref.norm()).item()
                ours = event_ms(lambda: op.attention(q, k, v, causal=True, out=out, stream=stream, config=cfg),
                                stream, repeats=args.repeats)
            finally:
                op.by_query_block = real_order
                launches.clear()
            print(f"| {name} | yes | {label} | {err:.1e} | {flop / ours / 1e9:.0f} | {cudnn / ours:.3f} | "
                  f"{flash / ours:.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
