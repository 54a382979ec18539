#!/usr/bin/env bash
# tests/gpu/plans/strided-flash.sh - one device call for the thirty-sixth session's two attention
# switches, run in the tree itself (no queue): serve.attn_strided_tiles (windowed rows past the
# fill in strided tiles) and serve.attn_flash (the folded query tiles in one launch), both off by
# default and both speed-only. Carry .deps and .prebuilt (.prebuilt/attn_mma.tar.xz: build/obj's
# flags and kernels_attn_mma.cu.o from ./build.sh tests here).
#   1. the build (links the carried objects where the sources match)
#   2. test_attn's strided gates alone (G4_ATTN_GATES=strided: every output bit against the
#      one-row blocks)
#   3. bench_decode, 26B-A4B dummy weights: prefill of 2,048 tokens (one chunk, its second 1,024
#      rows past the fill) and 1,024 tokens (none past it), strided tiles off / the defaults
#      (on since the thirty-sixth session) / flash on (where it launches, it takes the folded
#      grids before the strided tiles), two rounds; then 4,096 tokens
#      (two chunks) strided off / on once
#   4. the whole test_attn (the flash gates among them), as long as the call lasts
# Logs under $OUT (or /tmp/g4pipe-out): build.log, strided-gates.log, ab.log, attn.log.
set -u
OUT=${OUT:-/tmp/g4pipe-out}
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH
t0=$SECONDS
# the attention object alone (the whole set no longer fits a call's 64 MB beside the tree): built
# here from these sources, stamped after the copied sources so the build keeps it
if [ -f .prebuilt/attn_mma.tar.xz ]; then
    xz -dc .prebuilt/attn_mma.tar.xz | tar xf -
    touch -d "@$(($(date +%s) + 2))" build/obj/kernels_attn_mma.cu.o*
fi > "$OUT/build.log" 2>&1
./build.sh tests >> "$OUT/build.log" 2>&1 || { echo "build failed"; tail -20 "$OUT/build.log"; exit 1; }
echo "build: $((SECONDS - t0)) s"
G4_ATTN_GATES=strided timeout 150 build/tests/test_attn > "$OUT/strided-gates.log" 2>&1
echo "strided gates: exit $? at $((SECONDS - t0)) s: $(grep -c '^PASS' "$OUT/strided-gates.log") PASS, $(grep -c '^FAIL' "$OUT/strided-gates.log") FAIL, $(grep -c '^SKIP' "$OUT/strided-gates.log") SKIP"
grep '^FAIL' "$OUT/strided-gates.log" | cut -c1-300 | head -8
bench() { # $1 prompt tokens, $2 setting name, then --set arguments
    local p=$1 v=$2
    shift 2
    echo "== prefill $p, $v"
    timeout 120 build/tests/bench_decode -c conf/gemma4-26b-a4b.ini --set model.weights=dummy \
        --set serve.max_context=8192 "$@" --batch 1 --prompt "$p" --steps 2 |
        grep -E "^prefill|^attention"
}
for r in 1 2; do
    for p in 2048 1024; do
        bench $p "strided off" --set serve.attn_strided_tiles=0
        bench $p defaults
        bench $p "flash on" --set serve.attn_flash=1
    done
done > "$OUT/ab.log" 2>&1
bench 4096 "strided off" --set serve.attn_strided_tiles=0 >> "$OUT/ab.log" 2>&1
bench 4096 defaults >> "$OUT/ab.log" 2>&1
echo "ab: done at $((SECONDS - t0)) s"
grep -E "^==|^prefill:|^attention " "$OUT/ab.log" | head -60
left=$(( ${CALL_SECONDS:-560} - (SECONDS - t0) ))
if [ "$left" -gt 30 ]; then
    timeout "$left" build/tests/test_attn > "$OUT/attn.log" 2>&1
    echo "test_attn: exit $? at $((SECONDS - t0)) s: $(grep -c '^PASS' "$OUT/attn.log") PASS, $(grep -c '^FAIL' "$OUT/attn.log") FAIL, $(grep -c '^SKIP' "$OUT/attn.log") SKIP"
    grep '^FAIL' "$OUT/attn.log" | cut -c1-300 | head -8
fi
