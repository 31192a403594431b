# bench_sp under MPS at $RANKS ranks (default "2 4") with each communicator count of $COMM (default "8 16"):
# the ring's and Ulysses' fused/sequential rows, to pick auto_comm_sms now that communicators join the
# attention once their pieces are sent (H200). PKG=<dir>: the pkptx package from another tree (an A/B).
export PKPTX_DISABLE_MULTICAST=1 PYTHONUNBUFFERED=1 PYTHONPATH=${PKG:-$PWD}
R="--allow-run-as-root"
for N in ${RANKS:-2 4}; do
  for C in ${COMM:-8 16}; do
    echo "== $N ranks, $C communicators"
    python3 -m pkptx mps run --ranks $N -- mpirun $R --oversubscribe -n $N -x PYTHONPATH -x PKPTX_DISABLE_MULTICAST \
      -x CUDA_MPS_PIPE_DIRECTORY -x CUDA_MPS_LOG_DIRECTORY -x PKPTX_MPS_SHARES timeout 150 \
      python3 -m pkptx.bench.bench_sp --num-comm-sms $C --ring-lengths ${RING:-3072,12288,24576} \
      --ulysses-lengths ${ULY:-3072,12288} 2>&1 | grep -E "^\| (ring|ulysses)"
  done
done
