# tests/gpu/plans/load-step-tokens.sh - a box_queue.sh plan, ~15 min (carry .deps): the load
# benchmark that chooses serve.step_tokens' default (issue 22, docs/benchmarks.md): the
# 26B-A4B on dummy weights, requests arriving as a seeded Poisson process at rates that keep
# a few to ~16 requests running (prompts 128-8,192 tokens, outputs 64-512), the whole-chunk
# step (step_tokens 0) against budgets of 256 and 1,024 tokens, two rounds (AB, BA); each
# run is cut by --max-seconds so the plan ends inside its time. Results (JSON, markdown,
# PNG) under build/load, brought back in the logs; the chosen default's go to
# release/results/ in its commit.
mkdir -p build/load
step build ./build.sh
for b in 256 1024; do
    step load-$b timeout 560 python3 release/bench.py -c conf/gemma4-26b-a4b.ini \
        --load 1,2,4 --requests 32 --rounds 2 --max-seconds 500 --rate-timeout 240 \
        --a-label chunk --b-label budget$b --b-set serve.step_tokens=$b --out build/load/b$b
done
cp -r build/load "$Q/logs/" 2>/dev/null
