"""Time candidate attention configs against torch's cuDNN SDPA on a few shapes (H200 tuning aid):
prints TFLOP/s and cuDNN (and flash) time / pkptx time per (shape, causal, config); each output is checked
first."""
import faulthandler
import os
from dataclasses import replace
import sys

faulthandler.dump_traceback_later(float(os.environ.get("PROBE_DUMP_S", "100")), exit=True)

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

from pkptx.bench.common import event_ms  # noqa: E402
from pkptx.launch import Stream  # noqa: E402
from pkptx.ops.attention import attention  # noqa: E402
from pkptx.launch import Device  # noqa: E402
from pkptx.ops.common import load  # noqa: E402
from pkptx.templates.kernels.attention import Config, build, default_config  # noqa: E402

SHAPES = [(32, 16, 1024, 64), (16, 16, 2048, 64), (8, 16, 4096, 64), (2, 16, 16384, 64), (1, 32, 4096, 128),
          (4, 16, 8192, 128), (1, 32, 16384, 128)]
CANDIDATES = {64: [Config(head_dim=64, consumers=3), Config(head_dim=64, consumers=3, rebalance=True)],
              128: [Config(head_dim=128, consumers=3, rebalance=True, o_in_q=True)]}
if os.environ.get("PROBE_SET") == "short":   # short causal sequences: 128-row blocks, 64-key stages
    CANDIDATES = {64: [Config(head_dim=64, consumers=3), Config(head_dim=64, consumers=2),
                       Config(head_dim=64, consumers=2, block_k=64, stages=3),
                       Config(head_dim=64, consumers=3, block_k=64, stages=3)],
                  128: [Config(head_dim=128, consumers=3, rebalance=True, o_in_q=True),
                        Config(head_dim=128, consumers=2), Config(head_dim=128, consumers=2, block_k=64, stages=3)]}
    SHAPES = [(32, 16, 1024, 64), (16, 16, 2048, 64), (8, 16, 4096, 64), (32, 16, 1024, 128), (16, 16, 2048, 128)]
if os.environ.get("PROBE_SET") == "drawn":   # the op's drawn kernels: 192-row blocks against 128-row ones
    CANDIDATES = {64: [Config(head_dim=64, consumers=3, rebalance=True, drawn=True),
                       Config(head_dim=64, consumers=2, drawn=True)],
                  128: [Config(head_dim=128, consumers=3, rebalance=True, o_in_q=True, drawn=True),
                        Config(head_dim=128, consumers=2, drawn=True),
                        Config(head_dim=128, consumers=2, o_in_q=True, drawn=True)]}
    SHAPES = [(32, 16, 1024, 64), (16, 16, 2048, 64), (8, 16, 4096, 64), (32, 16, 1024, 128), (16, 16, 2048, 128)]
if os.environ.get("PROBE_SET") == "stages":  # the op's D=64 kernel on 2, 3 and 4 K/V stages
    CANDIDATES = {64: [Config(head_dim=64, consumers=3, rebalance=True, drawn=True, stages=n) for n in (2, 3, 4)]}
    SHAPES = [(32, 16, 1024, 64), (16, 16, 2048, 64), (8, 16, 4096, 64)]
if os.environ.get("PROBE_SET") == "flat":    # the op's kernels against flat tasks (no padding warpgroups)
    CANDIDATES = {64: [Config(head_dim=64, consumers=3, rebalance=True, drawn=True),
                       Config(head_dim=64, consumers=3, rebalance=True, drawn=True, flat=True, stages=4),
                       Config(head_dim=64, consumers=3, rebalance=True, drawn=True, flat=True)],
                  128: [Config(head_dim=128, consumers=3, rebalance=True, o_in_q=True, drawn=True),
                        Config(head_dim=128, consumers=3, rebalance=True, o_in_q=True, drawn=True, flat=True)]}
    SHAPES = [(32, 16, 1024, 64), (16, 16, 2048, 64), (8, 16, 4096, 64), (2, 16, 16384, 64), (32, 16, 1024, 128),
              (4, 16, 8192, 128)]
if os.environ.get("PROBE_SET") == "overlap64":   # D=64: FlashAttention-3's overlap, 64- and 128-key stages
    CANDIDATES = {64: [Config(head_dim=64, consumers=3, rebalance=True, drawn=True),
                       Config(head_dim=64, consumers=3, rebalance=True, drawn=True, flat=True, stages=4),
                       Config(head_dim=64, consumers=3, block_k=64, stages=4, overlap=True, rebalance=True, drawn=True),
                       Config(head_dim=64, consumers=3, overlap=True, rebalance=True, drawn=True)]}
    SHAPES = [(32, 16, 1024, 64), (8, 16, 4096, 64)]
if os.environ.get("PROBE_SET") == "inflight":   # P·V left in flight until the next Q·Kᵀ is waited for
    CANDIDATES = {64: [Config(head_dim=64, consumers=3, rebalance=True, drawn=True, flat=True, stages=4),
                       Config(head_dim=64, consumers=3, rebalance=True, drawn=True, flat=True, stages=4,
                              pv_in_flight=True),
                       Config(head_dim=64, consumers=3, rebalance=True, drawn=True),
                       Config(head_dim=64, consumers=3, rebalance=True, drawn=True, pv_in_flight=True),
                       Config(head_dim=64, consumers=3, rebalance=True, drawn=True, pv_in_flight=True, stages=4),
                       Config(head_dim=64, consumers=3, block_k=64, stages=4, overlap=True, rebalance=True,
                              drawn=True)],
                  128: [Config(head_dim=128, consumers=3, rebalance=True, o_in_q=True, drawn=True),
                        Config(head_dim=128, consumers=3, rebalance=True, o_in_q=True, drawn=True, pv_in_flight=True)]}
    SHAPES = [(32, 16, 1024, 64), (8, 16, 4096, 64), (32, 16, 1024, 128), (4, 16, 8192, 128)]
if os.environ.get("PROBE_SET") == "sum":     # D=64: row sums of P from P·V (a box of ones) instead of add trees
    CANDIDATES = {64: [replace(default_config("bf16", 64, drawn=True, flat=flat), sum_in_pv=on)
                       for flat in (True, False) for on in (False, True)]}
    SHAPES = [(32, 16, 1024, 64), (16, 16, 2048, 64), (8, 16, 4096, 64), (2, 16, 16384, 64)]
if os.environ.get("PROBE_SET") == "half":    # blocks whose last 64 keys a warpgroup does not see, at 64 keys
    CANDIDATES = {64: [replace(default_config("bf16", 64, drawn=True), half_blocks=on) for on in (False, True)],
                  128: [replace(default_config("bf16", 128, drawn=True), half_blocks=on) for on in (False, True)]}
    SHAPES = [(32, 16, 1024, 64), (16, 16, 2048, 64), (8, 16, 4096, 64), (2, 16, 16384, 64), (32, 16, 1024, 128),
              (8, 16, 4096, 128)]
if os.environ.get("PROBE_SET") == "long":    # D=64 at 16-32k keys without a mask: the op's kernel and its neighbours
    CANDIDATES = {64: [default_config("bf16", 64, drawn=True), default_config("bf16", 64, drawn=True, flat=True),
                       replace(default_config("bf16", 64, drawn=True), sum_in_pv=False),
                       replace(default_config("bf16", 64, drawn=True), stages=3),
                       Config(head_dim=64, consumers=2, rebalance=True, drawn=True)]}
    SHAPES = [(2, 16, 16384, 64), (1, 16, 32768, 64)]
if os.environ.get("PROBE_SHAPES"):           # e.g. "1x32x4096x128,4x16x8192x128"
    SHAPES = [tuple(int(v) for v in s.split("x")) for s in os.environ["PROBE_SHAPES"].split(",")]
for configs in CANDIDATES.values():
    for cfg in configs:
        fn = load(build, cfg, Device.current()).function
        print(f"{cfg.name}: {fn.num_regs} registers at entry, {fn.local_bytes} local bytes", flush=True)
stream = Stream.wrap(torch.cuda.current_stream().cuda_stream)
for batch, heads, seq, dim in SHAPES:
    q, k, v = (torch.randn(batch, seq, heads, dim, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    views = [x.transpose(1, 2) for x in (q, k, v)]
    out = torch.empty_like(q)
    for causal in [bool(int(c)) for c in os.environ.get("PROBE_MASKS", "01")]:   # e.g. PROBE_MASKS=0
        flop = 4 * batch * heads * seq * seq * dim / (2 if causal else 1)
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            ref = F.scaled_dot_product_attention(*views, is_causal=causal).transpose(1, 2).float()
            theirs = event_ms(lambda: F.scaled_dot_product_attention(*views, is_causal=causal), stream, repeats=20)
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            flash = event_ms(lambda: F.scaled_dot_product_attention(*views, is_causal=causal), stream, repeats=20)
        for cfg in CANDIDATES[dim]:
            out.fill_(float("nan"))
            attention(q, k, v, causal=causal, out=out, stream=stream, config=cfg)
            err = ((out.float() - ref).norm() / ref.norm()).item()
            ours = event_ms(lambda: attention(q, k, v, causal=causal, out=out, stream=stream, config=cfg), stream,
                            repeats=20)
            print(f"{batch}x{heads}x{seq}x{dim} causal={causal:d} {cfg.name}: err {err:.1e} "
                  f"{flop / ours / 1e9:.0f} TFLOP/s, cuDNN {flop / theirs / 1e9:.0f}, ratio {theirs / ours:.3f}, "
                  f"flash {flop / flash / 1e9:.0f}, ratio {flash / ours:.3f}",
                  flush=True)
