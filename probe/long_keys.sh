#!/bin/bash
# Why 1x16x32768x64 without a mask moves by 10 % run to run (#17): clocks and power while the op and flash
# alternate (probe/attention_clocks.py), the D=64 kernels around the op's at 16k and 32k keys
# (PROBE_SET=long), and Nsight Compute's L2 hit rate and throughputs of the op's kernel at both lengths.
# Logs under $OUT.   bash probe/long_keys.sh [clocks,configs,ncu]
export PKPTX_DISABLE_MULTICAST=1 PYTHONUNBUFFERED=1
parts=${1:-clocks,configs,ncu}
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
if [[ ,$parts, == *,clocks,* ]]; then
  timeout 80 python3 probe/attention_clocks.py 6 2>&1 | tail -14
  PROBE_SHAPES=2x16x16384x64 timeout 50 python3 probe/attention_clocks.py 3 2>&1 | tail -7
fi
if [[ ,$parts, == *,configs,* ]]; then
  PROBE_SET=long PROBE_MASKS=0 timeout 150 python3 probe/attention_configs.py > $OUT/long.txt 2>&1
  grep -v "^\s*$" $OUT/long.txt | tail -16 | cut -c1-170
fi
if [[ ,$parts, == *,ncu,* ]]; then
  for shape in 2x16x16384x64 1x16x32768x64; do
    PROBE_SHAPE=$shape timeout 150 ncu --clock-control none --section MemoryWorkloadAnalysis --section SpeedOfLight \
      -k regex:attention_bf16 --launch-skip 1 -c 1 python3 probe/attention_ncu.py > $OUT/ncu_$shape.txt 2>&1
    echo "== $shape (rc $?)"
    grep -E "Duration|SM Frequency|L2 Hit Rate|Memory Throughput|DRAM Throughput|L2 Cache Throughput|Compute \(SM\)|Mem Busy|Max Bandwidth|L2 Compression|L1/TEX Hit" \
      $OUT/ncu_$shape.txt | head -14
  done
fi
