# tests/gpu/plans/timeline.sh - a box_queue.sh plan, ~4 min: the per-kernel timeline of graphed
# decode steps (issue 21, deliverable 1) from the trace build (docs/benchmarks.md, "Where a
# graphed step goes"), 26B-A4B at 1 and 16 rows in both pools, the 31B at one row, 16 traced
# steps each after 32 timed ones (the timed figures come from the trace build too: compare them
# with the plain build's to see what the stamps cost). TIMELINE_PLAIN=0 leaves the plain build and
# its timed runs out (~2.5 min less, for a call with little device time left).
step trace-build ./build.sh trace
[ "${TIMELINE_PLAIN:-1}" = 0 ] || step plain-build ./build.sh tests
trace_all() {
    local mb m b pool
    for mb in gemma4-26b-a4b:1 gemma4-26b-a4b:16 gemma4-31b:1; do
        m=${mb%:*} b=${mb#*:}
        for pool in bf16 fp8; do
            [ $m = gemma4-31b ] && [ $pool = fp8 ] && continue
            echo "== $m batch $b kv.local $pool"
            [ "${TIMELINE_PLAIN:-1}" = 0 ] ||
                timeout 120 build/tests/bench_decode -c conf/$m.ini --set model.weights=dummy \
                    --set serve.max_context=4096 --set kv.local=$pool --batch $b --prompt 1024 \
                    --steps 32 | sed -n 2p
            timeout 120 build/trace/tests/bench_decode -c conf/$m.ini --set model.weights=dummy \
                --set serve.max_context=4096 --set kv.local=$pool --batch $b --prompt 1024 \
                --steps 32 --trace 16 | sed -n '2p;/^kernel trace/,$p'
        done
    done
}
step timeline env TIMELINE_PLAIN="${TIMELINE_PLAIN:-1}" bash -c "$(declare -f trace_all); trace_all"
