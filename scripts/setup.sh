#!/bin/bash
# Installs the build and test dependencies (Debian 12), then builds mqd out of tree.
#   scripts/setup.sh                 -> build/        (dev build, -Werror)
#   scripts/setup.sh --sanitizers    -> build-san/    (ASan + UBSan)
# Safe to run again: it only redoes what is missing or out of date.
set -euo pipefail
cd "$(dirname "$0")/.."
top=$PWD
builddir=build
cfgflags=()
if [ "${1:-}" = "--sanitizers" ]; then
    builddir=build-san
    cfgflags=(--enable-sanitizers)
fi

pkgs=(build-essential autoconf automake pkg-config
      libqpid-proton11-dev libevent-dev libsqlite3-dev libssl-dev libcmocka-dev libjansson-dev
      libqpid-proton11-dev-examples   # tests/interop/163-fwd-proton-c.py builds its C send.c / receive.c
      librabbitmq-dev python3-pika python3-kombu amqp-tools   # src/amqp091 (codec) and its tests 140-143
      python3 python3-qpid-proton python3-uamqp socat stunnel4 openssl nodejs npm
      fuse3 libfuse3-dev   # powercutfs (tests/fault): the power-cut crash tests
      etcd-server   # tests/interop/70-etcd-membership.py: a real etcd 3.4 for cluster = etcd
      iproute2 nftables   # tests/interop/95-repl-netpart.py: network namespaces, veths, nft drop rules
      chromium chromium-driver   # tests/interop/85-console-browser.py: the web console in a real browser
      prometheus   # promtool: tests/interop/150-alert-rules.py runs `promtool test rules` on contrib/prometheus
      systemd procps)   # systemd-analyze verifies the unit in tests/interop/33-install.py; procps: the tests' pgrep/ps
# node may come from elsewhere on the image (the CI image ships its own): don't fight it
if command -v node >/dev/null && command -v npm >/dev/null; then
    pkgs=("${pkgs[@]/nodejs}"); pkgs=("${pkgs[@]/npm}")
fi
if [ "${1:-}" = "--print-packages" ]; then
    echo ${pkgs[@]}
    exit 0
fi
missing=()
for p in "${pkgs[@]}"; do
    [ -n "$p" ] || continue
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
    sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -q
    # shellcheck disable=SC2068
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends ${missing[@]}
fi

if [ -f tests/interop/node/package.json ] && { [ ! -d tests/interop/node/node_modules/rhea ] || [ ! -d tests/interop/node/node_modules/@azure/event-hubs ] ||
                                          [ ! -d tests/interop/node/node_modules/amqplib ]; }; then
    (cd tests/interop/node && npm install --no-audit --no-fund --loglevel=error) ||
        echo "setup: npm install failed; the rhea tests will be skipped" >&2
fi

[ -x configure ] && [ configure -nt configure.ac ] || ./autogen.sh >/dev/null
mkdir -p "$builddir"
cd "$builddir"
[ -f config.status ] || "$top/configure" -q "${cfgflags[@]}"
make -j"$(nproc)" -s
make -j"$(nproc)" -s check TESTS= >/dev/null   # build the test programs too
