# A/B of the ring and Ulysses attention configuration under MPS (H200): bench_sp at $RANKS ranks with the
# committed D=128 config (attention's: 3 consumer warpgroups), then with the earlier one (2 consumer
# warpgroups, one Q buffer, turns without a mask), edited into this device copy only.
export PKPTX_DISABLE_MULTICAST=1 PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
R="--allow-run-as-root"; N=${RANKS:-2}
sp() { python3 -m pkptx mps run --ranks $N -- mpirun $R --oversubscribe -n $N -x PYTHONPATH -x PKPTX_DISABLE_MULTICAST -x CUDA_MPS_PIPE_DIRECTORY -x CUDA_MPS_LOG_DIRECTORY -x PKPTX_MPS_SHARES timeout 150 python3 -m pkptx.bench.bench_sp --ring-lengths ${RING:-6144,12288} --ulysses-lengths ${ULY:-6144,12288} 2>&1 | grep -E "^\| (ring|ulysses)"; }
echo "== 3 consumer warpgroups, $N ranks"; sp
sed -i 's|        return kind(attention.default_config(dtype, head_dim), causal)|        return kind(attention.Config(dtype=dtype, head_dim=head_dim, consumers=2, q_stages=1, pingpong=not causal), causal)|' pkptx/templates/kernels/ring_attention.py
echo "== 2 consumer warpgroups (earlier), $N ranks"; sp
