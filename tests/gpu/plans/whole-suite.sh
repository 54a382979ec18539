# tests/gpu/plans/whole-suite.sh - a box_queue.sh plan, ~35 min, so more than one session's
# device time: what is left when the time runs out goes into the next plan (carry .deps and
# .prev: the baseline tree as `git archive 600d1cd | gzip > .prev/src.tgz`, the tree the decode
# and architecture issues were measured on). `./build.sh gpu-test` in three steps and a paired
# decode A/B against the baseline, in this order:
#   gates:    every GPU gate but geometry and full (op gates, tiny and trained fixtures, dummy
#             weights, pinned recordings, reliability), ~10 min
#   ab:       bench_decode, 26B-A4B at 1 and 16 rows and the 31B at one, this tree and the
#             baseline alternating, two rounds: medians and spread per tree; the 26B-A4B also
#             with serve.moe_bucket_in_up off (its gates run in the first step: test_moe, the
#             pinned replay), ~6 min
#   full:     the full step for the 26B-A4B, E2B and E4B (the 31B's ran in pieces in the
#             eighteenth session: bf16 alone in the fifteenth, fp8 and bf16 all at once),
#             ~15 min
#   geometry: last, as far as the time goes
# The baseline builds beside the gates at nice 10. PLAN_STEPS picks steps (default all four, in
# this order), so that one session's device time can end the plan where it chooses.
. tests/gpu/plans/next-31b-fold.sh --functions-only
want() { [[ " ${PLAN_STEPS:-gates ab full geometry} " == *" $1 "* ]]; }
mkdir -p .prev/src && tar xzf .prev/src.tgz -C .prev/src && cp -r .deps .prev/src/
# 600d1cd's build.sh has no `tests` command: its `bench` builds the tests and then runs its
# own benchmarks when nvidia-smi answers, so a stand-in nvidia-smi that fails keeps it to the build
mkdir -p .prev/nosmi && printf '#!/bin/sh\nexit 1\n' > .prev/nosmi/nvidia-smi && chmod +x .prev/nosmi/nvidia-smi
step prev-build bash -c 'cd .prev/src && PATH=$PWD/../nosmi:$PATH nice -n 10 ./build.sh bench' &
want gates && step gates ./build.sh gpu-test test_gemm_lt test_ops test_attn test_moe test_fill test_sample \
    engine_vs_hf trained dummy_weights pinned_composition reliability
# without the gates step nothing builds this tree's tests
want ab && ! want gates && step now-build ./build.sh tests
want ab && await prev-build
ab_round() { # one round: each case on both trees one after the other, then (26B-A4B) this
    # tree with serve.moe_bucket_in_up off
    local mb m b tr dir label extra
    for mb in gemma4-26b-a4b:1 gemma4-26b-a4b:16 gemma4-31b:1; do
        m=${mb%:*} b=${mb#*:}
        for tr in now prev bucket; do
            dir=. label=$tr extra=()
            [ $tr = prev ] && dir=.prev/src
            if [ $tr = bucket ]; then
                [ $m = gemma4-31b ] && continue
                label=now-bucket extra=(--set serve.moe_bucket_in_up=0)
            fi
            echo "== $label $m batch $b"
            (cd $dir && timeout 100 build/tests/bench_decode -c conf/$m.ini \
                --set model.weights=dummy --set serve.max_context=4096 "${extra[@]}" --batch $b \
                --prompt 1024 --steps 32 | sed -n 1,2p)
        done
    done
}
want ab && step ab bash -c "$(declare -f ab_round); for r in 1 2; do echo \"-- round \$r\"; ab_round; done"
want full && step full env FULL_MODELS="26b-a4b e2b e4b" ./build.sh gpu-test full
want geometry && step geometry timeout 500 ./build.sh gpu-test geometry
