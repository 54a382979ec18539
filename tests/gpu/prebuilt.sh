#!/usr/bin/env bash
# tests/gpu/prebuilt.sh - the GPU build's objects made here, carried to the device machine so a
# short call links instead of compiling (~3 min of nvcc on its 16 cores, the most of a call's
# build). The objects are only good for the tree they were built from: pack right after
# `./build.sh tests` with nothing edited since.
#   prebuilt.sh pack     here: build/obj and build/gen into .prebuilt/objs.tar.xz (~11 MB; carry
#                        .prebuilt, ignored by git)
#   prebuilt.sh unpack   there, before the build: unpacks them and stamps every file with one
#                        time, later than the copied sources', so build.sh's staleness test
#                        (an object older than its source or any header) keeps them; the
#                        device copy need not keep the files' times
set -eu
case ${1:-} in
pack)
    [ -d build/obj ] && [ -d build/gen ] || { echo "no build/obj or build/gen: ./build.sh tests first"; exit 2; }
    mkdir -p .prebuilt
    tar cf - build/obj build/gen | xz -T0 -6 > .prebuilt/objs.tar.xz
    echo "packed $(du -h .prebuilt/objs.tar.xz | cut -f1) into .prebuilt/objs.tar.xz"
    ;;
unpack)
    [ -f .prebuilt/objs.tar.xz ] || { echo "no .prebuilt/objs.tar.xz: the build compiles everything"; exit 0; }
    xz -dc .prebuilt/objs.tar.xz | tar xf -
    stamp=$(( $(date +%s) + 2 ))
    find build/obj build/gen -type f -exec touch -d "@$stamp" {} +
    echo "unpacked $(find build/obj -name '*.o' | wc -l) objects, stamped $(date -d "@$stamp" +%T)"
    ;;
*) echo "usage: prebuilt.sh pack|unpack"; exit 2 ;;
esac
