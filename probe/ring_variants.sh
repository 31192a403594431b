# probe/ring_variants_probe.py under MPS at $RANKS ranks (default "4 2"), one process set per variant.
export PKPTX_DISABLE_MULTICAST=1 PYTHONUNBUFFERED=1 PYTHONPATH=${PKG:-$PWD}
R="--allow-run-as-root"
echo "| ranks | variant | tokens | attention in step ms | ring in step ms | ring ms | ring / attention | max diff |"
echo "|---|---|---|---|---|---|---|---|"
for N in ${RANKS:-4 2}; do
  for V in ${VARIANTS:-normal nowait nopush neither}; do
    RING_VARIANT=$V PKPTX_CACHE_DIR=/tmp/pkptx-cache-${RING_LABEL:-x}-$V \
      python3 -m pkptx mps run --ranks $N -- mpirun $R --oversubscribe -n $N -x PYTHONPATH \
      -x PKPTX_DISABLE_MULTICAST -x CUDA_MPS_PIPE_DIRECTORY -x CUDA_MPS_LOG_DIRECTORY -x PKPTX_MPS_SHARES \
      -x RING_VARIANT -x RING_LABEL -x RING_PROBE_TOKENS -x PKPTX_CACHE_DIR \
      timeout 200 python3 ${PKG:-$PWD}/probe/ring_variants_probe.py 2>&1 | grep -E "^\||Error|error" | tail -8
  done
done
