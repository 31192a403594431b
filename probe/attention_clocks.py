"""Why does 1x16x32768x64 without a mask move by 10 % run to run while flash does not? Alternates the
op and torch's flash backend on one shape (``PROBE_SHAPES``, default 1x16x32768x64), a few rounds of 10
timed repeats each, with nvidia-smi sampling the SM clock, power, temperature and the clock-event reasons
every 50 ms; prints per round the median time and the samples taken while it ran. Needs a GPU and torch.

    python probe/attention_clocks.py [rounds]
"""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

from pkptx.bench.common import event_ms  # noqa: E402
from pkptx.launch import Stream  # noqa: E402
from pkptx.ops.attention import attention  # noqa: E402

FIELDS = "timestamp,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active"
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 4
shape = tuple(int(v) for v in os.environ.get("PROBE_SHAPES", "1x16x32768x64").split("x"))
batch, heads, seq, dim = shape
if subprocess.run(["nvidia-smi", f"--query-gpu={FIELDS}", "--format=csv"], capture_output=True).returncode:
    FIELDS = FIELDS.replace("clocks_event_reasons", "clocks_throttle_reasons")      # an older driver's name
smi = subprocess.Popen(["nvidia-smi", f"--query-gpu={FIELDS}", "--format=csv,noheader,nounits", "-lms", "50"],
                       stdout=subprocess.PIPE, text=True)
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
spans = []


def flash():
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        F.scaled_dot_product_attention(*views)


for r in range(rounds):
    for name, fn in (("flash", flash), ("pkptx", lambda: attention(q, k, v, out=out, stream=stream))):
        t0 = time.time()
        ms = event_ms(fn, stream, repeats=10)
        spans.append((name, r, t0, time.time(), ms))
    time.sleep(0.5 if r == rounds // 2 else 0.0)
time.sleep(0.2)
smi.terminate()
samples = []
for line in smi.stdout.read().splitlines():
    stamp, clock, power, temp, reasons = (f.strip() for f in line.split(","))
    when = time.mktime(time.strptime(stamp.split(".")[0], "%Y/%m/%d %H:%M:%S")) + float("0." + stamp.split(".")[1])
    samples.append((when, int(clock), float(power), int(temp), reasons))
for name, r, t0, t1, ms in spans:
    inside = [s for s in samples if t0 <= s[0] <= t1]
    clocks = sorted(s[1] for s in inside) or [0]
    print(f"round {r} {name:5s}: {ms:7.3f} ms {flop / ms / 1e9:6.1f} TFLOP/s | {len(inside)} samples, SM clock "
          f"{clocks[0]}-{clocks[-1]} MHz (median {clocks[len(clocks) // 2]}), power "
          f"{max((s[2] for s in inside), default=0):.0f} W max, {max((s[3] for s in inside), default=0)} C, "
          f"reasons {sorted({s[4] for s in inside})}", flush=True)
