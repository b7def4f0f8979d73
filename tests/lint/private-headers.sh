#!/bin/sh
# Issue 18: no struct of another subsystem read by field. A subsystem's internals
# (<subsys>/<subsys>_int.h: core_int.h holds the bodies of the server, connection, topic,
# partition and link-state structs) are included only by that subsystem's own files;
# everything else goes through its public header, so the compiler refuses a field read
# across the line. Fails naming each file that includes another directory's *_int.h.
srcdir=${MQD_SRCDIR:-$(dirname "$0")/../..}
cd "$srcdir/src" || exit 2
bad=0
for f in */*.c */*.h; do
    own=${f%%/*}
    for inc in $(sed -n 's/^#include "\([a-z_]*\)\/[a-z_]*_int\.h".*/\1/p' "$f"); do
        if [ "$inc" != "$own" ]; then
            echo "src/$f includes $inc's internals ($inc/*_int.h)"
            bad=1
        fi
    done
done
n=$(ls */*.c */*.h | wc -l)
[ $bad = 0 ] && echo "private-headers: $n files, none includes another subsystem's internals"
exit $bad
