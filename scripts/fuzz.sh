#!/bin/bash
# Builds every libFuzzer target with clang (ASan + UBSan) and runs each for a bounded time
# on a copy of its committed corpus. New inputs stay in the scratch dir; a crash stops the
# run with the crashing input's path (fix it, then add it to tests/fuzz/corpus/TARGET/).
#   scripts/fuzz.sh [SECONDS_PER_TARGET]      (default 20; needs build/config.h: run setup.sh)
#   MQD_FUZZ_TARGETS="fuzz_conn" scripts/fuzz.sh 600    (some targets only)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-20}
if ! command -v clang >/dev/null || ! ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then
    sudo=""; [ "$(id -u)" -ne 0 ] && sudo=sudo
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends clang libclang-rt-14-dev
fi
[ -f build/config.h ] || scripts/setup.sh
[ -f build/src/console/ui_files.c ] || make -C build src/console/ui_files.c
out=$(mktemp -d /tmp/mqd-fuzz.XXXXXX)
trap 'rm -rf "$out"' EXIT
cflags=(-g -O1 -fsanitize=fuzzer,address,undefined -Isrc -Ibuild -DMQD_SYSCONFDIR='"/etc"' -DMQD_LOCALSTATEDIR='"/var"')
u=(src/util/log.c src/util/misc.c src/util/crc32c.c src/util/sdnotify.c src/util/hist.c)
declare -A srcs=(
    [fuzz_msg]="src/codec/msg.c"
    [fuzz_addr]="src/route/route.c"
    [fuzz_selector]="src/codec/selector.c src/codec/msg.c"
    [fuzz_store]="$(echo src/store/*.c)"
    [fuzz_mgmt]="src/mgmt/mgmt_json.c src/mgmt/mgmt_parse.c src/codec/msg.c"
    [fuzz_conf]="$(echo src/conf/conf*.c | sed 's#src/conf/conf_gen.c##')"
    [fuzz_framepeek]="src/codec/framepeek.c"
    [fuzz_gate]="src/auth/gate.c"
    [fuzz_sas]="src/auth/sas.c"
    [fuzz_etcd]="src/cluster/etcd_json.c src/cluster/etcd_parse.c src/cluster/member_json.c"
    [fuzz_raw]="$(echo src/store/*.c)"
    [fuzz_scramc]="src/tools/scram_client.c"
    [fuzz_console]="src/console/parse.c"
    [fuzz_repl]="src/repl/wire.c src/repl/pstate.c src/repl/hwck_file.c"
    [fuzz_sbus]="src/mgmt/mgmt_sbus_args.c src/codec/msg.c"
    [fuzz_amqp091]="src/amqp091/frame.c src/amqp091/match.c"
    # the whole broker; the console's pages are a generated file of the build (make)
    [fuzz_conn]="$(ls src/*/*.c | grep -v -e '^src/tools/' -e '^src/util/' -e '^src/conf/conf_gen.c$') build/src/console/ui_files.c"
)
libs=(-lqpid-proton -ljansson -lssl -lcrypto -levent_core -levent_pthreads -levent -lsqlite3 -lrabbitmq -lpthread -lm)
total=0
for t in ${MQD_FUZZ_TARGETS:-fuzz_msg fuzz_addr fuzz_selector fuzz_store fuzz_mgmt fuzz_conf fuzz_framepeek fuzz_gate fuzz_sas fuzz_etcd fuzz_raw fuzz_scramc fuzz_console fuzz_repl fuzz_sbus fuzz_amqp091 fuzz_conn}; do
    # shellcheck disable=SC2086
    clang "${cflags[@]}" tests/fuzz/$t.c ${srcs[$t]} "${u[@]}" "${libs[@]}" -o "$out/$t"
    corpus=tests/fuzz/corpus/$t
    [ -d "$corpus" ] || corpus=tests/unit/conf/corpus
    mkdir -p "$out/new-$t"
    log="$out/$t.log"
    if ! (cd "$out" && ASAN_OPTIONS=detect_leaks=1 ./$t -max_total_time="$secs" -timeout=10 \
            -rss_limit_mb=2048 "new-$t" "$OLDPWD/$corpus" >"$log" 2>&1); then
        tail -n 40 "$log"
        echo "fuzz: $t FAILED (input saved under $out, kept)"; trap - EXIT
        exit 1
    fi
    runs=$(grep -o 'Done [0-9]* runs' "$log" | grep -o '[0-9]*' || echo 0)
    total=$((total + runs))
    echo "fuzz: $t ok, $runs executions in ${secs}s"
done
echo "fuzz: all targets ok, $total executions"
