#!/usr/bin/env bash
# build.sh - builds, tests, formats and releases g4pipe. One compile step per module, every
# flag in the variables below (docs/style.md, build; docs/build.md says why each is there).
#
#   ./build.sh            build build/g4pipe (GPU build when nvcc exists, else CPU-only)
#   ./build.sh test       CPU suites + lint; GPU gates listed as skipped; ends "N passed, ..."
#   ./build.sh tests      build the test programs under build/tests without running them
#   ./build.sh gpu-test [GATE...]   GPU gates (needs a GPU)
#   ./build.sh format     rewrite every hand-written C/CUDA file with clang-format
#   ./build.sh lint       format check, cppcheck, clang-tidy only
#   ./build.sh fuzz [SECONDS]   the libFuzzer targets, each for SECONDS (default 600)
#   ./build.sh bench      tokenizer and decode figures (decode needs a GPU)
#   ./build.sh release    static release binary under release/out/
#   ./build.sh debug      CPU build with AddressSanitizer and UBSan under build/debug/
#   ./build.sh trace      GPU build whose kernels stamp the global timer (bench_decode --trace)
#                         under build/trace/
#   ./build.sh deps       fill .deps/ with the Debian archives the offline GPU box needs
set -eu
cd "$(dirname "$0")"

CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
CC=${CC:-gcc}
B=${BUILD_DIR:-build}
WARN="-Wall -Wextra -Werror -Wshadow -Wconversion -Wno-sign-conversion -Wstrict-prototypes \
-Wmissing-prototypes -Wvla -Wformat=2 -Wundef"
CFLAGS="-std=c11 -D_POSIX_C_SOURCE=200809L $WARN -g -O2 ${EXTRA_CFLAGS:-}"
# --compress-mode=size: the attention's parts, compressed apart, took the binary from 28.6 to 40 MB
# at the default mode (one object compressed its ~70 kernels together); size mode: 16.6 MB, the
# SASS unpacked once when a kernel first loads
NVFLAGS="-std=c++17 -gencode arch=compute_90a,code=sm_90a -lineinfo -O2 -Werror all-warnings \
-Xptxas -warn-spills -Xcompiler -Wall,-Wextra --compress-mode=size"
DEPS_ROOT=.deps/root
DEB_PKGS="libinih-dev libinih1 libjansson-dev libjansson4"
HOST_SRC="runtime/base/log.c runtime/base/config.c runtime/model/hfconfig.c runtime/model/loader.c runtime/engine/kv_pool.c
runtime/model/weights.c runtime/model/device_weights.c runtime/engine/step_check.c runtime/engine/backend_cpu.c runtime/engine/backend_gpu.c runtime/engine/engine.c runtime/text/tokenizer.c runtime/text/tokenizer_load.c runtime/text/tokenizer_tables.c runtime/text/chat.c runtime/proto/proto.c
runtime/text/sampler.c runtime/text/par.c runtime/sched/answer.c runtime/sched/sched.c runtime/edge/serve.c graph/model_desc.c graph/schedule_find.c"
REF_SRC="kernels/ref/bf16_ref.c kernels/ref/norm_ref.c kernels/ref/gemm_ref.c
kernels/ref/attn_ref.c kernels/ref/moe_ref.c kernels/ref/fill_ref.c kernels/ref/sample_ref.c"
GPU_TESTS="test_gemm_lt test_ops test_attn test_moe test_fill test_sample"
CU_SRC="kernels/device.cu kernels/gemm_lt.cu kernels/fill.cu kernels/norm.cu kernels/attn_prep.cu
kernels/attn.cu kernels/attn_window.cu kernels/attn_mma.cu kernels/attn_mma_d256_bf16_keep.cu
kernels/attn_mma_d256_e4m3_keep.cu kernels/attn_mma_d256_bf16.cu kernels/attn_mma_d256_e4m3.cu
kernels/attn_mma_d512_bf16.cu kernels/attn_mma_d512_e4m3.cu kernels/attn_prompt.cu kernels/moe.cu
kernels/moe_stream.cu kernels/sample.cu"
# The unit tests, one line each: name | what it links besides tests/unit/<name>.c (the module
# under test through its header, no generated code; test_loader brings its own model table) |
# its arguments. Registering a unit test is adding its line here; build, run, the musl build
# and the suite all read this table.
UNIT_TABLE='
test_loader  | runtime/base/log.c runtime/model/hfconfig.c runtime/model/loader.c graph/model_desc.c |
test_config  | runtime/base/log.c runtime/base/config.c |
test_kv_pool | runtime/base/log.c runtime/engine/kv_pool.c |
test_sampler | runtime/base/log.c runtime/text/sampler.c kernels/ref/sample_ref.c kernels/ref/bf16_ref.c |
test_par     | runtime/base/log.c runtime/text/par.c runtime/text/sampler.c kernels/ref/sample_ref.c kernels/ref/bf16_ref.c |
test_chat    | runtime/base/log.c $TOKENIZER_SRC runtime/text/chat.c | tests/fixtures/tiny-moe/tokenizer.json
test_answer  | runtime/base/log.c $TOKENIZER_SRC runtime/text/chat.c runtime/proto/proto.c runtime/sched/answer.c | tests/fixtures/tiny-moe/tokenizer.json
test_ref_fp8 | kernels/ref/bf16_ref.c kernels/ref/attn_ref.c |
test_attn_split_choice | |
'
# The end-to-end test programs, one line each: name | its own sources | what else it links
# ("engine": the whole host and device code; else module sources) | its arguments | the other
# builds that run it too (asan: ./build.sh debug's sanitizers; musl: the musl-gcc build).
# Registering one is adding its line here; the build, the suite, the sanitized and the musl
# runs all read this table.
E2E_TABLE='
test_fixtures  | tests/e2e/test_fixtures.c tests/e2e/fixture_dump.c tests/e2e/fixture_run.c | engine | tests/fixtures | asan musl
test_trained   | tests/e2e/test_trained.c tests/e2e/fixture_dump.c tests/e2e/fixture_run.c | engine | tests/fixtures |
test_proto     | tests/proto/test_proto.c | runtime/proto/proto.c runtime/base/log.c | | asan musl
test_tokenizer | tests/tokenizer/test_tokenizer.c | $TOKENIZER_SRC runtime/base/log.c | $SHARED_TOKENIZER tests/tokenizer tests/fixtures | musl
test_serve     | tests/proto/test_serve.c | engine | tests/fixtures tests/proto | asan musl
'
table_column() { # table_column TABLE TEST N: field N of TEST's line in TABLE
    echo "$1" | awk -F'|' -v t="$2" -v n="$3" '{ gsub(/^ +| +$/, "", $1) } $1 == t { print $n }' |
        sed -e "s|\$TOKENIZER_SRC|$TOKENIZER_SRC|g" -e "s|\$SHARED_TOKENIZER|$SHARED_TOKENIZER|g"
}
table_names() { echo "$1" | awk -F'|' 'NF > 1 { gsub(/ /, "", $1); print $1 }' | tr '\n' ' '; }
UNIT_TESTS=$(table_names "$UNIT_TABLE")
unit_src() { table_column "$UNIT_TABLE" "$1" 2; }
unit_args() { table_column "$UNIT_TABLE" "$1" 3; }
E2E_TESTS=$(table_names "$E2E_TABLE")
e2e_src() { table_column "$E2E_TABLE" "$1" 2; }
e2e_links() { table_column "$E2E_TABLE" "$1" 3 | xargs; }
e2e_args() { table_column "$E2E_TABLE" "$1" 4; }
e2e_runs_in() { table_column "$E2E_TABLE" "$1" 5 | grep -qw "$2"; } # e2e_runs_in TEST asan|musl
LINT_DIRS="runtime codegen kernels/ref graph"
TOKENIZER_SRC="runtime/text/tokenizer.c runtime/text/tokenizer_load.c runtime/text/tokenizer_tables.c"
SHARED_TOKENIZER=${SHARED_TOKENIZER:-../shared/data/gemma3-tokenizer/tokenizer.json}

say() { echo "build.sh: $*" >&2; }

# ---- dependencies -------------------------------------------------------------------------

have_header() { [ -f "/usr/include/$1" ] || [ -f "$DEPS_ROOT/usr/include/$1" ]; }

# Libraries are required; the lint and musl tools only for ./build.sh test and lint (argument
# "tools"), so that a build on the offline GPU box, whose libraries come from .deps/, does not
# spend minutes on an apt-get that cannot resolve its mirrors. As root, missing packages are
# installed; where that fails, libraries come from .deps/.
ensure_deps() {
    local missing="" tools=""
    have_header ini.h || missing="$missing libinih-dev"
    have_header jansson.h || missing="$missing libjansson-dev"
    if [ "${1:-}" = tools ]; then
        command -v musl-gcc >/dev/null || tools="$tools musl-tools"
        for t in clang clang-format cppcheck clang-tidy; do command -v $t >/dev/null || tools="$tools $t"; done
        command -v python3 >/dev/null || tools="$tools python3" # release driver and batching tests
    fi
    [ -z "$missing$tools" ] && return 0
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        say "installing Debian packages:$missing$tools"
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing $tools; } >&2 ||
            say "apt-get failed (offline?)"
    fi
    have_header ini.h && have_header jansson.h && return 0
    say "missing:$missing: run as root to install them, or ./build.sh deps to fill .deps/ elsewhere"
    exit 1
}

# .deps/: Debian's archives unpacked, for the offline GPU box (it cannot install packages).
fill_deps() {
    mkdir -p .deps && (cd .deps && apt-get download $DEB_PKGS >&2)
    rm -rf "$DEPS_ROOT" && mkdir -p "$DEPS_ROOT"
    for d in .deps/*.deb; do dpkg -x "$d" "$DEPS_ROOT"; done
    say "filled $DEPS_ROOT from: $(cd .deps && ls *.deb | tr '\n' ' ')"
}

INC="-I. -I$B/gen"
[ -d "$DEPS_ROOT/usr/include" ] && INC="$INC -I$DEPS_ROOT/usr/include"
static_lib() { # the static archive of a dependency, from the system or .deps/
    for d in /usr/lib/x86_64-linux-gnu "$DEPS_ROOT/usr/lib/x86_64-linux-gnu"; do
        [ -f "$d/$1" ] && { echo "$d/$1"; return; }
    done
    say "no $1 (libinih-dev / libjansson-dev)"; exit 1
}

# ---- compile ------------------------------------------------------------------------------

obj() { echo "$B/obj/$(echo "$1" | tr / _).o"; }

# True when object $2 is older than source $1 or than any header it may include.
stale() {
    [ ! -f "$2" ] || [ "$1" -nt "$2" ] ||
        [ -n "$(find runtime graph kernels tests "$B/gen" \( -name '*.h' -o -name '*.cuh' \) -newer "$2" 2>/dev/null | head -1)" ]
}

compile_c() { # src [extra flags]
    local o; o=$(obj "$1")
    # a failed compile removes the old object and fails the step: a command substitution does
    # not inherit set -e, and a stale object would otherwise link as if the source had built
    if stale "$1" "$o"; then $CC $CFLAGS $INC "${@:2}" -c "$1" -o "$o" || { rm -f "$o"; return 1; }; fi
    echo "$o"
}

# The slow steps (nvcc, static links) run in parallel: in_background starts one, wait_all
# waits for every one started and stops the build if any failed (its message is above).
BG_PIDS=""
in_background() { "$@" & BG_PIDS="$BG_PIDS $!"; }
wait_all() {
    local p failed=0
    for p in $BG_PIDS; do wait "$p" || failed=1; done
    BG_PIDS=""
    if [ $failed = 1 ]; then echo "build.sh: a build step failed (see above)" >&2; exit 1; fi
}

compile_cu() { # src obj
    if stale "$1" "$2"; then
        "$CUDA_HOME/bin/nvcc" $NVFLAGS -I. -c "$1" -o "$2" 2> "$2.log" || { cat "$2.log" >&2; rm -f "$2"; return 1; }
        grep -i "spill" "$2.log" | grep -v " 0 bytes spill" >&2 || true
    fi
}

generate() {
    mkdir -p "$B/obj" "$B/gen"
    $CC $CFLAGS $INC codegen/gen.c graph/model_desc.c kernels/ref/bf16_ref.c \
        "$(static_lib libinih.a)" -lm -o "$B/codegen"
    # objects built under other flags are rebuilt; unchanged generated files keep their time
    # stamps, so a rebuild compiles only what changed
    local flags="$CC $CFLAGS $NVFLAGS" f # not $INC: it names $B, and a copied build folder stays valid
    [ "$(cat "$B/obj/flags" 2>/dev/null)" = "$flags" ] || { rm -f "$B"/obj/*; echo "$flags" > "$B/obj/flags"; }
    rm -rf "$B/gen.new"; mkdir -p "$B/gen.new"
    "$B/codegen" "$B/gen.new" $(ls graph/models/*.ini | LC_ALL=C sort)
    for f in "$B"/gen/*; do [ -e "$B/gen.new/${f##*/}" ] || rm -f "$f"; done
    for f in "$B"/gen.new/*; do cmp -s "$f" "$B/gen/${f##*/}" || mv "$f" "$B/gen/"; done
    rm -rf "$B/gen.new"
}

HAVE_NVCC=0
[ -x "$CUDA_HOME/bin/nvcc" ] && HAVE_NVCC=1

cuda_libs() {
    local lt="-lcublasLt"
    if [ -f "$CUDA_HOME/lib64/libcublasLt_static.a" ]; then
        lt="-lcublasLt_static -lculibos"
    else
        say "no libcublasLt_static.a in $CUDA_HOME/lib64: linking cuBLASLt dynamically" 
    fi
    echo "-L$CUDA_HOME/lib64 $lt -lcudart_static -lpthread -ldl -lrt"
}

# Links a program: with g++ and the CUDA libraries in a GPU build (libstdc++ and libgcc go in
# statically), with $CC in a CPU-only build.
# A GPU test program's sources besides tests/gpu/<name>.c
gpu_test_parts() {
    case $1 in
    test_attn) echo tests/gpu/attn_case.c ;;
    esac
}

# A probe (one .cu file, a program of its own, extra link arguments after the output): built when
# older than its source or a header, like an object, so a build over packed objects
# (tests/gpu/prebuilt.sh) compiles nothing it need not.
build_probe() { # src out [link args]
    if stale "$1" "$2"; then "$CUDA_HOME/bin/nvcc" $NVFLAGS -I. "$1" -o "$2" "${@:3}"; fi
}

link_bin() {
    local out=$1; shift
    if [ $HAVE_NVCC = 1 ]; then
        g++ -o "$out" "$@" $LIBS $(cuda_libs) -static-libstdc++ -static-libgcc
    else
        $CC -o "$out" "$@" $LIBS
    fi
}

build_all() {
    generate
    HOST_OBJS=""
    for s in $HOST_SRC $REF_SRC; do HOST_OBJS="$HOST_OBJS $(compile_c "$s")"; done
    # models.c once; the schedules once per backend (ref_ here, k_ below)
    for s in "$B"/gen/*.c; do HOST_OBJS="$HOST_OBJS $(compile_c "$s" -DG4_BACKEND_PREFIX=ref_)"; done
    LIBS="$(static_lib libjansson.a) $(static_lib libinih.a) -lm ${LINK_EXTRA:-}"
    DEV_OBJS=""
    if [ $HAVE_NVCC = 1 ]; then
        local o
        for s in $CU_SRC; do
            o=$(obj "$s")
            in_background compile_cu "$s" "$o"
            DEV_OBJS="$DEV_OBJS $o"
        done
        wait_all
        # the same generated schedule, bound to the GPU launchers
        for s in "$B"/gen/schedule*.c; do
            o="$(obj "$s").gpu.o"
            $CC $CFLAGS $INC -DG4_BACKEND_PREFIX=k_ -c "$s" -o "$o"
            DEV_OBJS="$DEV_OBJS $o"
        done
        link_bin "$B/g4pipe" $(compile_c runtime/edge/main.c) $HOST_OBJS $DEV_OBJS
        say "built $B/g4pipe (GPU build for sm_90a, CPU reference backend without a GPU)"
    else
        DEV_OBJS="$(compile_c kernels/no_gpu.c) $(compile_c graph/schedules_none.c)"
        link_bin "$B/g4pipe" $(compile_c runtime/edge/main.c) $HOST_OBJS $DEV_OBJS
        say "no nvcc at $CUDA_HOME/bin: built a CPU-only $B/g4pipe"
    fi
}

build_tests() {
    mkdir -p "$B/tests"
    local t s unit
    for t in $UNIT_TESTS; do
        unit=""; for s in $(unit_src $t); do unit="$unit $(obj "$s")"; done
        $CC $CFLAGS $INC "tests/unit/$t.c" $unit $LIBS -o "$B/tests/$t"
    done
    local objs links
    for t in $E2E_TESTS; do
        objs=""; links=$(e2e_links $t)
        for s in $(e2e_src $t); do objs="$objs $(compile_c "$s")"; done
        if [ "$links" = engine ]; then
            in_background link_bin "$B/tests/$t" $objs $HOST_OBJS $DEV_OBJS
        else
            for s in $links; do objs="$objs $(obj "$s")"; done
            $CC $CFLAGS $objs $LIBS -o "$B/tests/$t"
        fi
    done
    local tok_objs="" t_src
    for t_src in $TOKENIZER_SRC runtime/base/log.c; do tok_objs="$tok_objs $(obj $t_src)"; done
    $CC $CFLAGS $INC tests/tokenizer/bench_tokenizer.c $tok_objs $LIBS -o "$B/tests/bench_tokenizer"
    in_background link_bin "$B/tests/bench_decode" $(compile_c tests/bench/bench_decode.c) $HOST_OBJS $DEV_OBJS
    in_background link_bin "$B/tests/bench_gemm" $(compile_c tests/bench/bench_gemm.c) $HOST_OBJS $DEV_OBJS
    if [ $HAVE_NVCC = 1 ]; then
        for t in $GPU_TESTS; do
            in_background link_bin "$B/tests/$t" $(compile_c tests/gpu/$t.c) \
                $(for x in $(gpu_test_parts $t); do compile_c $x; done) $HOST_OBJS $DEV_OBJS
        done
        # a measurement, not an engine gate: what a tensor-core instruction's sum depends on
        # (its header says why); built here so that CI compiles it, beside the links
        in_background build_probe tests/gpu/probe_tc_order.cu "$B/tests/probe_tc_order"
        in_background build_probe tests/gpu/probe_lt_order.cu "$B/tests/probe_lt_order" $(cuda_libs)
    fi
    wait_all
}

# ---- lint ---------------------------------------------------------------------------------

hand_sources() { git ls-files '*.c' '*.h' '*.cu' '*.cuh' 2>/dev/null || find runtime codegen kernels graph tests -name '*.[ch]' -o -name '*.cu' -o -name '*.cuh'; }

lint() {
    local out
    if out=$( (hand_sources; ls "$B"/gen/*) | xargs clang-format --style=file --dry-run -Werror 2>&1); then
        echo "PASS format: every C/CUDA file and the generated schedule match .clang-format"
    else
        echo "FAIL format: $(echo "$out" | grep -c 'error:') lines differ from .clang-format (./build.sh format rewrites them)"
        echo "$out" | grep 'error:' | head -20
    fi
    local srcs; srcs=$(find $LINT_DIRS -name '*.c' | LC_ALL=C sort)
    if out=$(cppcheck -q --std=c11 --enable=warning,style,performance,portability --inline-suppr \
             --error-exitcode=1 $INC -D__GNUC__ --suppress=missingIncludeSystem $srcs 2>&1); then
        echo "PASS cppcheck: 0 findings in $(echo $srcs | wc -w) files"
    else echo "FAIL cppcheck: $(echo "$out" | grep -c ': ') findings"; echo "$out" | head -20; fi
    if ! command -v clang-tidy >/dev/null; then
        echo "SKIP clang-tidy: skipped: no clang-tidy on this machine"
    elif out=$(clang-tidy --quiet $srcs -- $CFLAGS $INC -DG4_BACKEND_PREFIX=ref_ 2>&1 | grep -E "(warning|error):"); then
        echo "FAIL clang-tidy: $(echo "$out" | wc -l) findings"; echo "$out" | head -20
    else echo "PASS clang-tidy: 0 findings (checks in .clang-tidy)"; fi
}

# ---- suites -------------------------------------------------------------------------------

# Runs a test program, echoing its lines; the caller counts PASS/FAIL/SKIP.
# Runs one gate program: its gate lines pass through; a program that dies (a signal, an abort)
# or exits non-zero without printing a FAIL line of its own counts as one FAIL, so a crash can
# never end a suite green.
# The device plans parse: a syntax error found on the GPU box costs a call's minutes, here none
plans_parse() {
    local f bad=0 n=0
    for f in tests/gpu/box_queue.sh tests/gpu/prebuilt.sh tests/gpu/plans/*.sh; do
        n=$((n + 1))
        bash -n "$f" 2> "$B/plans_parse.err" || { bad=1; echo "FAIL plans_parse: $f: $(head -1 "$B/plans_parse.err")"; }
    done
    [ $bad = 0 ] && echo "PASS plans_parse: $n device plans (tests/gpu) parse as bash"
}

run_test() {
    local name rc out
    name=$(basename "$1"); [ "$name" = python3 ] && name=$(basename "${2:-python3}" .py)
    mkdir -p "$B/tests"
    out="$B/tests/$name.out"
    # streamed, not held: a run cut short (a device call's deadline) keeps the lines it printed
    "$@" 2> "$B/tests/$name.stderr" | tee "$out"
    rc=${PIPESTATUS[0]}
    if [ "$rc" -ne 0 ] && ! grep -q '^FAIL ' "$out"; then
        local how="exited with status $rc"
        [ "$rc" -gt 128 ] && how="died of signal $((rc - 128)) ($(kill -l $((rc - 128)) 2>/dev/null || echo ?))"
        echo "FAIL $name: $how after $(grep -c '^PASS ' "$out") PASS lines, without a FAIL line of its own (see $B/tests/$name.stderr)"
    fi
    # a declared plan (tests/harness.h test_plan): fewer gate lines than declared is a failure
    local plan got
    plan=$(sed -n 's/^PLAN \([0-9][0-9]*\)$/\1/p' "$out" | awk '{s += $1} END {print s + 0}')
    got=$(grep -c -E '^(PASS|FAIL|SKIP) ' "$out")
    if [ "$plan" -gt 0 ] && [ "$got" -lt "$plan" ]; then
        echo "FAIL $name: printed $got gate lines of the $plan it declared (see $B/tests/$name.stderr)"
    fi
    return 0
}

# tests/gpu/prebuilt.sh, which device calls rely on to link instead of compiling: this build's
# objects packed, unpacked into a copy of the tree whose files all have fresh times (as the device
# copy's may), must build there without one object compiled again; and with one source changed
# after packing, unpack must leave them out. Where it fails, a device call would spend minutes on
# nvcc without a word.
prebuilt_check() {
    local copy="$B/prebuilt-check" log="$B/prebuilt-check.log" unpacked recompiled refused
    if [ $HAVE_NVCC = 0 ]; then echo "SKIP prebuilt: skipped: no nvcc (a CPU-only build)"; return; fi
    if [ "$B" != build ]; then echo "SKIP prebuilt: skipped: packs build/, this build is $B"; return; fi
    rm -rf "$copy" && mkdir -p "$copy"
    if ! { tests/gpu/prebuilt.sh pack && git ls-files | tar cf - -T - .prebuilt $([ -d .deps ] && echo .deps) |
        tar xf - -C "$copy" --touch; } > "$log" 2>&1; then
        echo "FAIL prebuilt: could not pack or copy the tree (see $log)"; return
    fi
    unpacked=$(cd "$copy" && bash tests/gpu/prebuilt.sh unpack 2>&1)
    if (cd "$copy" && env -u BUILD_DIR ./build.sh tests) >> "$log" 2>&1; then
        # (the schedules' GPU bindings, *.gpu.o, are compiled by every build: a few seconds of gcc)
        recompiled=$(find "$copy/build/obj" -name '*.o' ! -name '*.gpu.o' -newer "$copy/build/obj/flags" |
            wc -l)
    else
        recompiled="the build failed"
    fi
    refused=$(cd "$copy" && echo "/* changed after packing */" >> kernels/moe.cu &&
        bash tests/gpu/prebuilt.sh unpack 2>&1)
    rm -rf "$copy"
    if [[ $unpacked != unpacked* ]]; then
        echo "FAIL prebuilt: unpack into a fresh copy of the same tree said: $unpacked"
    elif [ "$recompiled" != 0 ]; then
        echo "FAIL prebuilt: the fresh copy's build after unpack: $recompiled objects compiled again (see $log)"
    elif [[ $refused != *"not unpacked"* ]]; then
        echo "FAIL prebuilt: unpack took objects packed from other sources: $refused"
    else
        echo "PASS prebuilt: unpacked into a fresh copy, its build compiled no object; refused after a source change"
    fi
}

# The kernel trace build (./build.sh trace) must keep compiling, though only a GPU runs it.
trace_build_check() {
    local log="$B/trace-build.log"
    if [ $HAVE_NVCC = 0 ]; then echo "SKIP trace_build: skipped: no nvcc (a CPU-only build)"; return; fi
    if "$0" trace > "$log" 2>&1; then
        echo "PASS trace_build: ./build.sh trace built build/trace/tests/bench_decode with -DG4_KERNEL_TRACE"
    else
        echo "FAIL trace_build: ./build.sh trace did not build (see $log)"
    fi
}

# The ASan+UBSan build (./build.sh debug, CPU backend) answering the demo prompts and a few bad
# lines: every request answered, exit 0, and no sanitizer report (leaks included).
sanitized_suite() {
    local log="$B/debug-build.log" out err n
    if ! "$0" debug > "$log" 2>&1; then
        echo "FAIL sanitized_build: ./build.sh debug did not build (see $log)"; return
    fi
    echo "PASS sanitized_build: ./build.sh debug built build/debug/g4pipe with -fsanitize=address,undefined"
    out="$B/sanitized.out"; err="$B/sanitized.stderr"
    { grep -v '"cmd"' examples/prompts.jsonl; printf '%s\n' '{"tokens":[2,3],"max_tokens":-1}' \
        'not json' '{"prompt":"x","temperature":"hot"}' '{"cmd":"stats"}'; } |
        ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
        build/debug/g4pipe -c conf/demo.ini > "$out" 2> "$err"
    local rc=$?
    n=$(grep -c '"event":"done"' "$out" || true)
    if [ $rc = 0 ] && [ "$n" = 6 ] && [ "$(grep -c '"event":"error"' "$out")" = 3 ] &&
        ! grep -q -E 'AddressSanitizer|LeakSanitizer|runtime error' "$err"; then
        echo "PASS sanitized_demo: 6 demo requests done, 3 bad lines answered with errors, exit 0, no ASan/UBSan/LSan report"
    else
        echo "FAIL sanitized_demo: exit $rc, $n of 6 done, $(grep -c '"event":"error"' "$out") of 3 errors; reports: $(grep -m1 -E 'Sanitizer|runtime error' "$err")"
    fi
    # the protocol, scheduler and fixture suites under the sanitizers (gate names prefixed
    # asan:): a report aborts the program or makes it exit non-zero, which run_test fails
    local d=build/debug/tests mark='s/^\(PASS\|FAIL\|SKIP\) /\1 asan:/'
    (
        export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
        B=build/debug # run_test's logs beside the sanitized programs, not over the plain runs'
        for t in $E2E_TESTS; do if e2e_runs_in $t asan; then run_test "$d/$t" $(e2e_args $t); fi; done
    ) | sed "$mark"
}

# run_test's own rules, on programs made to break them: each must turn into a FAIL line.
harness_self_test() {
    local out
    out=$(run_test bash -c 'echo PLAN 3; echo "PASS a: one"; echo "PASS b: two"' 2>&1)
    case "$out" in *"FAIL bash: printed 2 gate lines of the 3 it declared"*)
        echo "PASS harness_counts_declared_gates: a program declaring 3 gates and printing 2 is failed" ;;
    *) echo "FAIL harness_counts_declared_gates: no FAIL line for 2 of 3 declared gates: $out" ;; esac
    out=$(run_test bash -c 'echo "PASS a: one"; kill -ABRT $$' 2>&1)
    case "$out" in *"FAIL bash: died of signal 6 (ABRT) after 1 PASS lines"*)
        echo "PASS harness_fails_an_aborted_program: a program that aborts after a PASS line is failed" ;;
    *) echo "FAIL harness_fails_an_aborted_program: no FAIL line for an abort: $out" ;; esac
    out=$(run_test bash -c 'echo "PASS a: one"; exit 3' 2>&1)
    case "$out" in *"FAIL bash: exited with status 3 after 1 PASS lines"*)
        echo "PASS harness_fails_a_nonzero_exit: a program that exits 3 without a FAIL line is failed" ;;
    *) echo "FAIL harness_fails_a_nonzero_exit: no FAIL line for exit 3: $out" ;; esac
    local tmp; tmp=$(mktemp -d)
    out=$( (B=$tmp; { echo "PASS a: one"; exit 1; echo "PASS b: never"; } | summarize) 2>&1 || true)
    rm -rf "$tmp"
    case "$out" in *"FAIL suite: stopped before its end"*"1 passed, 1 failed, 0 skipped"*)
        echo "PASS harness_fails_a_suite_cut_short: a suite whose steps stop before the end is failed" ;;
    *) echo "FAIL harness_fails_a_suite_cut_short: no FAIL line for a suite cut short: $out" ;; esac
}

golden() {
    if diff -r tests/golden "$B/gen" > "$B/golden.diff"; then
        echo "PASS schedule_golden: build/gen equals tests/golden ($(ls tests/golden | wc -l) files)"
    else
        echo "FAIL schedule_golden: codegen output differs from tests/golden (see $B/golden.diff; a deliberate change updates the golden in the same commit)"
    fi
}

# g4pipe refuses a checkpoint whose config.json matches no compiled-in model, naming the field.
cli_refusals() {
    local t; t=$(mktemp -d)
    cp -r tests/fixtures/tiny-dense "$t/ck"
    sed -i 's/"sliding_window": 8/"sliding_window": 16/' "$t/ck/config.json"
    local err
    if err=$("$B/g4pipe" --model "$t/ck" --check 2>&1); then
        echo "FAIL cli_refuses_mismatched_config: exit 0 on a changed sliding_window"
    elif echo "$err" | grep -q "sliding_window is 16 but model tiny-dense has 8"; then
        echo "PASS cli_refuses_mismatched_config: non-zero exit, names sliding_window (16 vs 8)"
    else echo "FAIL cli_refuses_mismatched_config: message does not name the field: $err"; fi
    printf '[kv]\npage_tokens = 12\n' > "$t/bad.ini"
    if err=$("$B/g4pipe" -c "$t/bad.ini" --check 2>&1); then
        echo "FAIL cli_refuses_bad_ini: exit 0"
    elif echo "$err" | grep -q "bad.ini:2: kv.page_tokens"; then
        echo "PASS cli_refuses_bad_ini: names file, line 2 and kv.page_tokens"
    else echo "FAIL cli_refuses_bad_ini: $err"; fi
    local out n
    out=$("$B/g4pipe" -c conf/demo.ini < examples/prompts.jsonl 2>/dev/null || true)
    n=$(echo "$out" | grep -c '"event":"done"' || true)
    if [ "$n" = 6 ] && ! echo "$out" | grep -q '"event":"error"'; then
        echo "PASS cli_demo: g4pipe -c conf/demo.ini < examples/prompts.jsonl answered all 6 requests and the stats line"
    else echo "FAIL cli_demo: $n of 6 requests done"; fi
    out=$(echo "Tell me about rivers" | "$B/g4pipe" -c conf/demo.ini --text 2>/dev/null || true)
    if [ -n "$out" ] && ! echo "$out" | grep -q '"event"'; then echo "PASS cli_text: --text wrote ${#out} bytes of plain answer text"
    else echo "FAIL cli_text: got '$out'"; fi
    rm -rf "$t"
}

# The host code again with musl-gcc: the portability check of a musl-compatible libc.
musl_suite() {
    if ! command -v musl-gcc >/dev/null; then echo "SKIP musl_build: skipped: no musl-gcc"; return; fi
    local m="$B/musl" minc="$B/musl/include"
    mkdir -p "$m" "$minc"
    for h in ini.h jansson.h jansson_config.h; do
        cp "$( [ -f "/usr/include/$h" ] && echo /usr/include/$h || echo "$DEPS_ROOT/usr/include/$h")" "$minc/"
    done
    local flags="$CFLAGS -I. -I$B/gen -I$minc" objs="" ok=1
    for s in $HOST_SRC $REF_SRC kernels/no_gpu.c graph/schedules_none.c tests/musl/fortify_shim.c; do
        musl-gcc $flags -c "$s" -o "$m/$(basename "$s").o" || ok=0; objs="$objs $m/$(basename "$s").o"
    done
    for s in "$B"/gen/*.c; do
        musl-gcc $flags -DG4_BACKEND_PREFIX=ref_ -c "$s" -o "$m/gen_$(basename "$s").o" || ok=0
        objs="$objs $m/gen_$(basename "$s").o"
    done
    local libs="$(static_lib libjansson.a) $(static_lib libinih.a) -lm"
    local t unit
    for t in $E2E_TESTS; do
        e2e_runs_in $t musl || continue
        musl-gcc $flags -static $(e2e_src $t) $objs $libs -o "$m/$t" || ok=0
    done
    for t in $UNIT_TESTS; do
        unit="$m/fortify_shim.c.o"; for s in $(unit_src $t); do unit="$unit $m/$(basename "$s").o"; done
        musl-gcc $flags -static "tests/unit/$t.c" $unit $libs -o "$m/$t" || ok=0
    done
    if [ $ok = 0 ]; then echo "FAIL musl_build: the host code did not build with musl-gcc"; return; fi
    echo "PASS musl_build: host code, reference kernels and tests built with musl-gcc -static"
    # through run_test like every other run: a musl program that dies or exits non-zero without
    # a FAIL line of its own is a FAIL (its logs under $B/musl/tests)
    (
        B=$m
        for t in $UNIT_TESTS; do run_test "$m/$t" $(unit_args $t); done
        for t in $E2E_TESTS; do if e2e_runs_in $t musl; then run_test "$m/$t" $(e2e_args $t); fi; done
    ) | sed 's/^\(PASS\|FAIL\|SKIP\) /\1 musl:/'
}


# libFuzzer targets: bounded in ./build.sh test, longer with ./build.sh fuzz [SECONDS].
# One per parser of untrusted bytes: the request line, tokenizer.json, the safetensors header
# and shard index, config.json and its match, the INI file and --set, the chat template's input.
FUZZ_TARGETS="proto tokenizer safetensors hfconfig ini chat"
fuzz_src() { # what tests/fuzz/fuzz_<target>.c links besides runtime/base/log.c
    case $1 in
    proto) echo runtime/proto/proto.c ;;
    tokenizer) echo $TOKENIZER_SRC ;;
    safetensors) echo runtime/model/loader.c ;;
    hfconfig) echo runtime/model/hfconfig.c graph/model_desc.c "$B/gen/models.c" ;;
    ini) echo runtime/base/config.c ;;
    chat) echo $TOKENIZER_SRC runtime/text/chat.c ;;
    esac
}
fuzz_suite() {
    local secs=$1 t
    for t in $FUZZ_TARGETS; do
        if ! command -v clang >/dev/null; then echo "SKIP fuzz_$t: skipped: no clang"; continue; fi
        local bin="$B/fuzz/fuzz_$t" work="$B/fuzz/work_$t"
        mkdir -p "$B/fuzz" "$work"
        if ! clang -g -O1 -fsanitize=fuzzer,address,undefined $INC $(fuzz_src $t) runtime/base/log.c \
            "tests/fuzz/fuzz_$t.c" "$(static_lib libjansson.a)" "$(static_lib libinih.a)" -lm \
            -o "$bin" > "$B/fuzz/$t.build.log" 2>&1; then
            echo "FAIL fuzz_$t: the target did not build, see $B/fuzz/$t.build.log"; continue
        fi
        if "$bin" -max_total_time="$secs" -print_final_stats=1 -artifact_prefix="$B/fuzz/" \
            "$work" "tests/fuzz/corpus_$t" > "$B/fuzz/$t.log" 2>&1; then
            echo "PASS fuzz_$t: $(grep -o 'stat::number_of_executed_units: *[0-9]*' "$B/fuzz/$t.log" | grep -o '[0-9]*$') inputs in ${secs} s, no crash, no leak"
        else
            echo "FAIL fuzz_$t: libFuzzer found a failure, see $B/fuzz/$t.log and $B/fuzz/crash-*"
        fi
    done
}

# The GPU gates (docs/gates.md): each test program prints its own skip line without a
# device; gpu-test names restrict the run to those programs (e.g. ./build.sh gpu-test test_attn).
gpu_gates() {
    if [ $HAVE_NVCC = 0 ]; then
        for t in $GPU_TESTS engine_vs_hf trained dummy_weights pinned_composition reliability geometry full; do echo "SKIP gpu:$t: skipped: no GPU (CPU-only build, no nvcc)"; done
        return
    fi
    local t want=" $* "
    for t in $GPU_TESTS; do
        [ "$want" = "  " ] || [ "${want#* $t }" != "$want" ] && run_test "$B/tests/$t"
    done
    if [ "$want" = "  " ] || [ "${want#* engine_vs_hf }" != "$want" ]; then
        run_test "$B/tests/test_fixtures" tests/fixtures gpu
        G4_FIXTURE_GATES=batch_invariance,distribution,e4m3kv run_test "$B/tests/test_fixtures" \
            tests/fixtures gpu-fp8
    fi
    # the sharp gates on the trained fixtures, both pools (tests/e2e/test_trained.c)
    if [ "$want" = "  " ] || [ "${want#* trained }" != "$want" ]; then
        run_test "$B/tests/test_trained" tests/fixtures gpu
    fi
    if [ "$want" = "  " ] || [ "${want#* dummy_weights }" != "$want" ]; then dummy_weights; fi
    if [ "$want" = "  " ] || [ "${want#* pinned_composition }" != "$want" ]; then
        if nvidia-smi -L >/dev/null 2>&1; then
            BUILD_DIR="$B" run_test python3 tests/proto/test_pinned.py --backend gpu
            # the speed switches answer the same bytes either way, each replayed at its other
            # setting: the fused projections, the folded combine, the experts' bucketing in the
            # up kernel, the prefill experts' tiles, the row-op chain (off, then at 2 without the
            # preloaded operands), the router's lanes form, the decode k loops' wide load groups,
            # the attention's query tiles (at 64 rows by default; at 1 here, so that the
            # recording's short prompts take them too), the MoE branch beside the dense MLP on a
            # stream of its own (on by default, off here), the one-row attention passes' early
            # page-table look-ups (on by default, off here), the decode experts' weights
            # through bulk copies (on by default for one-row calls, here for every decode-sized
            # call) and the query tiles two a block (form 2 by default, as the query tiles'
            # replay runs it: off here, with the query tiles from one row)
            local set
            for set in serve.fuse_projections=0 serve.attn_fold=0 serve.moe_bucket_in_up=0 \
                serve.moe_prefill_tiles=0 serve.row_chain=0 \
                serve.moe_route_lanes=0 serve.wide_loads=0 serve.row_chain=2 \
                serve.attn_query_tiles=1 serve.moe_branches=0 serve.attn_early_lookup=0 \
                serve.expert_stream=128 "serve.attn_query_tiles=1 serve.attn_pair_tiles=0"; do
                BUILD_DIR="$B" PINNED_SET=$set run_test python3 tests/proto/test_pinned.py \
                    --backend gpu
            done
        else
            echo "SKIP gpu:pinned_composition: skipped: no GPU"
        fi
    fi
    # the start-up faults on the GPU backend, and the soak at the 26B-A4B's real geometry
    if [ "$want" = "  " ] || [ "${want#* reliability }" != "$want" ]; then
        if nvidia-smi -L >/dev/null 2>&1; then
            BUILD_DIR="$B" STARTUP_FAULTS_GPU=1 run_test python3 tests/proto/test_startup_faults.py
            BUILD_DIR="$B" SOAK_CONF=conf/gemma4-26b-a4b.ini SOAK_VOCAB=262144 \
                SOAK_SET="model.weights=dummy serve.max_context=4096 serve.max_batch=16" \
                run_test python3 tests/proto/test_soak.py
        else
            echo "SKIP gpu:reliability: skipped: no GPU"
        fi
    fi
    if [ "$want" = "  " ] || [ "${want#* geometry }" != "$want" ]; then geometry_gates; fi
    if [ "$want" = "  " ] || [ "${want#* full }" != "$want" ]; then full_gates; fi
}

# Every supported checkpoint at its real depth and width, random weights in the published
# layout, made here with torch (never committed), driven through build/g4pipe's protocol with
# the shipped conf/*.ini under both pools: prompts across the window and the prefill chunk,
# alone and all at once, against HF (tests/full/full_step.py, docs/testing.md "full").
# FULL_MODELS picks a subset (one device call holds about one model); FULL_DIR is where the
# checkpoint goes (default /dev/shm when it has room: the 31B's 62 GB fit nowhere else there);
# FULL_SETS passes settings to the binary (kv.budget_gb=6 leaves the GPU to a make beside it);
# FULL_MODES=alone or mixed runs one of the two (a 31B call holds one).
full_gates() {
    if ! nvidia-smi -L >/dev/null 2>&1; then
        echo "SKIP gpu:full: skipped: no GPU (the full checkpoints are made with torch on it)"; return
    fi
    if ! python3 -c 'import torch, transformers; assert torch.cuda.is_available()' 2>/dev/null; then
        echo "SKIP gpu:full: skipped: needs torch and transformers with a GPU"; return
    fi
    local m pool d root=${FULL_DIR:-/dev/shm/g4full} sets="" kv
    for kv in ${FULL_SETS:-}; do sets="$sets --set $kv"; done
    [ -n "${FULL_MODES:-}" ] && sets="$sets --modes $FULL_MODES"
    mkdir -p "$root" "$B/full"
    for m in ${FULL_MODELS:-26b-a4b 31b e2b e4b}; do
        d="$root/$m"
        [ -f "$d/reference.json" ] || {
            rm -rf "$root"/*  # one checkpoint at a time: the next one needs the room
            python3 tests/full/full_step.py make --model $m --dir "$d" --pools "${FULL_POOLS:-bf16 fp8}" \
                > "$B/full/make-$m.log" 2>&1
        } || { echo "FAIL gpu:full[$m]: full_step.py make failed, see $B/full/make-$m.log"; continue; }
        for pool in ${FULL_POOLS:-bf16 fp8}; do
            run_test python3 tests/full/full_step.py check --model $m --dir "$d" \
                --binary "$B/g4pipe" --conf conf/gemma4-$m.ini --pool $pool \
                $sets \
                --log "$B/full/g4pipe-$m-$pool.stderr" --table "$B/full/table.jsonl"
        done
    done
}

# The engine against HF on few-layer models at the real head dims, KV heads, window (1024) and
# vocabulary of the 26B-A4B and 31B, made here with torch and transformers (never committed):
# window crossing at W-1, W, W+1 and 4W tokens, whole and chunked; the 16K and 32K waypoints.
geometry_gates() {
    if ! nvidia-smi -L >/dev/null 2>&1; then
        echo "SKIP gpu:geometry: skipped: no GPU (the geometry fixtures are made with torch on it)"; return
    fi
    if ! python3 -c 'import torch, transformers; assert torch.cuda.is_available()' 2>/dev/null; then
        echo "SKIP gpu:geometry: skipped: needs torch and transformers with a GPU"; return
    fi
    local g="$B/geometry" m mode e4m3_dumps=yes
    # the e4m3 reference dumps take minutes: made only when the e4m3kv gates will run
    case ",${G4_FIXTURE_GATES:-e4m3kv}," in *,e4m3kv,*) ;; *) e4m3_dumps=no ;; esac
    # GEOMETRY_MODELS picks a subset, GEOMETRY_WAYPOINTS= (empty) leaves the 16K/32K waypoints out
    # (one device call may not hold both models' runs)
    for m in ${GEOMETRY_MODELS:-26b-a4b 31b}; do
        [ -f "$g/geometry-$m/hf_sdpa.txt" ] ||
            python3 tests/fixtures/make_fixtures.py geometry --model $m --out "$g" \
                --waypoints "${GEOMETRY_WAYPOINTS-16384,32768}" > "$g.$m.log" 2>&1 ||
            { echo "FAIL gpu:geometry[$m]: make_fixtures.py failed, see $g.$m.log"; continue; }
        # GEOMETRY_MODES: gpu (bf16 pool), gpu-fp8 (kv.local = fp8 under docs/gates.md's fp8 rules)
        for mode in ${GEOMETRY_MODES:-gpu gpu-fp8}; do
            # under fp8, also HF with e4m3-stored sliding K/V (the fp8:*[f/hf-e4m3kv] gates)
            [ "$mode" != gpu-fp8 ] || [ "$e4m3_dumps" = no ] || [ -f "$g/geometry-$m/hf_sdpa_e4m3kv.txt" ] ||
                python3 tests/fixtures/make_fixtures.py e4m3kv --out "$g/geometry-$m" \
                    > "$g.$m.e4m3kv.log" 2>&1 ||
                echo "FAIL gpu:geometry[$m]: make_fixtures.py e4m3kv failed, see $g.$m.e4m3kv.log"
            run_test "$B/tests/test_fixtures" "$g" "$mode" "geometry-$m"
        done
    done
}

# The 26B-A4B at its real geometry with seeded random weights answers a token request.
dummy_weights() {
    if ! nvidia-smi -L >/dev/null 2>&1; then echo "SKIP gpu:dummy_weights: skipped: no GPU"; return; fi
    local out err
    out=$(echo '{"tokens":[2,10,20],"max_tokens":16}' | "$B/g4pipe" -c conf/gemma4-26b-a4b.ini \
          --set model.weights=dummy --set serve.max_context=4096 2> "$B/tests/dummy.stderr" ||
          echo "exit status $?")
    if [ "$(echo "$out" | grep -c '"event":"token"')" = 16 ] && echo "$out" | grep -q '"event":"done"' &&
       ! echo "$out" | grep -q '"event":"error"'; then
        echo "PASS gpu:dummy_weights: gemma4-26b-a4b, dummy weights: 16 token lines and a done line; $(grep -o 'device .*' "$B/tests/dummy.stderr" | head -1)"
    else
        echo "FAIL gpu:dummy_weights: $(echo "$out" | tail -2) $(tail -3 "$B/tests/dummy.stderr")"
    fi
}

# The last line a suite's producer prints: summarize fails a suite whose producer stopped before
# it (under set -e a failed command that is not a gate ends the producer, and every gate after
# it would vanish without a FAIL).
SUITE_END="INFO suite: every step ran"
summarize() { # reads gate lines on stdin, prints them, ends with the count line
    local log="$B/test.log"
    tee "$log"
    local p f s
    if ! grep -qx "$SUITE_END" "$log"; then
        echo "FAIL suite: stopped before its end (a step failed outside any gate: the last lines above say which)" |
            tee -a "$log"
    fi
    p=$(grep -c '^PASS ' "$log" || true); f=$(grep -c '^FAIL ' "$log" || true); s=$(grep -c '^SKIP ' "$log" || true)
    echo "$p passed, $f failed, $s skipped"
    [ "$f" = 0 ]
}

suite_test() {
    build_all
    build_tests
    {
        lint
        golden
        harness_self_test
        for t in $UNIT_TESTS; do run_test "$B/tests/$t" $(unit_args $t); done
        for t in $E2E_TESTS; do run_test "$B/tests/$t" $(e2e_args $t); done # test_trained: both pools
        # kv.local = fp8 on the random tiny fixtures: batch invariance (exact), the distribution
        # figures, and the engine against HF storing e4m3 the same way under the bf16 rules
        # (e4m3kv). The fp8 rules against bf16 HF are the trained fixtures' (test_trained above);
        # here they print SKIP lines (docs/testing.md)
        G4_FIXTURE_GATES=batch_invariance,distribution,e4m3kv run_test "$B/tests/test_fixtures" \
            tests/fixtures cpu-fp8
        BUILD_DIR="$B" run_test python3 tests/release/test_bench_driver.py
        BUILD_DIR="$B" run_test python3 tests/proto/test_batching.py
        BUILD_DIR="$B" run_test python3 tests/proto/test_process_edges.py
        BUILD_DIR="$B" run_test python3 tests/proto/test_startup_faults.py
        BUILD_DIR="$B" run_test python3 tests/proto/test_soak.py  # 10,000 requests, ~5 min
        BUILD_DIR="$B" run_test python3 tests/proto/test_pinned.py --backend cpu
        # serve.moe_branches off (on by default: the router and experts after the fork, the dense
        # MLP after them, buffers of their own, run in turn on the CPU) answers the same bytes
        BUILD_DIR="$B" PINNED_SET=serve.moe_branches=0 run_test python3 tests/proto/test_pinned.py \
            --backend cpu
        run_test python3 tests/full/test_judge.py
        run_test python3 tests/gpu/ab_table.py --self-test # the plans' A/B reader, on a sample
        plans_parse
        prebuilt_check
        fuzz_suite "${FUZZ_SECONDS:-20}"
        sanitized_suite
        trace_build_check
        cli_refusals
        musl_suite
        gpu_gates
        echo "$SUITE_END"
    } | summarize
}

suite_gpu() {
    # G4_PREBUILT=1: the full step or the pinned replays alone, on a carried $B/g4pipe (a device
    # call's build is ~150 s of scarce device time; those steps need the binary and Python, no
    # test program)
    local only_binary=1 s
    for s in "$@"; do [ "$s" = full ] || [ "$s" = pinned_composition ] || only_binary=0; done
    if [ "${G4_PREBUILT:-0}" = 1 ] && [ $# -gt 0 ] && [ $only_binary = 1 ] && [ -x "$B/g4pipe" ]; then
        say "G4_PREBUILT=1: $* on the carried $B/g4pipe, nothing built"
    else
        build_all
        build_tests
    fi
    { gpu_gates "$@"; echo "$SUITE_END"; } | summarize
}

case "${1:-build}" in
build) ensure_deps; build_all ;;
tests) ensure_deps; build_all; build_tests ;; # the test programs, nothing run
test) ensure_deps tools; suite_test ;;
gpu-test) shift; suite_gpu "$@" ;;
fuzz) ensure_deps; build_all; shift; { fuzz_suite "${1:-600}"; echo "$SUITE_END"; } | summarize ;;
bench)
    # figures, not pass/fail: the tokenizer, and decode on the GPU at the real geometry
    ensure_deps; build_all; build_tests
    "$B/tests/bench_tokenizer" "$SHARED_TOKENIZER" tests/tokenizer || true
    if nvidia-smi -L >/dev/null 2>&1; then
        for m in gemma4-26b-a4b gemma4-31b; do for bt in 1 4 16; do
            "$B/tests/bench_decode" -c conf/$m.ini --set model.weights=dummy \
                --set serve.max_context=4096 --batch $bt --prompt 1024 --steps 32 || true
        done; done
    else say "no GPU: decode figures need one"; fi ;;
format) hand_sources | xargs clang-format -i --style=file; say "formatted" ;;
lint) ensure_deps tools; generate; { lint; echo "$SUITE_END"; } | summarize ;;
deps) fill_deps ;;
debug)
    B=build/debug; INC="-I. -I$B/gen"; [ -d "$DEPS_ROOT/usr/include" ] && INC="$INC -I$DEPS_ROOT/usr/include"
    CFLAGS="$CFLAGS -O1 -fsanitize=address,undefined -fno-omit-frame-pointer"; HAVE_NVCC=0
    LINK_EXTRA="-fsanitize=address,undefined"  # link_bin and the test links take no CFLAGS
    build_all; build_tests; say "debug build in $B (the binary and the test programs)" ;;
trace)
    ensure_deps
    B=build/trace; INC="-I. -I$B/gen"; [ -d "$DEPS_ROOT/usr/include" ] && INC="$INC -I$DEPS_ROOT/usr/include"
    NVFLAGS="$NVFLAGS -DG4_KERNEL_TRACE"
    build_all; build_tests; say "kernel trace build in $B (bench_decode --trace)" ;;
release)
    ensure_deps; build_all
    mkdir -p release/out
    rev=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
    cp "$B/g4pipe" "release/out/g4pipe-$rev"
    say "release/out/g4pipe-$rev; its dynamic dependencies:"; ldd "release/out/g4pipe-$rev" >&2 || true ;;
*) echo "usage: $0 [build|test|gpu-test [GATE...]|format|lint|release|debug|trace|deps]" >&2; exit 2 ;;
esac
