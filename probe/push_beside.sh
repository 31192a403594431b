# probe/push_beside_probe.py under MPS at $RANKS ranks (default "2 4"), equal SM shares: the pushes' GB/s
# beside no load, an attention, flag spinners and FMA burners (H200).
export PKPTX_DISABLE_MULTICAST=1 PYTHONUNBUFFERED=1 PYTHONPATH=${PKG:-$PWD}
R="--allow-run-as-root"
for N in ${RANKS:-2 4}; do
  echo "== $N ranks"
  python3 -m pkptx mps run --ranks $N -- mpirun $R --oversubscribe -n $N -x PYTHONPATH -x PKPTX_DISABLE_MULTICAST \
    -x CUDA_MPS_PIPE_DIRECTORY -x CUDA_MPS_LOG_DIRECTORY -x PKPTX_MPS_SHARES -x BESIDE_PROBE_BLOCKS \
    -x BESIDE_PROBE_SEQ timeout 200 python3 probe/push_beside_probe.py 2>&1 | grep -vE "^\s*$" | tail -20
done
