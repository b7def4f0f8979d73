#!/bin/sh
# Issue 18: which files outside src/core still read core's structs by field. Each file
# given (default: every .c of the subsystems above core) is
# compiled with -DMQD_OPAQUE, which hides the struct bodies (core/core_int.h); the ones
# that fail are printed with their first errors. Exit 1 when any fails.
# Usage: scripts/opaque-check.sh [-q] [FILE...]   (from the source tree's top)
quiet=0
[ "$1" = "-q" ] && { quiet=1; shift; }
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top" || exit 2
cfg=$(ls build/config.h config.h 2>/dev/null | head -1)
[ -n "$cfg" ] || { echo "opaque-check: no config.h (run scripts/setup.sh first)" >&2; exit 2; }
flags="-Isrc -I$(dirname "$cfg") $(pkg-config --cflags libqpid-proton libevent_core jansson sqlite3 libssl) -D_GNU_SOURCE -DMQD_OPAQUE -fsyntax-only -Werror=incompatible-pointer-types -Werror=int-conversion -Werror=implicit-function-declaration"
[ $# -gt 0 ] || set -- $(ls src/*/*.c | grep -v '^src/\(core\|store\|util\|conf\|meta\|codec\|route\|cluster\|tools\)/')
bad=0
for f in "$@"; do
    out=$(${CC:-gcc} $flags "$f" 2>&1) && continue
    bad=$((bad + 1))
    n=$(printf '%s\n' "$out" | grep -c 'error:')
    echo "$f: $n errors"
    [ $quiet = 1 ] || printf '%s\n' "$out" | grep 'error:' | head -5 | sed 's/^/    /'
done
[ $bad = 0 ] && echo "opaque-check: $# files, none reads core's structs by field"
[ $bad = 0 ]
