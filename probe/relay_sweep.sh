#!/usr/bin/env bash
# Ring relay shapes under MPS at 2 ranks (one GPU, MPS, SM share): python -m pkptx bench sp for each
# (lanes,stages,chunk) and communicator count given as "L,S,C:N ..." in $RELAYS. Not a test.
set -u
for spec in ${RELAYS:-"6,1,32768:8 2,3,32768:2 1,6,32768:2"}; do
  relay=${spec%%:*}; sms=${spec##*:}
  echo "=== relay $relay, $sms communicators"
  timeout 200 python3 -m pkptx bench sp --ranks ${RANKS:-2} --mps --ring-lengths ${LENGTHS:-6144,12288} \
    --ulysses-lengths "" --ring-relay "$relay" --num-comm-sms "$sms" 2>&1 | grep -E "^\| ring|Error|error" | head -8
done
