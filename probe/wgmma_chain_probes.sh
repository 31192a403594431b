#!/bin/bash
# The measurements behind three default changes that shorten chains of dependent wgmma or the blocks'
# exit, in one short device call (most needed first); logs under $OUT:
# 1. the small-GEMM probe: k_split 2 / 4, the read-only exit wait and two blocks an SM, against the planned
#    kernel (gemm_epilogue_probe.py);
# 2. the attention probe of P·V left in flight (PROBE_SET=inflight) at 1k keys;
# 3. each patch under probe/patches applied to a copy of this tree, with its GPU tests and benchmarks
#    (gemm_defaults: the planner's k-split rule and the read-only exit wait; attention_in_flight: the D=64
#    drawn kernels leave P·V in flight). Bench rows are stamped "<commit>+<patch>".
# 4. (cluster, run before the patches) the GEMM in block pairs sharing B (GemmConfig.cluster=2): the
#    probe's cluster variant on the large shapes. `cluster,gemm_defaults` fits one call of about 8 min.
#   PKPTX_COMMIT=<commit> bash probe/wgmma_chain_probes.sh [probes,gemm_defaults,attention_in_flight,cluster]
export PKPTX_DISABLE_MULTICAST=1
parts=${1:-probes,gemm_defaults,attention_in_flight}
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
  PKPTX_TIMEOUT_S=15 timeout 60 python3 -m pytest -q tests/templates/test_gemm_gpu.py -k "pingpong_and_swapped and config9" 2>&1 | grep -m2 "unwritten\|passed\|failed"
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
patched attention_in_flight "attention,sanitizer,bench_attention" 420
