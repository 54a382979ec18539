# tests/gpu/plans/bench26.sh - sourced by the plans that A/B the 26B-A4B with bench_decode
# (branches-tiles.sh): one labelled run at dummy weights, its step, prefill and breakdown
# lines kept (tests/gpu/ab_table.py reads them; labels end in ", round N" to pair the rounds).
bench26() { # label, then bench_decode's arguments past the model's
    local label=$1
    shift
    echo "== $label"
    timeout 150 build/tests/bench_decode -c conf/gemma4-26b-a4b.ini --set model.weights=dummy \
        --set serve.max_context=4096 "$@" |
        grep -E "^decode step|^prefill|^prompt experts|^experts|^attention|_proj "
}
