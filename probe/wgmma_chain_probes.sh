#!/bin/bash
# The GEMM measurements still open, in one short device call; logs under $OUT (parts in this order):
# 1. probes: the small-M and K-heavy GEMMs (k_split 1 / 2 / 4, stage counts past the planner's cap:
#    gemm_epilogue_probe.py);
# 2. cluster: probe/patches/gemm_cluster.patch (the GEMM in block pairs sharing B, GemmConfig.cluster=2)
#    applied to a copy of this tree: where it leaves C unwritten beside single blocks (gemm_pair_check.py),
#    the probe's cluster variant on four large shapes (also on smaller grids: are all pairs resident?),
#    then its GEMM tests;
# 3. bench: this tree's GEMM tests, bench_gemm and bench_fused at 1 rank (#16's sweep, on an H200).
# `cluster,bench` fits one call of about 5 min.
#   PKPTX_COMMIT=<commit> bash probe/wgmma_chain_probes.sh [probes,cluster,bench]
export PKPTX_DISABLE_MULTICAST=1
parts=${1:-probes,cluster,bench}
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
if [[ ,$parts, == *,probes,* ]]; then
  timeout 150 python3 probe/gemm_epilogue_probe.py --repeats 20 --variants k_split,stages \
    --shapes 16x8192x8192,128x8192x8192,1024x1024x32768,512x4096x32768,64x4096x16384,1024x1024x1024 \
    > $OUT/gemm_small.txt 2>&1
  grep "^|" $OUT/gemm_small.txt | cut -c1-120
fi
if [[ ,$parts, == *,cluster,* ]]; then    # a lost arrival is a 15 s timeout error, not a hang
  tree=$(mktemp -d)
  tar --exclude=./.venv --exclude=./.git -cf - . | tar -xf - -C "$tree"
  (cd "$tree" || exit 1
   { git apply probe/patches/gemm_cluster.patch || patch -p1 < probe/patches/gemm_cluster.patch; } \
     || { echo "gemm_cluster.patch does not apply"; exit 1; }
   PKPTX_TIMEOUT_S=15 timeout 60 python3 probe/gemm_pair_check.py 2>&1 | tail -12
   PKPTX_TIMEOUT_S=15 timeout 200 python3 probe/gemm_epilogue_probe.py --repeats 20 --variants cluster \
     --shapes 4096x4096x4096,8192x8192x8192,2048x2048x16384,4096x14336x4096 > $OUT/gemm_cluster.txt 2>&1
   grep "^|" $OUT/gemm_cluster.txt | cut -c1-120; tail -3 $OUT/gemm_cluster.txt
   PKPTX_TIMEOUT_S=15 timeout 120 python3 -m pytest -q tests/templates/test_gemm_gpu.py 2>&1 | tail -4)
fi
if [[ ,$parts, == *,bench,* ]]; then
  PKPTX_COMMIT="${PKPTX_COMMIT:-?}" timeout 270 python3 tools/gpu_check.py --steps "gemm,bench_gemm,bench_fused -n 1" \
    --total-s 260 2>&1 | tail -42
fi
