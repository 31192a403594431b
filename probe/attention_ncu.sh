# Attention tuning call: candidate configs against cuDNN (probe/attention_configs.py), then Nsight Compute's
# per-instruction stall samples (SASS) and headline metrics (pipes, stalls, issue) of pkptx's kernel at
# PROBE_SHAPE, without and with the causal mask (NCU_CAUSAL="0 1"); NCU=1 turns the profile on, NO_CONFIGS=1
# skips the configs. Every file lands in $OUT (at most 8 come back).
export PKPTX_DISABLE_MULTICAST=1 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
[ -n "$NO_CONFIGS" ] || PROBE_SHAPES=${PROBE_SHAPES:-4x16x8192x128,1x32x16384x128,8x16x4096x128} \
  timeout ${PROBE_S:-240} python3 probe/attention_configs.py 2>&1 | tee $OUT/configs.txt
[ -n "$NCU" ] || exit 0
for causal in ${NCU_CAUSAL:-0}; do
  PROBE_CAUSAL=$causal timeout 200 ncu --clock-control none --section WarpStateStats --section SourceCounters \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section InstructionStats --section SchedulerStats \
    --import-source no -k regex:attention_bf16 --launch-skip 1 -c 1 -o $OUT/ours$causal python3 probe/attention_ncu.py \
    >> $OUT/ncu.log 2>&1; echo "causal $causal: ncu rc $?"
  ncu -i $OUT/ours$causal.ncu-rep --page details > $OUT/details$causal.txt 2>&1
  ncu -i $OUT/ours$causal.ncu-rep --page source --csv --print-source sass > $OUT/sass$causal.csv 2>&1
  rm -f $OUT/ours$causal.ncu-rep
done
