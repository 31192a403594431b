#!/usr/bin/env bash
# Run the primitive GPU program as one process (a world of one, no MPI) under compute-sanitizer's
# memcheck, racecheck and synccheck, and print one verdict line per tool:
#
#   memcheck: PASS (ERROR SUMMARY: 0 errors; program: 7 sections, 28 cases, 0 failing) log: ...
#
# A tool passes when the sanitizer reports no error or hazard, exits 0, and the program's own numpy
# checks found no failing case. Exit status: 0 when every tool passed, 1 otherwise.
#
# Usage (from anywhere): tools/sanitize_primitives.sh [section ...]
# Environment: PYTHON (python3), COMPUTE_SANITIZER (compute-sanitizer), PKPTX_EXAMPLES (cases per
# section, default 3: kernels run tens of times slower under the tools), TOOLS (default
# "memcheck racecheck synccheck"), LOGDIR (default: a new temporary directory).
set -u
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
SAN=${COMPUTE_SANITIZER:-compute-sanitizer}
TOOLS=${TOOLS:-memcheck racecheck synccheck}
LOGDIR=${LOGDIR:-$(mktemp -d -t pkptx-sanitize-XXXXXX)}
PROGRAM=tests/primitives/programs/primitives_program.py

if ! command -v "$SAN" >/dev/null 2>&1; then
    echo "sanitize: $SAN not found (set COMPUTE_SANITIZER)"; exit 2
fi
# A world of one: never under an MPI launcher, whatever the caller's environment says.
unset OMPI_COMM_WORLD_SIZE OMPI_COMM_WORLD_RANK PMI_SIZE PMI_RANK PMIX_RANK
export PKPTX_DISABLE_MULTICAST=1 CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0} PYTHONUNBUFFERED=1
export PYTHONPATH=".${PYTHONPATH:+:$PYTHONPATH}"
export PKPTX_EXAMPLES=${PKPTX_EXAMPLES:-3}
export PKPTX_TIMEOUT_NS=${PKPTX_TIMEOUT_NS:-300000000000}     # bounded waits: 300 s under the tools
export PKPTX_CACHE_DIR=${PKPTX_CACHE_DIR:-$LOGDIR/cache}       # assemble once for all three tools

failed=0
for tool in $TOOLS; do
    results="$LOGDIR/$tool-results"
    log="$LOGDIR/$tool.log"
    rm -rf "$results"; mkdir -p "$results"
    extra=()
    [ "$tool" = racecheck ] && extra=(--racecheck-report all)
    PKPTX_TEST_RESULTS="$results" "$SAN" --tool "$tool" --error-exitcode 86 --print-limit 20 "${extra[@]}" \
        "$PY" "$PROGRAM" "$@" >"$log" 2>&1
    rc=$?
    summary=$(grep -E "(ERROR|RACECHECK) SUMMARY" "$log" | tail -n 1 | sed 's/^========= //')
    program=$("$PY" - "$results" <<'PYEOF'
import json, sys
from pathlib import Path
sections = cases = failing = 0
for file in Path(sys.argv[1]).glob("rank*.jsonl"):
    for line in file.read_text().splitlines():
        data = json.loads(line)
        if data.get("section") == "setup":
            continue
        sections += 1
        cases += data.get("cases", 0)
        failing += len(data.get("failures", []))
print(f"{sections} sections, {cases} cases, {failing} failing")
PYEOF
)
    verdict=PASS
    case "$summary" in
        *" 0 errors"*|*" 0 hazards"*) ;;
        *) verdict=FAIL ;;
    esac
    case "$program" in
        0\ sections*|*", 0 cases"*) verdict=FAIL ;;
        *", 0 failing") ;;
        *) verdict=FAIL ;;
    esac
    [ "$rc" -ne 0 ] && verdict=FAIL
    [ "$verdict" = FAIL ] && failed=1
    echo "$tool: $verdict (${summary:-no sanitizer summary}; exit $rc; program: $program) log: $log"
done
exit $failed
