#!/usr/bin/python3
"""`make install DESTDIR=...` from $MQD_BUILDDIR lays out the programs, the config, the
systemd unit (paths substituted) and the man pages; `systemd-analyze verify` accepts the
unit when systemd-analyze is installed (Debian package `systemd`)."""

import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdtest import check, log  # noqa: E402


def make_var(builddir, name):
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    out = subprocess.run(["make", "-s", "-C", builddir, "--no-print-directory", "-f", "Makefile", "-f", "-",
                          "print-var"], input="print-var:\n\t@echo $(%s)\n" % name,
                         stdout=subprocess.PIPE, text=True, timeout=60, env=env).stdout.strip()
    return out.splitlines()[-1] if out else ""


def body(t):
    builddir = os.environ.get("MQD_BUILDDIR")
    if not builddir or not shutil.which("make"):
        mqdtest.skip("needs MQD_BUILDDIR and make")
    dest = os.path.join(t.tmpdir, "root")
    # run from `make check`: do not join the outer make's jobserver
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    p = subprocess.run(["make", "-C", builddir, "install", "DESTDIR=" + dest], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=600, env=env)
    check(p.returncode == 0, "make install failed:\n%s" % p.stdout.decode()[-4000:])
    d = {k: make_var(builddir, k) for k in ("sbindir", "bindir", "sysconfdir", "mandir",
                                            "systemdsystemunitdir")}
    log("dirs: %r" % d)
    want = [d["sbindir"] + "/mqd", d["bindir"] + "/mqctl", d["bindir"] + "/mqd-passwd",
            d["sysconfdir"] + "/mqd.conf", d["systemdsystemunitdir"] + "/mqd.service",
            d["mandir"] + "/man8/mqd.8", d["mandir"] + "/man5/mqd.conf.5",
            d["mandir"] + "/man1/mqctl.1", d["mandir"] + "/man1/mqd-passwd.1"]
    for f in want:
        check(os.path.isfile(dest + f), "not installed: %s" % f)
    for f in want[:3]:
        check(os.access(dest + f, os.X_OK), "not executable: %s" % f)
    unit = open(dest + d["systemdsystemunitdir"] + "/mqd.service").read()
    check(not re.search(r"@[a-z_]+@", unit), "unsubstituted placeholder in the unit")
    check("ExecStart=%s/mqd --foreground -c %s/mqd.conf" % (d["sbindir"], d["sysconfdir"]) in unit,
          "ExecStart line")
    check("Type=notify" in unit, "Type=notify")
    sa = shutil.which("systemd-analyze")
    if not sa:
        log("systemd-analyze not installed: unit verification skipped (install Debian's `systemd`)")
        return
    # verify against the installed tree: ExecStart must name an existing executable
    unitcopy = os.path.join(t.tmpdir, "mqd.service")
    with open(unitcopy, "w") as f:
        f.write(unit.replace(d["sbindir"] + "/mqd", dest + d["sbindir"] + "/mqd")
                    .replace(d["sysconfdir"] + "/mqd.conf", dest + d["sysconfdir"] + "/mqd.conf"))
    p = subprocess.run([sa, "verify", "--man=no", unitcopy], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=120, env=dict(os.environ, SYSTEMD_LOG_LEVEL="warning"))
    out = p.stdout.decode()
    log("systemd-analyze verify: %d %s" % (p.returncode, out))
    # man: pages cannot be found in a DESTDIR (--man=no); everything else must be clean
    bad = [ln for ln in out.splitlines() if ln.strip() and "man " not in ln and "Documentation" not in ln]
    check(p.returncode == 0 or not bad, "systemd-analyze verify: %s" % out)
    check(not bad, "systemd-analyze verify complained: %s" % "\n".join(bad))


mqdtest.main(body, timeout=900)
