"""Attention schedules that differ in what a block does with its tasks, timed in one process against
cuDNN and FlashAttention-2 (torch SDPA), each output checked against cuDNN first. Needs a GPU and torch.

``--set order`` (causal): the fixed stride over tasks grouped by query block (K/V of a (batch, head)
re-read from HBM by each of its query blocks, far apart in time), drawn tasks in that order, and drawn
tasks grouped by (batch, head), longest first (the running tasks share their heads' K/V in L2).
``--set padding`` (both masks): the op's configuration with and without ``skip_padding`` (warpgroups of
rows before row 0 free the stages without products; at 1024 rows a 192-row block pads 128).

    python probe/attention_order_probe.py [--set order|padding] [--shapes 32x16x1024x128,...] [--repeats 20]
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SHAPES = [(32, 16, 1024, 128), (16, 16, 2048, 128), (8, 16, 4096, 128), (32, 16, 1024, 64), (16, 16, 2048, 64),
          (8, 16, 4096, 64), (2, 16, 16384, 64), (1, 32, 16384, 128)]


def variants(which: str, dim: int, op, kernel):
    """(label, masks, config, task order function) per schedule of the set."""
    drawn = kernel.default_config("bf16", dim, drawn=True)
    if which == "order":
        by_head = lambda causal, drawn: 0      # noqa: E731
        return [("stride, by query block", (True,), kernel.default_config("bf16", dim), op.by_query_block),
                ("drawn, by query block", (True,), drawn, lambda causal, drawn: int(causal)),
                ("drawn, by head", (True,), drawn, by_head)]
    return [(label, (False, True), dataclasses.replace(drawn, skip_padding=skip), op.by_query_block)
            for label, skip in (("drawn", False), ("drawn, skip padding", True))]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--set", choices=("order", "padding"), default="order")
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
        for causal in (False, True):
            runs = [v for v in variants(args.set, dim, op, kernel) if causal in v[1]]
            if not runs:
                continue
            flop = 4 * batch * heads * seq * seq * dim / (2 if causal else 1)
            sdpa = lambda: F.scaled_dot_product_attention(*views, is_causal=causal)      # noqa: E731
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                ref = sdpa().transpose(1, 2).float()
                cudnn = event_ms(sdpa, stream, repeats=args.repeats)
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                flash = event_ms(sdpa, stream, repeats=args.repeats)
            mask = "yes" if causal else "no"
            print(f"| {name} | {mask} | cuDNN / flash | - | {flop / cudnn / 1e9:.0f} / {flop / flash / 1e9:.0f} "
                  f"| - | - |")
            for label, _, cfg, order in runs:
                op.by_query_block = order
                launches.clear()
                try:
                    out.fill_(float("nan"))
                    op.attention(q, k, v, causal=causal, out=out, stream=stream, config=cfg)
                    err = ((out.float() - ref).norm() / ref.norm()).item()
                    ours = event_ms(lambda: op.attention(q, k, v, causal=causal, out=out, stream=stream, config=cfg),
                                    stream, repeats=args.repeats)
                finally:
                    op.by_query_block = real_order
                    launches.clear()
                print(f"| {name} | {mask} | {label} | {err:.1e} | {flop / ours / 1e9:.0f} | {cudnn / ours:.3f} | "
                      f"{flash / ours:.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
