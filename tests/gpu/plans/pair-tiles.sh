#!/usr/bin/env bash
# tests/gpu/plans/pair-tiles.sh - one device call for serve.attn_pair_tiles (the query tiles two
# a block, kernels/attn_mma.cuh; form 2 by default, speed only), run in the tree
# itself (no queue; carry .deps):
#   1. the build (~170 s on the box), or PAIR_PREBUILT=1's carried binaries
#   2. test_attn's pair gates alone (G4_ATTN_GATES=pair: every output bit of the pair form against
#      the one-row blocks, both pools, folded and unfolded grids)
#   3. the GPU pinned replays (the pair tiles off among the speed switches; on by default)
#   4. bench_decode, 26B-A4B dummy weights, one prompt, its last chunk's attention by layer kind:
#      4,096 tokens (the second chunk's rows read 2,048-4,095 keys: unfolded grids) and 1,024
#      (folded grids), pair tiles 0 / 2, two rounds; then 16,384 tokens 0 / 2 once (PAIR_LONG=0
#      skips it); form 1 (eight warps) was taken out after this plan measured it slower
#   5. test_attn's strided gates (the pair form at head dim 256 among them), then the whole
#      test_attn, as long as the call lasts (CALL_SECONDS, default 560)
# Logs under $OUT (or /tmp/g4pipe-out): build.log, pair-gates.log, pinned.log, ab.log,
# strided-gates.log, attn.log.
set -u
OUT=${OUT:-/tmp/g4pipe-out}
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH
t0=$SECONDS
# PAIR_PREBUILT=1: carried build/g4pipe, build/tests/test_attn and build/tests/bench_decode (GPU
# builds of this tree from a CUDA 13.0 host), used where their libraries resolve: no build
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
prebuilt=0
if [ "${PAIR_PREBUILT:-0}" = 1 ]; then
    prebuilt=1
    for f in build/g4pipe build/tests/test_attn build/tests/bench_decode; do
        { [ -x $f ] && ! ldd $f | grep -q "not found"; } || prebuilt=0
    done
fi
if [ $prebuilt = 1 ]; then
    echo "carried binaries" > "$OUT/build.log"
else
    ./build.sh tests > "$OUT/build.log" 2>&1 || { echo "build failed"; tail -20 "$OUT/build.log"; exit 1; }
fi
echo "build: $((SECONDS - t0)) s (carried: $prebuilt)"
G4_ATTN_GATES=pair timeout 150 build/tests/test_attn > "$OUT/pair-gates.log" 2>&1
echo "pair gates: exit $? at $((SECONDS - t0)) s: $(grep -c '^PASS' "$OUT/pair-gates.log") PASS, $(grep -c '^FAIL' "$OUT/pair-gates.log") FAIL, $(grep -c '^SKIP' "$OUT/pair-gates.log") SKIP"
grep '^FAIL' "$OUT/pair-gates.log" | cut -c1-300 | head -8
# the GPU pinned replays (the pair tiles off among the speed switches replayed), on this build
G4_PREBUILT=$prebuilt timeout 200 ./build.sh gpu-test pinned_composition > "$OUT/pinned.log" 2>&1
echo "pinned: exit $? at $((SECONDS - t0)) s: $(grep -c '^PASS' "$OUT/pinned.log") PASS, $(grep -c '^FAIL' "$OUT/pinned.log") FAIL"
grep '^FAIL' "$OUT/pinned.log" | cut -c1-300 | head -4
bench() { # $1 prompt tokens, $2 pair form
    echo "== prefill $1, pair $2"
    timeout 120 build/tests/bench_decode -c conf/gemma4-26b-a4b.ini --set model.weights=dummy \
        --set serve.max_context=17408 --set serve.attn_pair_tiles="$2" --batch 1 --prompt "$1" \
        --steps 2 | grep -E "^prefill|^attention"
}
for r in 1 2; do
    for p in 4096 1024; do
        for f in 0 2; do bench $p $f; done
    done
done > "$OUT/ab.log" 2>&1
if [ "${PAIR_LONG:-1}" = 1 ]; then
    for f in 0 2; do bench 16384 $f; done >> "$OUT/ab.log" 2>&1
fi
echo "ab: done at $((SECONDS - t0)) s"
grep -E "^==|^prefill:|^attention " "$OUT/ab.log" | head -80
# the strided gates, the pair form at head dim 256 among them (it must not launch there)
left=$(( ${CALL_SECONDS:-560} - (SECONDS - t0) ))
if [ "$left" -gt 20 ]; then
    G4_ATTN_GATES=strided timeout "$left" build/tests/test_attn > "$OUT/strided-gates.log" 2>&1
    echo "strided gates: exit $? at $((SECONDS - t0)) s: $(grep -c '^PASS' "$OUT/strided-gates.log") PASS, $(grep -c '^FAIL' "$OUT/strided-gates.log") FAIL"
    grep '^FAIL' "$OUT/strided-gates.log" | cut -c1-300 | head -8
fi
left=$(( ${CALL_SECONDS:-560} - (SECONDS - t0) ))
if [ "$left" -gt 30 ]; then
    timeout "$left" build/tests/test_attn > "$OUT/attn.log" 2>&1
    echo "test_attn: exit $? at $((SECONDS - t0)) s: $(grep -c '^PASS' "$OUT/attn.log") PASS, $(grep -c '^FAIL' "$OUT/attn.log") FAIL, $(grep -c '^SKIP' "$OUT/attn.log") SKIP"
    grep '^FAIL' "$OUT/attn.log" | cut -c1-300 | head -8
fi
