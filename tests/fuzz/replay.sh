#!/bin/bash
# Replays one fuzz target's corpus (and its past crashes) as an ordinary test.
# usage: replay.sh <target>    (msg | addr); make check exports MQD_SRCDIR/MQD_BUILDDIR.
set -eu
target=$1
: "${MQD_SRCDIR:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${MQD_BUILDDIR:=$PWD}"
exec "$MQD_BUILDDIR/tests/fuzz/replay_$target" "$MQD_SRCDIR/tests/fuzz/corpus/fuzz_$target"
