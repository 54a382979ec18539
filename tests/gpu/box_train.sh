#!/usr/bin/env bash
# tests/gpu/box_train.sh - one device call: train the three trained-* fixtures on the box's
# Python sources (tests/fixtures/train_fixtures.py, the three at once) and bring them back,
# one tarball per fixture, with the file list and the log. TRAIN_STEPS overrides the steps.
set -u
OUT=${OUT:-/tmp/g4pipe-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -c 'import sys, torch, transformers, tokenizers; print(sys.version.split()[0], torch.__version__, transformers.__version__, tokenizers.__version__, torch.cuda.get_device_name(0))'
timeout ${TRAIN_TIMEOUT:-540} python3 tests/fixtures/train_fixtures.py --out tests/fixtures \
    ${TRAIN_STEPS:+--steps $TRAIN_STEPS} > "$OUT/train.log" 2>&1
echo "train rc $?"
grep -v "^  step [1-9]" "$OUT/train.log" | cut -c1-400
for n in moe ple dense; do
    [ -d tests/fixtures/trained-tiny-$n ] && tar czf "$OUT/trained-tiny-$n.tgz" -C tests/fixtures trained-tiny-$n
done
cp tests/fixtures/trained-sources.txt "$OUT/" 2>/dev/null
ls -la "$OUT"; true
