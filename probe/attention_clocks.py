"""Why does 1x16x32768x64 without a mask move by 10 % run to run while flash does not? Alternates the
op and torch's flash backend on one shape (``PROBE_SHAPES``, default 1x16x32768x64), a few rounds of 10
timed repeats each, with nvidia-smi sampling the SM clock, the board power and the clock-event reasons
every 50 ms (pkptx.bench.clocks); prints per round the median time and the samples taken while it ran.
Needs a GPU and torch.

    python probe/attention_clocks.py [rounds]
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

from pkptx.bench.clocks import CAPS, ClockSampler  # noqa: E402
from pkptx.bench.common import event_ms  # noqa: E402
from pkptx.launch import Device, Stream  # noqa: E402
from pkptx.ops.attention import attention  # noqa: E402

rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 4
batch, heads, seq, dim = (int(v) for v in os.environ.get("PROBE_SHAPES", "1x16x32768x64").split("x"))
stream = Stream.wrap(torch.cuda.current_stream().cuda_stream)
q, k, v = (torch.randn(batch, seq, heads, dim, device="cuda", dtype=torch.bfloat16) for _ in range(3))
views = [x.transpose(1, 2) for x in (q, k, v)]
out = torch.empty_like(q)
flop = 4 * batch * heads * seq * seq * dim
with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
    ref = F.scaled_dot_product_attention(*views).transpose(1, 2).float()
out.fill_(float("nan"))
attention(q, k, v, out=out, stream=stream)
print(f"{batch}x{heads}x{seq}x{dim}: err {((out.float() - ref).norm() / ref.norm()).item():.1e}", flush=True)


def flash():
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        F.scaled_dot_product_attention(*views)


spans = []
with ClockSampler(Device.current().pci_bus_id) as clocks:
    for r in range(rounds):
        for name, fn in (("flash", flash), ("pkptx", lambda: attention(q, k, v, out=out, stream=stream))):
            ms, window = clocks.window(lambda: event_ms(fn, stream, repeats=10))
            spans.append((name, r, ms, window))
        time.sleep(0.5 if r == rounds // 2 else 0.0)
for name, r, ms, window in spans:
    inside = clocks.samples_of(window)
    mhz = sorted(s[1] for s in inside) or [0]
    watts = [s[3] for s in inside if s[3] is not None]
    print(f"round {r} {name:5s}: {ms:7.3f} ms {flop / ms / 1e9:6.1f} TFLOP/s | {len(inside)} samples, SM clock "
          f"{mhz[0]}-{mhz[-1]} MHz (median {clocks.summary(window)}), power {max(watts, default=0):.0f} W max, "
          f"capped in {sum(bool(s[2] & CAPS) for s in inside)}", flush=True)
