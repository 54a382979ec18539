# tests/gpu/plans/cluster.sh - a box_queue.sh plan, ~16 min: the cluster attention kernel
# (serve.attn_cluster_rows, nineteenth session) gated, measured and run at full depth, with the
# paired decode A/B against 600d1cd that issue 20 asks for (carry .deps and .prev: `git archive
# 600d1cd | gzip > .prev/src.tgz`). In this order:
#   attn:   test_attn, whose `cluster` gates hold the kernel to the split kernels' bits
#   ab:     bench_decode, 26B-A4B at 1 and 16 rows and the 31B at one: this tree with the
#           cluster kernel on (serve.attn_cluster_rows = 16), with it off, and 600d1cd,
#           alternating, two rounds
#   pinned: the pinned recordings replayed (build.sh replays once with the cluster kernel on)
#   full:   the full step for the 26B-A4B, both pools, alone and all at once, cluster on
# If test_attn fails, full runs with the cluster kernel off. (As run in the nineteenth session the
# kernel was on by default and the A/B's labels were now and two-pass; it is off since.)
mkdir -p .prev/src && tar xzf .prev/src.tgz -C .prev/src && cp -r .deps .prev/src/
# 600d1cd's build.sh has no `tests` command: its `bench` builds the tests, and runs its own
# benchmarks only when nvidia-smi answers
mkdir -p .prev/nosmi && printf '#!/bin/sh\nexit 1\n' > .prev/nosmi/nvidia-smi && chmod +x .prev/nosmi/nvidia-smi
step prev-build bash -c 'cd .prev/src && PATH=$PWD/../nosmi:$PATH nice -n 10 ./build.sh bench' &
step now-build ./build.sh tests
on=(serve.attn_cluster_rows=16)
step attn ./build.sh gpu-test test_attn || on=(serve.attn_cluster_rows=0)
await prev-build
ab_round() {
    local mb m b tr dir extra
    for mb in gemma4-26b-a4b:1 gemma4-26b-a4b:16 gemma4-31b:1; do
        m=${mb%:*} b=${mb#*:}
        for tr in cluster two-pass prev; do
            dir=. extra=()
            [ $tr = prev ] && dir=.prev/src
            [ $tr = cluster ] && extra=(--set serve.attn_cluster_rows=16)
            echo "== $tr $m batch $b"
            (cd $dir && timeout 100 build/tests/bench_decode -c conf/$m.ini \
                --set model.weights=dummy --set serve.max_context=4096 "${extra[@]}" --batch $b \
                --prompt 1024 --steps 32 | sed -n 1,2p)
        done
    done
}
step ab bash -c "$(declare -f ab_round); for r in 1 2; do echo \"-- round \$r\"; ab_round; done"
step pinned ./build.sh gpu-test pinned_composition
step full env FULL_MODELS=26b-a4b FULL_SETS=${on[0]} ./build.sh gpu-test full
