#!/bin/sh
# The replication decision core (src/repl/rsm*.c, issue 34) does no I/O: it calls neither
# etcd (mqd_etcd_*), Proton (pn_*), the store (mqd_plog_*, mqd_store_*), the clock
# (clock_gettime, time(), gettimeofday, mqd_now*) nor the logger (mqd_log*, MQD_LOG/INFO/
# NOTICE/WARN/ERROR). Its driver gives it events and performs its actions.
srcdir=${MQD_SRCDIR:-$(dirname "$0")/../..}
files=$(ls "$srcdir"/src/repl/rsm*.c "$srcdir"/src/repl/rsm*.h 2>/dev/null)
if [ -z "$files" ]; then
    echo "rsm-pure: no src/repl/rsm*.c found under $srcdir" >&2
    exit 1
fi
pattern='\b(mqd_etcd_[a-z_]*|pn_[a-z_]*|mqd_plog_[a-z_]*|mqd_store_[a-z_]*|clock_gettime|gettimeofday|time|mqd_now[a-z_]*|mqd_log[a-z_]*|MQD_(LOG|DEBUG|INFO|NOTICE|WARN|ERROR))[[:space:]]*\('
# comments and strings do not count: the C preprocessor drops comments (-fpreprocessed:
# no include or macro expanded), then string literals are blanked
bad=$(for f in $files; do
    gcc -fpreprocessed -dD -E -P -x c "$f" 2>/dev/null | sed -e 's/"[^"]*"/""/g' |
        grep -E "$pattern" | sed "s@^@$f: @"
done)
if [ -n "$bad" ]; then
    echo "rsm-pure: the decision core calls I/O, the clock or the logger:" >&2
    echo "$bad" >&2
    exit 1
fi
echo "rsm-pure: $(echo $files | wc -w) files clean"
