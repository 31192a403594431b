#!/bin/bash
# The GEMM measurements still open, in one short device call; logs under $OUT (parts in this order):
# 1. probes: the small-GEMM probe (k_split 2 / 4, the read-only exit wait, two blocks an SM, against the
#    planned kernel: gemm_epilogue_probe.py) and the attention probe of P·V in flight at 1k keys;
# 2. cluster: the GEMM in block pairs sharing B (GemmConfig.cluster=2): where it leaves C unwritten
#    (gemm_pair_check.py), then the probe's cluster variant on four large shapes;
# 3. gemm_defaults: probe/patches/gemm_defaults.patch (the planner's k-split rule and the read-only exit
#    wait) applied to a copy of this tree, with the GEMM tests, bench_gemm and bench_fused at 1 rank, bench
#    rows stamped "<commit>+gemm_defaults". `cluster,gemm_defaults` fits one call of about 6 min.
# (The attention_in_flight patch ran on 2026-12-07 and was rejected: bench/RESULTS.md.)
#   PKPTX_COMMIT=<commit> bash probe/wgmma_chain_probes.sh [probes,cluster,gemm_defaults]
export PKPTX_DISABLE_MULTICAST=1
parts=${1:-probes,cluster,gemm_defaults}
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
if [[ ,$parts, == *,probes,* ]]; then
  timeout 100 python3 probe/gemm_epilogue_probe.py --repeats 20 --variants exit,k_split,pair \
    --shapes 512x512x512,1024x1024x1024,16x8192x8192,128x8192x8192 > $OUT/gemm_small.txt 2>&1
  grep "^|" $OUT/gemm_small.txt | cut -c1-120
  PROBE_SET=inflight PROBE_SHAPES=32x16x1024x64 PROBE_DUMP_S=55 timeout 58 python3 probe/attention_configs.py \
    > $OUT/attn_inflight.txt 2>&1; grep -v "^\s*$" $OUT/attn_inflight.txt | tail -16 | cut -c1-160
fi
if [[ ,$parts, == *,cluster,* ]]; then    # block pairs sharing B on the large shapes (rel err printed per row;
  # a lost arrival is a 15 s timeout error, not a hang; its GPU tests are in gpu_check's gemm step)
  PKPTX_TIMEOUT_S=15 timeout 60 python3 probe/gemm_pair_check.py 2>&1 | tail -12
  PKPTX_TIMEOUT_S=15 timeout 150 python3 probe/gemm_epilogue_probe.py --repeats 20 --variants cluster --shapes \
    4096x4096x4096,8192x8192x8192,2048x2048x16384,4096x14336x4096 \
    > $OUT/gemm_cluster.txt 2>&1; grep "^|" $OUT/gemm_cluster.txt | cut -c1-120; tail -3 $OUT/gemm_cluster.txt
fi
patched() {     # patch name, gpu_check steps, seconds
  [[ ,$parts, == *,$1,* ]] || return 0
  local tree; tree=$(mktemp -d)
  tar --exclude=./.venv --exclude=./.git -cf - . | tar -xf - -C "$tree"
  local patch=$PWD/probe/patches/$1.patch
  (cd "$tree" && { git apply "$patch" || patch -p1 < "$patch"; }) || { echo "$1: patch does not apply"; return 1; }
  mkdir -p "$OUT/$1"
  (cd "$tree" && OUT=$OUT/$1 PKPTX_COMMIT="${PKPTX_COMMIT:-?}+$1" timeout $(($3 + 10)) \
    python3 tools/gpu_check.py --steps "$2" --total-s "$3" 2>&1 | tail -42)
}
patched gemm_defaults "gemm,bench_gemm,bench_fused -n 1" 260
