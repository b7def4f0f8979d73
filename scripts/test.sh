#!/bin/bash
# Sets up (scripts/setup.sh), then runs every test: unit (cmocka), fault (SIGKILL),
# fuzz-corpus replay and interop (real clients against a real mqd).
#   scripts/test.sh [--sanitizers]
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh "$@" || exit 1
builddir=build; label=tests
# ASan + UBSan run at about a third of the speed: stretch every test's waits
[ "${1:-}" = "--sanitizers" ] && builddir=build-san && label=sanitizers && export MQD_TEST_SLOW=${MQD_TEST_SLOW:-2}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
make -C "$builddir" -j2 -s check >"$builddir/check.out" 2>&1
rc=$?
grep -E '^(PASS|FAIL|XFAIL|XPASS|SKIP|ERROR):' "$builddir/check.out" || true
if [ $rc -ne 0 ]; then
    for f in $(grep -lE '^:test-result: (FAIL|ERROR)' $(find "$builddir/tests" -name '*.trs') 2>/dev/null); do
        echo "===== ${f%.trs}.log"
        grep -E '^(FAIL|SKIP):|case .* FAILED|^NOTE:' "${f%.trs}.log" | head -n 20
        echo "----- its last 60 lines:"; tail -n 60 "${f%.trs}.log"
    done
fi
pass=$(grep -c '^PASS:' "$builddir/check.out")
fail=$(grep -cE '^(FAIL|ERROR|XPASS):' "$builddir/check.out")
skip=$(grep -c '^SKIP:' "$builddir/check.out")
echo "$pass $fail $skip" > "$builddir/check.counts"
echo "$label: $pass passed, $fail failed, $skip skipped"
exit $rc
