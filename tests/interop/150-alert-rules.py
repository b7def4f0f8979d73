#!/usr/bin/python3
"""The shipped Prometheus alert rules and Grafana dashboards (contrib/, issue 38 point 2):

- `promtool check rules` and `promtool test rules` pass on contrib/prometheus (each alert
  fires on its recorded series and stays quiet on the others); a copy of the tests with one
  expectation changed fails, so promtool really evaluated them;
- every dashboard under contrib/grafana is JSON with unique panel ids, each panel queries
  the `${datasource}` variable and has at least one target;
- every metric name the rules and the dashboards query exists in the /metrics of a
  running mqd (a sample, or its # TYPE line for a family with none at the moment: follower
  lag without followers), and every label their selectors name is on its samples (one node of an etcd cluster, so the
  mqd_repl_* series are there, with tls_cert set, a topic, a group, a refused login), except
  Prometheus's own `up` and the `instance`/`job` labels it adds;
- the new metrics tell the truth: mqd_tls_cert_expiry_timestamp_seconds is the
  certificate's notAfter as openssl reads it, mqd_auth_failures_total{mechanism=
  "SCRAM-SHA-256"} rises by one per refused mqctl login, process_max_fds is the broker's
  soft RLIMIT_NOFILE, mqd_build_info carries `mqd --version`'s version, and
  mqd_group_members counts an attached consumer."""

import calendar
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdcluster import Etcd, start_nodes  # noqa: E402
from mqdtest import SLOW, check, log, skip  # noqa: E402

from proton import Message  # noqa: E402

SRC = os.environ.get("MQD_SRCDIR") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
PROM = os.path.join(SRC, "contrib", "prometheus")
GRAF = os.path.join(SRC, "contrib", "grafana")
SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? \S+$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="(?:[^"\\]|\\.)*"')
PROM_ADDED = {"up"}            # made by Prometheus, not by mqd
PROM_LABELS = {"instance", "job"}
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or",
            "unless", "bool", "offset", "inf", "nan"}


def promtool(*args, cwd=None):
    p = subprocess.run(["promtool"] + list(args), cwd=cwd, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=120 * SLOW)
    out = p.stdout.decode()
    log("promtool %s -> %d\n%s" % (" ".join(args), p.returncode, out.strip()))
    return p.returncode, out


def case_promtool():
    rc, out = promtool("check", "rules", "mqd-alerts.yml", cwd=PROM)
    check(rc == 0 and "SUCCESS" in out, "promtool check rules: %s" % out)
    n = int(re.search(r"(\d+) rules found", out).group(1))
    rc, out = promtool("test", "rules", "mqd-alerts.test.yml", cwd=PROM)
    check(rc == 0 and "SUCCESS" in out, "promtool test rules: %s" % out)
    tests = open(os.path.join(PROM, "mqd-alerts.test.yml")).read()
    alerts = re.findall(r"^\s+- alert: (\w+)", open(os.path.join(PROM, "mqd-alerts.yml")).read(), re.M)
    check(len(alerts) == n, "%d alerts, promtool found %d rules" % (len(alerts), n))
    for a in alerts:  # each alert has a test where it fires
        check(re.search(r"alertname: %s\n\s+exp_alerts:\n\s+- exp_labels" % a, tests),
              "no test where %s fires" % a)
    with tempfile.TemporaryDirectory() as d:  # the negative control
        shutil.copy(os.path.join(PROM, "mqd-alerts.yml"), d)
        with open(os.path.join(d, "mqd-alerts.test.yml"), "w") as f:
            f.write(tests.replace("Lag 4000 and", "Lag 4001 and"))
        rc, out = promtool("test", "rules", "mqd-alerts.test.yml", cwd=d)
        check(rc != 0 and "FAILED" in out, "promtool passed a wrong expectation: %s" % out)
    log("promtool: %d rules, all tested, a wrong expectation fails" % n)
    return alerts


def selectors(expr):
    """(metric name, set of label names) for each metric a PromQL expression reads."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)                      # strings
    e = re.sub(r"\[[^\]]*\]", "", e)                                   # ranges
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    out = []
    for m in re.finditer(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\{[^}]*\})?\s*(\()?", e):
        name, sel, call = m.group(1), m.group(2), m.group(3)
        if call or name.lower() in KEYWORDS:
            continue
        labels = set(re.findall(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)", sel or ""))
        out.append((name, labels))
    # the label selectors' values were blanked above: take names from the original too
    return out


def dashboard_exprs():
    exprs = []
    names = sorted(f for f in os.listdir(GRAF) if f.endswith(".json"))
    check(set(names) >= {"mqd-broker.json", "mqd-topics.json", "mqd-groups.json",
                         "mqd-replication.json"}, "dashboards: %r" % names)
    for fn in names:
        d = json.load(open(os.path.join(GRAF, fn)))
        check(d.get("uid") and d.get("title") and d.get("panels"), "%s: uid, title, panels" % fn)
        ids = [p["id"] for p in d["panels"]]
        check(len(ids) == len(set(ids)), "%s: panel ids %r" % (fn, ids))
        check(any(v["name"] == "datasource" and v["type"] == "datasource"
                  for v in d["templating"]["list"]), "%s: no datasource variable" % fn)
        for p in d["panels"]:
            check(p["datasource"]["uid"] == "${datasource}" and p["targets"],
                  "%s panel %r: datasource or targets" % (fn, p["title"]))
            for tg in p["targets"]:
                exprs.append(("%s: %s" % (fn, p["title"]), tg["expr"]))
        for v in d["templating"]["list"]:
            if v["type"] == "query":
                exprs.append(("%s: variable %s" % (fn, v["name"]),
                              re.sub(r"^label_values\((.*),\s*\w+\)$", r"\1", v["query"])))
    log("%d dashboards, %d queries" % (len(names), len(exprs)))
    return exprs


def rule_exprs():
    text = open(os.path.join(PROM, "mqd-alerts.yml")).read()
    out, cur = [], None
    for ln in text.split("\n"):  # `expr: ...` on one line, or `expr: |` and an indented block
        m = re.match(r"^(\s*)expr:\s*(.*)$", ln)
        if m:
            cur = [len(m.group(1)), "" if m.group(2) == "|" else m.group(2)]
            out.append(cur)
            if m.group(2) != "|":
                cur = None
        elif cur is not None and (ln.startswith(" " * (cur[0] + 2)) and ln.strip()):
            cur[1] += " " + ln.strip()
        elif cur is not None and ln.strip():
            cur = None
    return [("mqd-alerts.yml", e[1]) for e in out]


def scrape(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10 * SLOW) as r:
        text = r.read().decode()
    samples = {}
    for ln in text.split("\n"):
        if ln.startswith("# TYPE "):  # a family with no sample now (follower lag: no follower)
            samples.setdefault(ln.split(" ")[2], [])
        if not ln or ln.startswith("#"):
            continue
        m = SAMPLE.match(ln)
        check(m, "not a sample line: %r" % ln)
        samples.setdefault(m.group(1), []).append(
            (dict(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', m.group(2) or "")),
             float(ln.rsplit(" ", 1)[1])))
    return samples


def value(samples, name, **labels):
    vals = [v for lab, v in samples.get(name, []) if all(lab.get(k) == w for k, w in labels.items())]
    check(len(vals) == 1, "%s%r: %r" % (name, labels, samples.get(name)))
    return vals[0]


def make_cert(d):
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "40",
                    "-subj", "/CN=127.0.0.1", "-keyout", os.path.join(d, "server.key"),
                    "-out", os.path.join(d, "server.crt")], check=True, capture_output=True)
    out = subprocess.run(["openssl", "x509", "-noout", "-enddate", "-in", os.path.join(d, "server.crt")],
                         check=True, capture_output=True).stdout.decode()
    end = time.strptime(out.strip().split("=", 1)[1].replace(" GMT", ""), "%b %d %H:%M:%S %Y")
    return os.path.join(d, "server.crt"), os.path.join(d, "server.key"), calendar.timegm(end)


def case_metrics_exist(t, exprs):
    if shutil.which("etcd") is None:
        skip("etcd is not on PATH (Debian: apt-get install etcd-server)")
    crt, key, not_after = make_cert(t.tmpdir)
    etcd = Etcd(t)
    etcd.start()
    mport = mqdtest.free_port()
    sets = {"metrics_listen": "127.0.0.1:%d" % mport, "tls_cert": crt, "tls_key": key,
            "allow_anonymous": "on"}
    sets.update(scram_user("alice", "right"))
    b = start_nodes(t, etcd, {1: "a"}, lambda i: sets)[1]
    url = b.url
    rc, out, err = mqdtest.mqctl(url, "topic", "create", "orders", "--partitions", "2")
    check(rc == 0, "topic create: %s" % err)
    mqdtest.send(url, "orders", [Message(body="m%d" % i) for i in range(10)])
    got = mqdtest.receive(url, "orders/ConsumerGroups/billing", 4, credit=4)
    check(len(got.got) == 4, "received %d" % len(got.got))
    s0 = scrape(mport)
    bad = "amqp://alice:wrong@" + b.hostport
    for _ in range(2):
        rc, out, err = mqdtest.mqctl(bad, "topic", "list")
        check(rc == 6 and "Authentication failed" in err, "wrong password: %d %s" % (rc, err))
    # a consumer attached (not consuming) while we scrape: mqd_group_members = 1
    held = subprocess.Popen([mqdtest.mqctl_bin(), "--url", url, "receive", "orders", "--group", "audit",
                             "--count", "1000", "--idle", str(int(30 * SLOW))],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t._procs.append(held)
    deadline = time.monotonic() + 10 * SLOW
    while True:
        s1 = scrape(mport)
        if [v for lab, v in s1.get("mqd_group_members", []) if lab.get("group") == "audit" and v == 1]:
            break
        check(time.monotonic() < deadline, "mqd_group_members of audit never 1: %r"
              % s1.get("mqd_group_members"))
        time.sleep(0.2)
    held.kill()
    held.wait()
    failed = (value(s1, "mqd_auth_failures_total", mechanism="SCRAM-SHA-256")
              - value(s0, "mqd_auth_failures_total", mechanism="SCRAM-SHA-256"))
    check(failed == 2, "SCRAM failures rose by %r, want 2" % failed)
    check(value(s1, "mqd_auth_failures_total", mechanism="PLAIN") == 0, "PLAIN failures")
    exp = value(s1, "mqd_tls_cert_expiry_timestamp_seconds", key="tls_cert")
    check(exp == not_after, "cert expiry %r, openssl says %r" % (exp, not_after))
    limits = open("/proc/%d/limits" % b.pid).read()
    soft = int(re.search(r"Max open files\s+(\d+)", limits).group(1))
    check(value(s1, "process_max_fds") == soft, "process_max_fds %r, limit %d" % (value(s1, "process_max_fds"), soft))
    check(0 < value(s1, "process_cpu_seconds_total") < 3600, "cpu seconds")
    ver = subprocess.run([mqdtest.mqd_bin(), "--version"], capture_output=True).stdout.decode().split()[-1]
    check([lab["version"] for lab, _ in s1["mqd_build_info"]] == [ver], "build info %r, --version %s"
          % (s1["mqd_build_info"], ver))
    lag = sum(v for lab, v in s1["mqd_group_lag"] if lab["group"] == "billing")
    check(lag == 6, "billing's lag %r, want 6" % lag)
    log("cert expiry %d = openssl's, 2 refused SCRAM logins counted, max_fds %d, version %s, "
        "billing lag 6, audit 1 member" % (exp, soft, ver))
    missing = []
    for where, e in exprs:
        for name, labels in selectors(e):
            if name in PROM_ADDED:
                continue
            if name not in s1:
                missing.append("%s: metric %s (%s)" % (where, name, e))
                continue
            have = set().union(*(set(lab) for lab, _ in s1[name]))
            for lab in (labels - PROM_LABELS - have) if s1[name] else ():
                missing.append("%s: label %s of %s" % (where, lab, name))
    check(not missing, "queries name what mqd does not export:\n  " + "\n  ".join(missing))
    log("%d queries: every metric and label exists in mqd's /metrics" % len(exprs))


def scram_user(user, password):
    """The --set of a [user USER] with a SCRAM-SHA-256 credential (mqd-passwd --scram)."""
    passwd = os.path.join(os.environ.get("MQD_BUILDDIR", ""), "mqd-passwd")
    if not os.access(passwd, os.X_OK):
        skip("mqd-passwd not built")
    r = subprocess.run([passwd, "--scram", user], input=(password + "\n").encode(),
                       capture_output=True, timeout=60 * SLOW)
    check(r.returncode == 0, "mqd-passwd: %s" % r.stderr)
    return {"user.%s.%s" % (user, k.strip()): v.strip() for k, v in
            (ln.split("=", 1) for ln in r.stdout.decode().splitlines() if "=" in ln)}


def body(t):
    if shutil.which("promtool") is None:
        skip("promtool is not on PATH (Debian: apt-get install prometheus)")
    coll = mqdtest.Collect()
    exprs = []
    with coll.case("promtool check and test the shipped rules"):
        case_promtool()
    with coll.case("the dashboards are valid JSON"):
        exprs = dashboard_exprs()
    with coll.case("every metric queried exists in a running mqd"):
        case_metrics_exist(t, exprs + rule_exprs())
    coll.finish()


if __name__ == "__main__":
    mqdtest.main(body, timeout=300)
