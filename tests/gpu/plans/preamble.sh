# tests/gpu/plans/preamble.sh - sourced by a plan script run in the tree's root on the device
# box: strict variables, $OUT (or /tmp/g4pipe-out) made, CUDA on the paths, t0 the call's start,
# and count LABEL EXIT LOG, a gate log's one-line summary and its first failures.
set -u
OUT=${OUT:-/tmp/g4pipe-out}
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
t0=$SECONDS
count() {
    echo "$1: exit $2 at $((SECONDS - t0)) s: $(grep -c '^PASS' "$3") PASS, $(grep -c '^FAIL' "$3") FAIL, $(grep -c '^SKIP' "$3") SKIP"
    grep '^FAIL' "$3" | cut -c1-300 | head -10
}
