#!/usr/bin/python3
"""Issue 21 point 8: the man pages, --help, the sample config and the install agree with
the binaries.

- `mqd --help` and the installed mqd(8) name the same default config file; every
  option of --help (short and long) is in mqd(8) and works (`mqd -t -c F -d D`);
- mqd(8) says Type=notify like the unit, and says what --foreground really does;
- SEE ALSO of each page names the other pages;
- every commented-out key of etc/mqd.conf shows the default its own header states, and
  a broker on built-in defaults reports those values for the topic keys;
- mqctl takes global options after the command (`topic list --json`) and names the
  option whose value is missing;
- `make install DESTDIR=...` writes nothing outside the prefix (the unit included) and
  installs mqd.conf, which holds password hashes, with mode 0640;
- issue 38 point 8: every command of `mqctl --help` is in mqctl(1); mqctl(1)'s EXIT
  STATUS lists 0..7 and operations.md the login (6) and right (7) refusals, not "PLAIN";
  every metric family of a running mqd's /metrics is named in docs/operations.md; the
  columns of group describe and link list are each described in mqctl(1); mqd(8) gives
  mqd-passwd's iteration defaults and mqd.conf(5)'s [user NAME] names SCRAM."""

import json
import os
import re
import shutil
import stat
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdtest import Collect, check, log  # noqa: E402

SLOW = mqdtest.SLOW
SRC = os.environ.get("MQD_SRCDIR") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
BUILD = os.environ.get("MQD_BUILDDIR", "")
PAGES = {"mqd.8": "mqd(8)", "mqd.conf.5": "mqd.conf(5)", "mqctl.1": "mqctl(1)", "mqd-passwd.1": "mqd-passwd(1)"}


def run(argv, **kw):
    p = subprocess.run(argv, capture_output=True, text=True, timeout=60 * SLOW, **kw)
    return p.returncode, p.stdout, p.stderr


def man_text(path):
    """roff with the escapes that matter here undone: \\- is -, fonts dropped."""
    t = open(path).read()
    return re.sub(r"\\f[BIRP]", "", t).replace("\\-", "-")


def make_env():
    return {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}


def make_var(name):
    out = subprocess.run(["make", "-s", "-C", BUILD, "--no-print-directory", "-f", "Makefile", "-f", "-",
                          "print-var"], input="print-var:\n\t@echo $(%s)\n" % name,
                         stdout=subprocess.PIPE, text=True, timeout=60, env=make_env()).stdout.strip()
    return out.splitlines()[-1] if out else ""


def case_help_and_man(t, coll):
    rc, helptext, _ = run([mqdtest.mqd_bin(), "--help"])
    check(rc == 0, "mqd --help: exit %d" % rc)
    page = os.path.join(BUILD, "mqd.8")
    if not os.path.isfile(page):  # before the installed pages were generated
        page = os.path.join(SRC, "man", "mqd.8")
    man = man_text(page)
    with coll.case("--help and the installed mqd(8) name the same default config"):
        m = re.search(r"configuration file \(default (\S+)\)", helptext)
        check(m, "--help names no default config: %r" % helptext)
        path = m.group(1)
        check(path == make_var("sysconfdir") + "/mqd.conf", "--help default %s, sysconfdir %s" % (path, make_var("sysconfdir")))
        check("instead of\n.IR %s ." % path in man, "mqd(8) does not name %s as the default" % path)
        for p in PAGES:
            other = [ln for ln in man_text(os.path.join(os.path.dirname(page), p)).splitlines()
                     if re.search(r"(?<![\w/])/etc/mqd\.conf", ln)]
            if not path.startswith("/etc/"):
                check(not other, "%s still names /etc: %r" % (p, other[:2]))
    with coll.case("every option of --help is in mqd(8), short and long"):
        pairs = re.findall(r"^\s+(-\w), (--[\w-]+)", helptext, re.M)
        check(len(pairs) >= 8, "--help lists %d options: %r" % (len(pairs), pairs))
        opts = man.split(".SH OPTIONS")[1].split(".SH ")[0]
        for short, long_ in pairs:
            check(re.search(r"^\.B[IR]? %s\b.*%s" % (re.escape(short), re.escape(long_)), opts, re.M),
                  "mqd(8) OPTIONS lacks %s, %s" % (short, long_))
        for long_ in set(re.findall(r"(--[a-z][\w-]+)", opts)):
            check(long_ in helptext, "mqd(8) documents %s, which --help lacks" % long_)
    with coll.case("the short options work"):
        conf = os.path.join(t.tmpdir, "short.conf")
        with open(conf, "w") as f:
            f.write("log_level = warn\n")
        rc, out, err = run([mqdtest.mqd_bin(), "-t", "-c", conf, "-d", t.tmpdir, "-s", "flush=async",
                            "-l", "127.0.0.1:1"])
        check(rc == 0 and "is valid" in out, "mqd -t -c -d -s -l: exit %d %r %r" % (rc, out, err))
        rc, out, err = run([mqdtest.mqd_bin(), "-t", "-c", conf, "-d", t.tmpdir, "-s", "flush=snyc"])
        check(rc == 1 and "flush: expected sync or async" in err, "bad -s: exit %d %r" % (rc, err))
    with coll.case("mqd(8) says Type=notify like the unit, and what --foreground does"):
        unit = open(os.path.join(SRC, "etc", "mqd.service")).read()
        check(re.search(r"^Type=notify$", unit, re.M), "the unit is not Type=notify")
        check("Type=simple" not in man and "Type=notify" in man, "mqd(8) names the wrong unit type")
        check("never forks" in helptext and "never forks" in man, "--foreground not described as it is")
    with coll.case("SEE ALSO of every page names the others"):
        for p, name in PAGES.items():
            see = man_text(os.path.join(os.path.dirname(page), p)).split('.SH "SEE ALSO"')[-1].split(".SH SEE ALSO")[-1]
            names = set(re.findall(r"\.BR ([\w.-]+) \((\d)\)", see))
            for q, qname in PAGES.items():
                if q == p:
                    continue
                base, sect = qname[:-3], qname[-2]
                check((base, sect) in names, "%s: SEE ALSO lacks %s (has %s)" % (p, qname, sorted(names)))


SYMBOLIC = {"off", "auto", "none", "unlimited", "OpenSSL's default", "the first listen address",
            "min(2, replication_factor)"}


def sample_defaults():
    """{key: (shown value, stated default)} for every `#key = value` of etc/mqd.conf."""
    text = open(os.path.join(SRC, "etc", "mqd.conf")).read()
    out = {}
    stated = {}
    for ln in text.splitlines():
        m = re.match(r"^# (\w+): .*; default (.*)$", ln)
        if m:
            stated[m.group(1)] = m.group(2)
        m = re.match(r"^#(\w+) =\s?(.*)$", ln)
        if m:
            out[m.group(1)] = (m.group(2), stated.get(m.group(1)))
    return out


def to_number(v):
    units = {"": 1, "ms": 1, "s": 1000, "m": 60000, "h": 3600000, "d": 86400000,
             "KiB": 1024, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}
    m = re.match(r"^(\d+)\s*([A-Za-z]*)$", v)
    return int(m.group(1)) * units[m.group(2)] if m and m.group(2) in units else v


def case_sample(t, coll):
    keys = sample_defaults()
    with coll.case("every commented-out key shows the default its header states"):
        text = open(os.path.join(SRC, "etc", "mqd.conf")).read()
        check("A commented-out key (`#key = value`) shows its built-in default" in text,
              "the sample's header does not say what commented keys show (and which are examples)")
        check(len(keys) >= 50, "only %d commented keys" % len(keys))
        bad = []
        for k, (shown, doc) in sorted(keys.items()):
            if doc is None:
                bad.append("%s: no stated default" % k)
            elif shown != doc and not (doc in SYMBOLIC and shown in ("0", "")):
                bad.append("%s: shows %r, header says default %r" % (k, shown, doc))
        check(not bad, "; ".join(bad))
    with coll.case("a broker on built-in defaults has the commented topic defaults"):
        b = t.broker("defaults", args=[])
        rc, out, err = mqdtest.mqctl(b.url, "--json", "topic", "create", "d")
        check(rc == 0, "topic create: %d %s" % (rc, err))
        cfg = json.loads(out)["config"]
        seen = 0
        for k, v in cfg.items():
            if k not in keys:
                continue
            want = to_number(keys[k][0])
            if isinstance(v, bool):
                want = keys[k][0] == "on"
            check(v == want, "topic default %s = %r, the sample shows %r" % (k, v, keys[k][0]))
            seen += 1
        check(seen >= 10, "compared only %d topic keys" % seen)
        b.stop()


def case_mqctl(t, coll):
    b = t.broker("ctl")
    rc, out, err = mqdtest.mqctl(b.url, "topic", "create", "t1", "--partitions", "2")
    check(rc == 0, "create t1: %d %s" % (rc, err))
    ctl = mqdtest.mqctl_bin()
    with coll.case("global options after the command"):
        rc, out, err = run([ctl, "topic", "list", "--json", "--url", b.url])
        check(rc == 0, "topic list --json: exit %d %r" % (rc, err))
        names = [x["name"] for x in json.loads(out)]
        check("t1" in names, "topic list --json: %r" % names)
        rc, out, err = run([ctl, "topic", "describe", "--url", b.url, "t1", "--json"])
        check(rc == 0 and json.loads(out)["partitions"] == 2, "describe: exit %d %r" % (rc, err))
    with coll.case("a missing value is named"):
        for argv, want in ((["topic", "create", "t2", "--partitions"], "--partitions needs a value"),
                           (["topic", "alter", "t1", "--config"], "--config needs a value"),
                           (["group", "reset", "t1", "g", "--to"], "--to needs a value"),
                           (["status", "--url"], "--url needs a value"),
                           (["status", "--timeout"], "--timeout needs a value"),
                           (["--timeout", "0", "status"], "--timeout needs a positive number")):
            rc, out, err = run([ctl] + argv)
            check(rc == 1 and want in err, "mqctl %s: exit %d %r, want %r" % (" ".join(argv), rc, err, want))
        rc, out, err = mqdtest.mqctl(b.url, "topic", "describe", "t2")
        check(rc == 3, "t2 exists after a refused create: exit %d" % rc)
    b.stop()


def case_install(t, coll):
    if not shutil.which("make"):
        mqdtest.skip("make not installed")
    dest = os.path.join(t.tmpdir, "root")
    p = subprocess.run(["make", "-C", BUILD, "install", "DESTDIR=" + dest], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=600, env=make_env())
    check(p.returncode == 0, "make install failed:\n%s" % p.stdout.decode()[-4000:])
    prefix = make_var("prefix")
    files = []
    for root, _, names in os.walk(dest):
        files += [os.path.join(root, n)[len(dest):] for n in names]
    log("installed %d files under %s" % (len(files), prefix))
    with coll.case("nothing installed outside the prefix, the unit included"):
        outside = [f for f in files if not f.startswith(prefix + "/")]
        check(not outside, "outside %s: %r" % (prefix, outside))
        unit = [f for f in files if f.endswith("/mqd.service")]
        check(unit == [prefix + "/lib/systemd/system/mqd.service"], "unit at %r" % unit)
    with coll.case("mqd.conf installs 0640, the man pages name its path"):
        conf = make_var("sysconfdir") + "/mqd.conf"
        mode = stat.S_IMODE(os.stat(dest + conf).st_mode)
        check(mode == 0o640, "%s mode %o, want 640" % (conf, mode))
        page = man_text(dest + make_var("mandir") + "/man8/mqd.8")
        check(".IR %s ." % conf in page, "installed mqd(8) does not name %s" % conf)


def case_ops_docs(t, coll):
    """Issue 38 point 8: what docs/operations.md and mqctl(1) say of mqctl and /metrics."""
    ops = open(os.path.join(SRC, "docs", "operations.md")).read()
    man = man_text(os.path.join(SRC, "man", "mqctl.1"))
    ctl = mqdtest.mqctl_bin()
    with coll.case("every command of mqctl --help is in mqctl(1)"):
        rc, helptext, _ = run([ctl, "--help"])
        lines = [ln.strip() for ln in helptext.split("commands:")[1].splitlines()
                 if re.match(r"^  [a-z]", ln)]
        cmds = set()
        for ln in lines:  # "topic list | describe NAME", "link list | user list", "status | reload"
            noun, single = None, True
            for seg in ln.split("(")[0].split(" | "):
                w = seg.split()
                if not w:
                    continue
                if len(w) >= 2 and re.match(r"^[a-z]+$", w[1]):  # "noun verb ..."
                    noun, verb, single = w[0], w[1], False
                elif noun is None or single:                     # "status", "send TOPIC"
                    noun, verb, single = w[0], "", True
                else:                                            # "describe NAME"
                    verb = w[0]
                cmds.add((noun + " " + verb).strip())
        check(len(cmds) >= 20, "commands from --help: %r" % sorted(cmds))
        missing = [c for c in sorted(cmds) if c not in man]
        check(not missing, "mqctl(1) lacks %r" % missing)
    with coll.case("the exit codes of mqctl(1) and docs/operations.md are mqctl's"):
        codes = re.findall(r"^\.B (\d)$", man.split('.SH "EXIT STATUS"')[1].split(".SH ")[0], re.M)
        check(codes == [str(i) for i in range(8)], "mqctl(1) EXIT STATUS lists %r" % codes)
        for code, what in ((6, "authentication"), (7, "right")):
            check(re.search(r"%d %s" % (code, what), ops), "operations.md lacks exit %d (%s)" % (code, what))
        check("authenticates\nwith SASL PLAIN" not in ops and "with SASL PLAIN; the user" not in ops,
              "operations.md still says mqctl logs in with PLAIN")
        rc, _, err = run([ctl, "--url", "amqp://127.0.0.1:%d" % mqdtest.free_port(), "status"])
        check(rc == 2, "no broker: exit %d" % rc)
    with coll.case("the columns mqctl prints are the ones mqctl(1) describes"):
        b = t.broker("columns")
        rc, out, err = mqdtest.mqctl(b.url, "send", "cols", "x")
        check(rc == 0, "send: %s" % err)
        rc, out, err = mqdtest.mqctl(b.url, "group", "reset", "cols", "g", "--to", "earliest", "--create")
        check(rc == 0, "reset --create: %s" % err)
        norm = lambda x: re.sub(r"[\s_\-]", "", x.lower())  # noqa: E731
        for argv, verb in ((["group", "describe", "cols", "g"], "group describe"),
                           (["link", "list"], "link list")):
            rc, out, err = mqdtest.mqctl(b.url, *argv)
            head = [ln for ln in out.splitlines() if ln.startswith(("PARTITION", "CONNECTION"))]
            check(rc == 0 and head, "mqctl %s: %d %r" % (verb, rc, out))
            para = re.split(r"\n\.B[I]? \"?%s" % verb, man, 1)[1].split("\n.TP")[0]
            missing = [c for c in head[0].split() if norm(c) not in norm(para)]
            check(not missing, "mqctl %s prints %r, mqctl(1) does not describe %r" % (verb, head[0], missing))
        b.stop()
    with coll.case("mqd(8) gives mqd-passwd's iteration defaults; mqd.conf(5)'s [user] has SCRAM"):
        rc, out, err = run([os.path.join(BUILD, "mqd-passwd"), "--help"])
        m = re.search(r"default (\d+) for --plain, (\d+) for --scram", out + err)
        check(m, "mqd-passwd --help names no defaults: %r" % (out + err))
        page8 = man_text(os.path.join(SRC, "man", "mqd.8"))
        for n in m.groups():
            check("default %s iterations" % n in page8, "mqd(8) lacks 'default %s iterations'" % n)
        user = man_text(os.path.join(SRC, "man", "mqd.conf.5")).split(".B [user NAME]", 1)[1].split(".PP")[0]
        check("SCRAM-SHA-256" in user and "scram_sha256" in user, "mqd.conf(5) [user NAME]: %r" % user[:300])
    with coll.case("every metric of /metrics is in docs/operations.md"):
        mport = mqdtest.free_port()
        b = t.broker("metrics-doc", sets={"metrics_listen": "127.0.0.1:%d" % mport})
        import urllib.request
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % mport, timeout=10 * SLOW) as r:
            names = sorted(set(re.findall(r"^# TYPE (\S+) ", r.read().decode(), re.M)))
        b.stop()
        missing = [n for n in names if not re.search(r"`%s`" % re.escape(n), ops)]
        check(len(names) >= 40 and not missing, "docs/operations.md lacks %r (of %d)" % (missing, len(names)))
        log("%d metric families, each in docs/operations.md" % len(names))


def body(t):
    coll = Collect()
    case_help_and_man(t, coll)
    case_sample(t, coll)
    case_mqctl(t, coll)
    case_ops_docs(t, coll)
    case_install(t, coll)
    coll.finish()


mqdtest.main(body, timeout=900)
