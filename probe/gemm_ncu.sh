# GEMM tuning call (H200): Nsight Compute's launch, throughput and stall figures of pkptx's GEMM and of
# cuBLAS's kernel for each shape in PROBE_SHAPES (probe/gemm_ncu.py); the details pages land in $OUT.
export PKPTX_DISABLE_MULTICAST=1 PYTHONUNBUFFERED=1
python3 probe/gemm_ncu.py || exit 1
S="--section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis"
timeout 300 ncu --clock-control none $S ${NCU_SOURCE:+--section SourceCounters --import-source no} -k regex:'gemm|xmma|nvjet|cutlass|sm90' -o $OUT/gemm python3 probe/gemm_ncu.py > $OUT/ncu.log 2>&1; echo ncu rc $?
ncu -i $OUT/gemm.ncu-rep --page details > $OUT/gemm.txt 2>&1
ncu -i $OUT/gemm.ncu-rep --page raw --csv > $OUT/gemm_raw.csv 2>&1
[ -n "$NCU_SOURCE" ] && ncu -i $OUT/gemm.ncu-rep --page source --csv --print-source sass > $OUT/gemm_sass.csv 2>&1
rm -f $OUT/gemm.ncu-rep
grep -E "^  [a-z_0-9]+.*\(|Duration|Grid Size|Block Size|Registers Per|Dynamic Shared|Compute \(SM\) Throughput|Memory Throughput" $OUT/gemm.txt
