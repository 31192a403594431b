"""One pkptx attention and one cuDNN SDPA forward of the same shape, each run twice, for Nsight Compute
(the H200 tuning aid: pipe utilisation and warp stall reasons of both kernels):

    ncu --clock-control none -k regex:attention_bf16 --launch-skip 1 -c 1 python3 probe/attention_ncu.py

PROBE_SHAPE=BxHxSxD (default 4x16x8192x128), PROBE_CAUSAL=1 for the causal mask; the output is checked
against cuDNN's first."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

from pkptx.launch import Stream  # noqa: E402
from pkptx.ops.attention import attention  # noqa: E402

batch, heads, seq, dim = (int(v) for v in os.environ.get("PROBE_SHAPE", "4x16x8192x128").split("x"))
causal = os.environ.get("PROBE_CAUSAL", "0") == "1"
stream = Stream.wrap(torch.cuda.current_stream().cuda_stream)
q, k, v = (torch.randn(batch, seq, heads, dim, device="cuda", dtype=torch.bfloat16) for _ in range(3))
out = torch.full_like(q, float("nan"))
for _ in range(2):
    attention(q, k, v, causal=causal, out=out, stream=stream)
with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
    for _ in range(2):
        ref = F.scaled_dot_product_attention(*(x.transpose(1, 2) for x in (q, k, v)), is_causal=causal)
torch.cuda.synchronize()
err = ((out.float() - ref.transpose(1, 2).float()).norm() / ref.float().norm()).item()
print(f"{batch}x{heads}x{seq}x{dim} causal={causal}: rel err vs cuDNN {err:.1e}", flush=True)
assert err < 1e-2, err
