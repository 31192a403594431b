#!/bin/bash
# The GPU measurements behind two opt-in loop forms that shorten chains of dependent wgmma, in one short
# device call (most needed first): the gemm GPU tests (forced k-split schedules among them), the
# small-GEMM probe (k_split 2 / 4 and the read-only exit wait against the planned kernel), the attention
# probe of P·V left in flight (PROBE_SET=inflight). Logs under $OUT.
#   PKPTX_COMMIT=<commit> bash probe/wgmma_chain_probes.sh
export PKPTX_DISABLE_MULTICAST=1
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 90 python3 tools/gpu_check.py --steps "gemm" --total-s 88 > $OUT/check_gemm.txt 2>&1; tail -4 $OUT/check_gemm.txt
timeout 100 python3 probe/gemm_epilogue_probe.py --repeats 20 --variants exit,k_split,pair \
  --shapes 512x512x512,1024x1024x1024,16x8192x8192,128x8192x8192 \
  > $OUT/gemm_small.txt 2>&1; tail -40 $OUT/gemm_small.txt | cut -c1-150
PROBE_SET=inflight PROBE_SHAPES=32x16x1024x64 PROBE_DUMP_S=55 timeout 58 python3 probe/attention_configs.py \
  > $OUT/attn_inflight.txt 2>&1; grep -v "^\s*$" $OUT/attn_inflight.txt | tail -22 | cut -c1-200
