"""One pkptx GEMM and one cuBLAS product (torch.matmul) of each shape, each run twice, for Nsight Compute
(the H200 tuning aid: grid, tile, pipe utilisation and stalls of both):

    ncu --clock-control none -k regex:'^gemm|xmma|nvjet|cutlass' --launch-skip ... python3 probe/gemm_ncu.py

PROBE_SHAPES=MxNxK,... (default 3000x5000x2000,256x8192x8192); PROBE_CONFIG=MxN/S[/kK] forces pkptx's
schedule (tile, stages, K splits); outputs are checked against cuBLAS first."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import torch  # noqa: E402

import pkptx  # noqa: E402
from pkptx.launch import Stream  # noqa: E402
from pkptx.ops.gemm_plan import GemmConfig  # noqa: E402

forced = None
if os.environ.get("PROBE_CONFIG"):
    tile, stages, *split = os.environ["PROBE_CONFIG"].split("/")
    forced = GemmConfig(*(int(v) for v in tile.split("x")), stages=int(stages),
                        splits=int(split[0][1:]) if split else 1)

stream = Stream.wrap(torch.cuda.current_stream().cuda_stream)
for shape in os.environ.get("PROBE_SHAPES", "3000x5000x2000,256x8192x8192").split(","):
    m, n, k = (int(v) for v in shape.split("x"))
    a, b = torch.randn(m, k, device="cuda", dtype=torch.bfloat16), torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    for _ in range(2):
        pkptx.gemm(a, b, out, stream=stream, config=forced)
    for _ in range(2):
        ref = a @ b.T
    torch.cuda.synchronize()
    err = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
    print(f"{shape}: rel err vs cuBLAS {err:.1e}", flush=True)
    assert err < 1e-2, err
