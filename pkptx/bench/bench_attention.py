"""pkptx.attention against torch scaled_dot_product_attention (cuDNN and flash backends) in the same run,
bf16 forward, layout (B, S, H, D) (torch gets the (B, H, S, D) views of the same tensors). Each shape is
checked against torch's cuDNN (or flash) output before it is timed; TFLOP/s = 4·B·H·S²·D / time, half
for causal. Each row also gives the median SM clock while pkptx and flash were timed (``*``: a power or
thermal cap was active; :mod:`pkptx.bench.clocks`). ``python -m pkptx bench attention [--record] [--quick]``."""
from __future__ import annotations

from .clocks import ClockSampler
from .common import event_ms, parse_args, report

ISSUE_SHAPES = [(1, 32, 4096, 128), (1, 32, 16384, 128), (4, 16, 8192, 64), (1, 16, 32768, 128)]
SWEEP = [(32768 // s, 16, s, d) for d in (64, 128) for s in (1024, 2048, 4096, 8192, 16384, 32768)]
QUICK = [(1, 32, 4096, 128), (4, 16, 8192, 64)]


def shapes(quick: bool) -> list:
    if quick:
        return QUICK
    return ISSUE_SHAPES + [s for s in SWEEP if s not in ISSUE_SHAPES]


def main(argv=None) -> int:
    args = parse_args(__doc__, argv)
    import torch

    from pkptx.launch import Device, Stream
    stream = Stream.wrap(torch.cuda.current_stream().cuda_stream)
    with ClockSampler(Device.current().pci_bus_id) as clocks:
        rows, windows = timed_rows(5 if args.quick else 20, shapes(args.quick), clocks, stream)
    rows = [row + [" / ".join(clocks.summary(w) if w is not None else "n/a" for w in pair)]
            for row, pair in zip(rows, windows)]
    report("attention bf16 forward: pkptx vs torch SDPA (cuDNN, flash)",
           ["B x H x S x D", "causal", "rel err", "pkptx TFLOP/s", "cuDNN TFLOP/s", "flash TFLOP/s",
            "vs cuDNN", "vs flash", "SM MHz pkptx / flash"], rows,
           "Median of CUDA-event timings (GPU time: a GPU spin before each repeat hides the host); TFLOP/s = "
           "4·B·H·S²·D / time (half for causal); 'vs' = torch time / pkptx time (1.0 = parity); rel err against "
           "torch's cuDNN output (a WRONG row is not timed); SM MHz: the median nvidia-smi sample while each "
           "was timed, * = a power or thermal cap was active then.", args.record)
    return 0 if all("WRONG" not in row[2] for row in rows) else 1


def timed_rows(repeats: int, problems: list, clocks: ClockSampler, stream) -> tuple[list, list]:
    """The table's rows but the clock column, and per row the clock windows (pkptx, flash); None where
    that one was not timed."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from pkptx.ops.attention import attention
    rows, windows = [], []
    for batch, heads, seq, dim in problems:
        q, k, v = (torch.randn(batch, seq, heads, dim, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        out = torch.full_like(q, float("nan"))
        views = [x.transpose(1, 2) for x in (q, k, v)]
        for causal in (False, True):
            flop = 4 * batch * heads * seq * seq * dim / (2 if causal else 1)
            theirs, ref, flash_window = {}, None, None
            for name, backend in (("cuDNN", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
                try:
                    with sdpa_kernel(backend):
                        result = F.scaled_dot_product_attention(*views, is_causal=causal)
                        theirs[name], window = clocks.window(lambda: event_ms(
                            lambda: F.scaled_dot_product_attention(*views, is_causal=causal), stream,
                            repeats=repeats))
                    flash_window = window if name == "flash" else flash_window
                    ref = result.transpose(1, 2) if ref is None else ref
                except RuntimeError as exc:        # a backend that refuses the shape
                    theirs[name] = None
                    print(f"torch {name} {batch, heads, seq, dim} causal={causal}: {str(exc).splitlines()[0]}")
            out.fill_(float("nan"))
            attention(q, k, v, causal=causal, out=out, stream=stream)
            err = ((out.float() - ref.float()).norm() / ref.float().norm()).item() if ref is not None else float("nan")
            ok = err < 1e-2
            ours, ours_window = clocks.window(lambda: event_ms(
                lambda: attention(q, k, v, causal=causal, out=out, stream=stream), stream,
                repeats=repeats)) if ok else (None, None)

            def tflops(ms):
                return f"{flop / ms / 1e9:.1f}" if ms else "n/a"
            ratio = f"{theirs['cuDNN'] / ours:.3f}" if ours and theirs["cuDNN"] else "n/a"
            flash = f"{theirs['flash'] / ours:.3f}" if ours and theirs["flash"] else "n/a"
            rows.append([f"{batch}x{heads}x{seq}x{dim}", "yes" if causal else "no",
                         f"{err:.1e}" + ("" if ok else " WRONG"), tflops(ours), tflops(theirs["cuDNN"]),
                         tflops(theirs["flash"]), ratio, flash])
            windows.append((ours_window, flash_window))
    return rows, windows


if __name__ == "__main__":
    raise SystemExit(main())
