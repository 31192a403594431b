# Attention tuning call (H200): candidate configs against cuDNN (probe/attention_configs.py), then Nsight
# Compute's per-instruction stall samples of the default D=128 kernel (ours_sass.csv) and the headline
# metrics of it and of cuDNN's kernel. Every file lands in $OUT (at most 8 come back).
export PKPTX_DISABLE_MULTICAST=1 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
PROBE_SHAPES=${PROBE_SHAPES:-4x16x8192x128,1x32x16384x128,8x16x4096x128} timeout ${PROBE_S:-240} python3 probe/attention_configs.py 2>&1 | tee $OUT/configs.txt
[ -n "$NCU" ] || exit 0
timeout 200 ncu --clock-control none --section WarpStateStats --section SourceCounters --section SpeedOfLight --import-source no \
  -k regex:attention_bf16 --launch-skip 1 -c 1 -o $OUT/ours python3 probe/attention_ncu.py > $OUT/ncu.log 2>&1; echo ours rc $?
ncu -i $OUT/ours.ncu-rep --page source --csv --print-source sass > $OUT/ours_sass.csv 2>&1
rm -f $OUT/ours.ncu-rep
