#!/usr/bin/env bash
# tests/gpu/prebuilt.sh - the GPU build's objects made here, carried to the device machine so a
# short call links instead of compiling (nvcc over every kernel on its 16 cores, the most of a
# call's build). The objects are only good for the sources they were built from: pack right after
# `./build.sh tests`; pack records a digest of those sources, and unpack refuses (the build then
# compiles everything, as without this) where the tree it lands in differs.
#   prebuilt.sh pack [OBJ...]
#                        here: build/obj and build/gen into .prebuilt/objs.tar.xz (carry
#                        .prebuilt, ignored by git), and the sources' digest beside them; with
#                        names (build/obj's files, e.g. kernels_attn_mma.cu.o), only those objects
#                        (and build/obj/flags). The attention parts are most of the box's nvcc
#                        time; with them packed the box's build takes ~115-140 s, and packing all
#                        18 CUDA objects (14 MB, forty-sixth session) left it at 130 s: the rest
#                        is the links and the C compiles, which no pack removes
#   prebuilt.sh unpack   there, before the build: unpacks them and stamps every file with one
#                        time, later than the copied sources', so build.sh's staleness test
#                        (an object older than its source or any header) keeps them; the
#                        device copy need not keep the files' times
set -eu
# what the objects are built from: the sources, headers and model descriptions, and build.sh (its
# flags); a digest over their contents, so a copy elsewhere gives the same one
digest() {
    find runtime graph kernels codegen tests -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' \
        -o -name '*.cuh' -o -name '*.ini' \) -print0 | LC_ALL=C sort -z | xargs -0 sha256sum |
        cat - <(sha256sum build.sh) | sha256sum | cut -d' ' -f1
}
case ${1:-} in
pack)
    [ -d build/obj ] && [ -d build/gen ] || { echo "no build/obj or build/gen: ./build.sh tests first"; exit 2; }
    mkdir -p .prebuilt
    shift
    files="build/obj build/gen"
    if [ $# -gt 0 ]; then
        files="build/obj/flags build/gen"
        for o in "$@"; do
            [ -f "build/obj/$o" ] || { echo "no build/obj/$o"; exit 2; }
            files="$files build/obj/$o"
            [ -f "build/obj/$o.log" ] && files="$files build/obj/$o.log"
        done
    fi
    # shellcheck disable=SC2086 # the names are build/obj's own, without spaces
    tar cf - $files | xz -T0 -6 > .prebuilt/objs.tar.xz
    digest > .prebuilt/sources.sha256
    echo "packed $(du -h .prebuilt/objs.tar.xz | cut -f1) into .prebuilt/objs.tar.xz"
    ;;
unpack)
    [ -f .prebuilt/objs.tar.xz ] || { echo "no .prebuilt/objs.tar.xz: the build compiles everything"; exit 0; }
    if [ "$(cat .prebuilt/sources.sha256 2>/dev/null)" != "$(digest)" ]; then
        echo "the sources differ from those the objects were packed from: not unpacked, the build compiles everything"
        exit 0
    fi
    xz -dc .prebuilt/objs.tar.xz | tar xf -
    stamp=$(( $(date +%s) + 2 ))
    find build/obj build/gen -type f -exec touch -d "@$stamp" {} +
    echo "unpacked $(find build/obj -name '*.o' | wc -l) objects, stamped $(date -d "@$stamp" +%T)"
    ;;
*) echo "usage: prebuilt.sh pack [OBJ...] | unpack"; exit 2 ;;
esac
