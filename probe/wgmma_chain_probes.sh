#!/bin/bash
# The measurements still open, in one short device call; logs under $OUT (parts in this order):
# 1. probes: the small-M and K-heavy GEMMs (k_split 1 / 2 / 4, stage counts past the planner's cap:
#    gemm_epilogue_probe.py);
# 2. attention: the op's kernels with and without half_blocks, same process (PROBE_SET=half
#    probe/attention_configs.py);
# 3. cluster: probe/patches/gemm_cluster.patch (the GEMM in block pairs sharing B, GemmConfig.cluster=2)
#    applied to a copy of this tree, the probe's cluster variant on two large shapes, also on smaller
#    grids (are all the pairs the occupancy API counts resident at once?); `pairs` adds where it leaves C
#    unwritten beside single blocks (gemm_pair_check.py) and its GEMM tests;
# 4. bench: this tree's GEMM and attention tests, bench_gemm, bench_fused at 1 rank (#16's sweep, on an
#    H200) and bench_attention.
# `attention,cluster,bench` fits one call of about 9 min.
#   PKPTX_COMMIT=<commit> bash probe/wgmma_chain_probes.sh [probes,attention,cluster,pairs,bench]
export PKPTX_DISABLE_MULTICAST=1
parts=${1:-attention,cluster,bench}
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
if [[ ,$parts, == *,probes,* ]]; then
  timeout 150 python3 probe/gemm_epilogue_probe.py --repeats 20 --variants k_split,stages \
    --shapes 16x8192x8192,128x8192x8192,1024x1024x32768,512x4096x32768,64x4096x16384,1024x1024x1024 \
    > $OUT/gemm_small.txt 2>&1
  grep "^|" $OUT/gemm_small.txt | cut -c1-120
fi
if [[ ,$parts, == *,attention,* ]]; then
  PROBE_SET=half PROBE_DUMP_S=95 timeout 100 python3 probe/attention_configs.py > $OUT/attn_half.txt 2>&1
  grep -v "^\s*$" $OUT/attn_half.txt | tail -30 | cut -c1-170
fi
if [[ ,$parts, == *,cluster,* || ,$parts, == *,pairs,* ]]; then    # a lost arrival: a 15 s timeout error
  tree=$(mktemp -d)
  tar --exclude=./.venv --exclude=./.git -cf - . | tar -xf - -C "$tree"
  (cd "$tree" || exit 1
   { git apply probe/patches/gemm_cluster.patch || patch -p1 < probe/patches/gemm_cluster.patch; } \
     || { echo "gemm_cluster.patch does not apply"; exit 1; }
   if [[ ,$parts, == *,pairs,* ]]; then
     PKPTX_TIMEOUT_S=15 timeout 60 python3 probe/gemm_pair_check.py 2>&1 | tail -12
   fi
   PKPTX_TIMEOUT_S=15 timeout 130 python3 probe/gemm_epilogue_probe.py --repeats 20 --variants cluster \
     --shapes 4096x4096x4096,2048x2048x16384 > $OUT/gemm_cluster.txt 2>&1
   grep "^|" $OUT/gemm_cluster.txt | cut -c1-120; tail -3 $OUT/gemm_cluster.txt
   if [[ ,$parts, == *,pairs,* ]]; then
     PKPTX_TIMEOUT_S=15 timeout 120 python3 -m pytest -q tests/templates/test_gemm_gpu.py 2>&1 | tail -4
   fi)
fi
if [[ ,$parts, == *,bench,* ]]; then
  PKPTX_COMMIT="${PKPTX_COMMIT:-?}" timeout 340 python3 tools/gpu_check.py \
    --steps "gemm,attention,bench_gemm,bench_fused -n 1,bench_attention" --total-s 330 2>&1 | tail -80
fi
