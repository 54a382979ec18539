# tests/gpu/plans/next-session.sh - a box_queue.sh plan for the twenty-third session's device
# time, written by the twenty-second (carry .deps; follow `start` with `wait` calls back to back:
# a machine idle for 30 s goes back with the plan). What this session's changes (the wide row
# chain on by default, the router's lanes form on, the standalone norms folded into the row-op
# groups, tree 0a7f15d) have not reached, in order (PLAN_STEPS picks; default all):
#   e4b    the E4B's full step (the fold at 2,560-element rows with PLE through the binary;
#          issue 18's two fp8 failures at 2,047 tokens are expected, nothing else), ~8 min
#   e2b    the E2B's full step (its bf16 half and fp8 alone passed on 0a7f15d; fp8 mixed was
#          cut off by the device time), ~4 min
#   31b    the 31B's full step, both pools in one run (its make, ~10 min, serves both; the wide
#          chain and the three-op layer end at full depth; not run since 7ffd2db), ~20 min: more
#          than one session's device time left after the two above; start it first in a session
#          of its own (PLAN_STEPS=31b) if the two above have passed
want() { [[ " ${PLAN_STEPS:-e4b e2b 31b} " == *" $1 "* ]]; }
want e4b && step full-e4b env FULL_MODELS="e4b" ./build.sh gpu-test full
want e2b && step full-e2b env FULL_MODELS="e2b" ./build.sh gpu-test full
want 31b && step full-31b env FULL_MODELS=31b ./build.sh gpu-test full
