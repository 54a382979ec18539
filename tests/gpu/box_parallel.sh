#!/usr/bin/env bash
# tests/gpu/box_parallel.sh - gate runs that take no timing share one device call side by side:
# their pass/fail does not depend on what else runs on the GPU, and each alone leaves most of
# the card idle. One build, then every stream in the background with its own build folder
# (a copy, so no stream relinks a program another is running) and its own log under $OUT.
# Usage: tests/gpu/box_parallel.sh STREAM...
#   race, memcheck            that compute-sanitizer tool over the tiny-fixture gate run
#                             (sanitize_fixtures.sh); memcheck also runs the attention op gate
#   geo:MODEL:MODES:GATES     ./build.sh gpu-test geometry for one model (GEOMETRY_MODELS),
#                             MODES (GEOMETRY_MODES, '+' between), GATES (test_fixtures'
#                             G4_FIXTURE_GATES, ',' between; empty: all)
#   tree:DIR:ARGS             tests/gpu/box_quick.sh ARGS ('+' between) inside DIR: another
#                             source tree carried as plain files (a branch's `git archive`), or
#                             '.', this tree's own gates beside its sanitizer run. Logs under
#                             $OUT/treeN. Test data the device copy's size limit keeps out of
#                             DIR (tests/fixtures, tests/tokenizer) is linked from this tree.
#                             Keep timing (bench, ncu, ab) out of it: the streams share the card.
#                             Builds run under nice, behind the sanitizer.
# DEADLINE (seconds from the start, default 560) bounds every stream; logs return as one archive.
set -u
DEADLINE=${DEADLINE:-560}
. tests/gpu/box_common.sh
stamp build
./build.sh gpu-test none > "$OUT/build.log" 2>&1
echo "build rc $?"; grep "built" "$OUT/build.log" | tail -1
pids="" i=0
for s in "$@"; do
    i=$((i + 1))
    case "$s" in
    race | memcheck)
        tool=$s; [ "$s" = race ] && tool=racecheck
        cp build/tests/test_fixtures "build/tests/test_fixtures.$tool"
        {
            if [ "$tool" = memcheck ]; then
                timeout 150 compute-sanitizer --tool memcheck build/tests/test_attn \
                    > "$OUT/memcheck_test_attn.log" 2>&1
                echo "memcheck test_attn rc $?: $(grep "ERROR SUMMARY" "$OUT/memcheck_test_attn.log")" \
                    "$(grep -E "passed,|^FAIL" "$OUT/memcheck_test_attn.log" | head -3)"
            fi
            SANITIZE_TIMEOUT=$(($(left) - 15)) timeout "$(left)" \
                bash tests/gpu/sanitize_fixtures.sh "$tool" "build/tests/test_fixtures.$tool" "$OUT"
        } > "$OUT/stream$i.$tool.txt" 2>&1 &
        ;;
    geo:*)
        IFS=: read -r _ model modes gates <<< "$s"
        rm -rf "build-$i"; cp -a build "build-$i"
        BUILD_DIR="build-$i" GEOMETRY_MODELS="$model" GEOMETRY_MODES="${modes//+/ }" \
            G4_FIXTURE_GATES="$gates" timeout "$(left)" ./build.sh gpu-test geometry \
            > "$OUT/stream$i.geo-$model.txt" 2>&1 &
        ;;
    tree:*)
        IFS=: read -r _ dir args <<< "$s"
        for p in .deps tests/fixtures tests/tokenizer; do
            [ -e "$dir/$p" ] || ln -s "$PWD/$p" "$dir/$p"
        done
        (cd "$dir" && OUT="$OUT/tree$i" BOX_NO_PACK=1 DEADLINE=$(($(left) - 5)) nice -n 10 \
            bash tests/gpu/box_quick.sh ${args//+/ }) > "$OUT/stream$i.tree.txt" 2>&1 &
        ;;
    *) echo "unknown stream '$s'"; continue ;;
    esac
    pids="$pids $!"
    stamp "stream $i: $s started"
done
for p in $pids; do wait "$p"; done
stamp "streams done"
for f in "$OUT"/stream*.txt; do
    echo "---- ${f##*/}"
    grep -E "^(PASS|FAIL|SKIP)|^== |(RACECHECK|ERROR) SUMMARY|^memcheck|reports: |kernels/|passed," "$f" | cut -c1-300
done
for d in build-*; do
    [ -d "$d" ] && { tail -n 5 "$d"/geometry.*.log; grep "^test_fixtures: +" "$d/tests/test_fixtures.stderr" | tail -12; } \
        > "$OUT/$d.stderr" 2>&1
done
pack_logs
