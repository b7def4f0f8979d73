#!/bin/bash
# The Debian package test (issue 21): builds mqd_*.deb from this tree with
# `dpkg-buildpackage -us -uc -b`, checks it with lintian (no errors), installs it with apt
# into a fresh minimal Debian 12 chroot (debootstrap --variant=minbase) and checks there:
# the layout, /etc/mqd.conf as a conffile with mode 0640 root:mqd, the mqd system user,
# `mqd --check-config` on the installed config, and that a user made with mqd-passwd logs
# in with mqctl (SCRAM-SHA-256, what the installed config offers without TLS) against a
# broker running as that user on the installed config, while a wrong password is refused.
#
#   scripts/deb-test.sh            (as root, from anywhere in the tree; needs the archive)
#
# Env: MQD_DEB_BASE (the minbase chroot to copy; default /var/tmp/fresh-debian-base, made
# by debootstrap when absent), MQD_DEB_DIR (work dir, default a new /tmp/mqd-deb-XXXXXX,
# removed on success). Prints one line per check and "deb-test: N passed, M failed".
set -u
src=$(cd "$(dirname "$0")/.." && pwd)
[ "$(id -u)" = 0 ] || { echo "deb-test: needs root (chroot, mounts)"; exit 2; }
W=${MQD_DEB_DIR:-$(mktemp -d /tmp/mqd-deb-XXXXXX)}
base=${MQD_DEB_BASE:-/var/tmp/fresh-debian-base}
root=$W/root
pass=0 fail=0
ok() { echo "ok: $*"; pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }
check() { local what=$1; shift; if "$@"; then ok "$what"; else bad "$what"; fi; }
apt_install() {
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" >>"$W/apt.log" 2>&1
}
mounted=""
cleanup() {
    [ -n "${mqd_pid:-}" ] && kill -KILL "$mqd_pid" 2>/dev/null
    for m in $mounted; do umount "$m" 2>/dev/null; done
}
trap cleanup EXIT

# ---- build ----
need=()
for p in dpkg-dev debhelper lintian debootstrap; do
    dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
    apt_install "${need[@]}" || { echo "deb-test: cannot install ${need[*]} (see $W/apt.log)"; exit 2; }
fi
tree=$W/mqd-0.1.0
mkdir -p "$tree"
git -C "$src" ls-files --cached --others --exclude-standard -z |
    (cd "$src" && tar --null -T - -cf -) | tar -xf - -C "$tree"
# the build dependencies, as Build-Depends names them
deps=$(cd "$tree" && dpkg-checkbuilddeps 2>&1 | sed -n 's/.*Unmet build dependencies: //p' |
       sed -E 's/\([^)]*\)//g; s/\|[^ ]*//g')
[ -n "$deps" ] && apt_install $deps
t0=$(date +%s)
(cd "$tree" && dpkg-buildpackage -us -uc -b) >"$W/build.log" 2>&1
rc=$?
check "dpkg-buildpackage -us -uc -b (exit $rc, $(($(date +%s) - t0)) s; log $W/build.log)" test $rc = 0
deb=$(ls "$W"/mqd_*_*.deb 2>/dev/null | head -1)
if [ -z "$deb" ]; then
    echo "deb-test: $pass passed, $((fail + 1)) failed (no package built)"
    exit 1
fi
echo "package: $(basename "$deb") ($(stat -c %s "$deb") bytes)"
lintian --tag-display-limit 0 "$W"/mqd_*.changes >"$W/lintian.log" 2>&1
nerr=$(grep -c '^E: ' "$W/lintian.log")
check "lintian: 0 errors (got $nerr; $(grep -c '^W: ' "$W/lintian.log") warnings)" test "$nerr" = 0
grep -E '^[EW]: ' "$W/lintian.log" | sed 's/^/  lintian /'

# ---- install into a fresh minimal Debian 12 ----
if [ ! -x "$base/bin/bash" ]; then
    mirror=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null)
    debootstrap --variant=minbase bookworm "$base" ${mirror:+"$mirror"} >"$W/debootstrap.log" 2>&1 ||
        { echo "deb-test: debootstrap failed (see $W/debootstrap.log)"; exit 2; }
fi
cp -a "$base" "$root"
cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null
cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/" 2>/dev/null
mount -t proc proc "$root/proc" && mounted="$root/proc"
mount --bind /dev "$root/dev" && mounted="$root/dev $mounted"
cp "$deb" "$root/tmp/"
in_root() { chroot "$root" /bin/sh -c "$1"; }
in_root "apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q /tmp/$(basename "$deb")" \
    >"$W/install.log" 2>&1
rc=$?
check "apt-get install ./$(basename "$deb") in a minbase chroot (exit $rc; log $W/install.log)" test $rc = 0
for f in /usr/sbin/mqd /usr/bin/mqctl /usr/bin/mqd-passwd /usr/bin/mqd-bench \
         /lib/systemd/system/mqd.service /usr/share/man/man8/mqd.8.gz \
         /usr/share/man/man5/mqd.conf.5.gz /usr/share/man/man1/mqctl.1.gz \
         /usr/share/man/man1/mqd-passwd.1.gz /usr/share/doc/mqd/copyright; do
    check "installed $f" test -f "$root$f"
done
# the docs the README links and the contrib/ rules and dashboards (dh_compress may gzip them)
for f in console.md replication.md eventhubs.md operations.md contrib/prometheus/mqd-alerts.yml \
         contrib/prometheus/mqd-alerts.test.yml contrib/grafana/mqd-broker.json; do
    check "installed /usr/share/doc/mqd/$f" test -f "$root/usr/share/doc/mqd/$f" -o -f "$root/usr/share/doc/mqd/$f.gz"
done
check "/etc/mqd.conf is a conffile" in_root "dpkg-query -W -f='\${Conffiles}' mqd | grep -q '^ /etc/mqd.conf '"
perm=$(in_root "stat -c '%a %U:%G' /etc/mqd.conf")
check "/etc/mqd.conf mode and owner: 640 root:mqd (got $perm)" test "$perm" = "640 root:mqd"
check "system user mqd in group mqd" in_root "id -gn mqd | grep -qx mqd"
unit=$(grep -E '^(ExecStart|ExecStartPre)=' "$root/lib/systemd/system/mqd.service" | tr '\n' ' ')
check "the unit runs /usr/sbin/mqd on /etc/mqd.conf ($unit)" \
    sh -c "echo '$unit' | grep -q 'ExecStart=/usr/sbin/mqd --foreground -c /etc/mqd.conf'"
out=$(in_root "runuser -u mqd -- /usr/sbin/mqd --check-config -c /etc/mqd.conf" 2>&1)
rc=$?
check "mqd --check-config on the installed config, as user mqd (exit $rc: $out)" test $rc = 0

# ---- a user made with mqd-passwd logs in with mqctl ----
pw="deb-test-$$-pw"
in_root "printf '%s\n' '$pw' | mqd-passwd alice >> /etc/mqd.conf"
check "mqd-passwd alice >> /etc/mqd.conf keeps the config valid" \
    in_root "runuser -u mqd -- /usr/sbin/mqd --check-config -c /etc/mqd.conf >/dev/null 2>&1"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
in_root "mkdir -p /var/lib/mqd && chown mqd:mqd /var/lib/mqd"
# chroot --userspec execs mqd itself (runuser would stay as its parent): $! is mqd
chroot --userspec=mqd:mqd "$root" /usr/sbin/mqd -c /etc/mqd.conf -l "127.0.0.1:$port" \
    -d /var/lib/mqd >"$W/mqd.log" 2>&1 &
mqd_pid=$!
up=no
for _ in $(seq 1 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then up=yes; break; fi
    sleep 0.1
done
check "mqd runs as user mqd on the installed config (listening on $port)" test $up = yes
out=$(in_root "mqctl --url amqp://alice:$pw@127.0.0.1:$port --json topic create deb-t --partitions 2" 2>&1)
check "mqctl as alice (SCRAM-SHA-256): topic create deb-t" \
    python3 -c "import json,sys; sys.exit(0 if json.loads(sys.argv[1])['name']=='deb-t' else 1)" "$out"
out=$(in_root "mqctl --url amqp://alice:$pw@127.0.0.1:$port --json topic list" 2>&1)
check "mqctl as alice: topic list shows deb-t with 2 partitions" \
    python3 -c "import json,sys; t=[x for x in json.loads(sys.argv[1]) if x['name']=='deb-t']; sys.exit(0 if t and t[0]['partitions']==2 else 1)" "$out"
out=$(in_root "mqctl --url amqp://alice:wrong@127.0.0.1:$port topic list" 2>&1)
rc=$?
check "mqctl with a wrong password is refused (exit $rc)" test $rc != 0
grep -q 'SASL refused .*user=alice' "$W/mqd.log" && ok "the broker logged the refused login" ||
    bad "the broker logged nothing of the refused login"
kill -TERM "$mqd_pid" 2>/dev/null
for _ in $(seq 1 100); do kill -0 "$mqd_pid" 2>/dev/null || break; sleep 0.1; done
wait "$mqd_pid" 2>/dev/null
rc=$?
mqd_pid=""
check "mqd stopped on SIGTERM (exit $rc)" test $rc = 0
out=$(in_root "DEBIAN_FRONTEND=noninteractive apt-get purge -y -q mqd" 2>&1)
check "apt-get purge mqd removes the user (data dir kept)" \
    sh -c "! chroot '$root' getent passwd mqd >/dev/null && test -d '$root/var/lib/mqd'"

echo "deb-test: $pass passed, $fail failed (work dir $W)"
if [ $fail = 0 ] && [ -z "${MQD_DEB_DIR:-}" ]; then
    cleanup; trap - EXIT; rm -rf "$W"
fi
[ $fail = 0 ]
