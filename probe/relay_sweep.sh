#!/usr/bin/env bash
# Ring/Ulysses communicator shapes under MPS (one GPU, MPS, SM share): python -m pkptx bench sp for each
# "RELAY:N" in $RELAYS (RELAY: lanes,stages,chunk or "default"; N: communicators or "auto"). Not a test.
set -u
for spec in ${RELAYS:-"default:auto"}; do
  relay=${spec%%:*}; sms=${spec##*:}
  args=()
  [ "$relay" != default ] && args+=(--ring-relay "$relay")
  [ "$sms" != auto ] && args+=(--num-comm-sms "$sms")
  echo "=== relay $relay, $sms communicators"
  timeout 200 python3 -m pkptx bench sp --ranks ${RANKS:-2} --mps --ring-lengths ${LENGTHS:-6144,12288} \
    --ulysses-lengths "${ULYSSES:-}" "${args[@]}" 2>&1 | grep -E "^\| (ring|ulysses)|Error|error" | head -8
done
