#!/usr/bin/python3
"""mqctl commands people expect from rabbitmqctl, against a live broker:

connections  `mqctl connection list` shows per connection since when (connected_since),
             AMQP bytes in and out, the TLS version, the SASL mechanism, the user and the
             client's open properties: a TLS + PLAIN client with properties and mqctl's
             own plain anonymous connection, each with the right figures.
config       `mqctl config show` gives the effective config and where each value came
             from: a file line, --set, --data-dir, --listen, the built-in default, and
             `management` for a topic setting changed through mqctl; no user secrets.
audit        every management change (create, alter, group reset, delete, connection
             close, a failed delete, a refused one) leaves one `audit:` log line with the
             user, the operation and the target; reads leave none."""

import json
import os
import re
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdtest import Collect, check, log, skip  # noqa: E402

from proton import Message, SSLDomain, symbol  # noqa: E402
from proton.utils import BlockingConnection  # noqa: E402

PW = {"alice": "alice-pw", "bob": "bob-pw"}


def passwd(user):
    prog = os.path.join(os.environ.get("MQD_BUILDDIR", ""), "mqd-passwd")
    if not os.access(prog, os.X_OK):
        skip("mqd-passwd not built")
    r = subprocess.run([prog, "--both", "--iterations", "4096", user], input=PW[user] + "\n",
                       capture_output=True, text=True, timeout=30 * mqdtest.SLOW)
    check(r.returncode == 0, "mqd-passwd: %s" % r.stderr)
    return r.stdout


def make_cert(d):
    if not shutil.which("openssl"):
        skip("no openssl")
    with open(os.path.join(d, "san.ext"), "w") as f:
        f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    for args in (["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
                  "ca.crt", "-days", "2", "-subj", "/CN=mqd test 89 CA"],
                 ["req", "-newkey", "rsa:2048", "-nodes", "-keyout", "srv.key", "-out", "srv.csr",
                  "-subj", "/CN=localhost"],
                 ["x509", "-req", "-in", "srv.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                  "-CAcreateserial", "-out", "srv.crt", "-days", "2", "-extfile", "san.ext"]):
        r = subprocess.run(["openssl"] + args, cwd=d, capture_output=True, timeout=60 * mqdtest.SLOW)
        check(r.returncode == 0, "openssl %s: %s" % (args[0], r.stderr.decode(errors="replace")))
    return {k: os.path.join(d, k) for k in ("ca.crt", "srv.crt", "srv.key")}


def ctl(b, *args, user=None):
    url = b.url if not user else b.url.replace("amqp://", "amqp://%s:%s@" % (user, PW[user]))
    return mqdtest.mqctl(url, *args)


def ok_json(b, *args):
    rc, out, err = ctl(b, "--json", *args)
    check(rc == 0, "mqctl %s: exit %d: %s" % (" ".join(args), rc, err))
    return json.loads(out)


def audit_lines(b):
    return [ln for ln in b.log_text().split("\n") if " audit: " in ln]


def write_conf(path, pki):
    lines = ["log_level = info", "max_topics = 777", "tls_cert = %s" % pki["srv.crt"],
             "tls_key = %s" % pki["srv.key"]]
    text = "\n".join(lines) + "\n" + passwd("alice") + passwd("bob")
    text += "[topic orders]\npartitions = 3\n[acl]\ndeny bob manage *\nallow * all *\n"
    with open(path, "w") as f:
        f.write(text)
    # the line of `partitions = 3`, counted the way the parser does
    return text.split("\n").index("partitions = 3") + 1


def connections(b, tls_port, pki, coll):
    with coll.case("connection list: TLS, SASL, user, bytes, since, client properties"):
        dom = SSLDomain(SSLDomain.MODE_CLIENT)
        dom.set_trusted_ca_db(pki["ca.crt"])
        dom.set_peer_authentication(SSLDomain.VERIFY_PEER)
        before = time.time() * 1000
        c = BlockingConnection("amqps://localhost:%d" % tls_port, ssl_domain=dom,
                               timeout=10 * mqdtest.SLOW, user="alice", password=PW["alice"],
                               allowed_mechs="PLAIN",
                               properties={symbol("product"): "test-89", symbol("version"): "1.2"})
        after = time.time() * 1000
        snd = c.create_sender("orders")
        for i in range(3):
            snd.send(Message(body="x" * 1000))
        conns = ok_json(b, "connection", "list")
        log("connections: %r" % conns)
        mine = [x for x in conns if x["user"] == "alice"]
        check(len(mine) == 1, "alice's connections: %r" % mine)
        a = mine[0]
        check(a["sasl_mechanism"] == "PLAIN", "mechanism %r" % a["sasl_mechanism"])
        check(re.match(r"^TLSv1\.[23]$", a["tls_version"] or ""), "tls_version %r" % a["tls_version"])
        check(a["client_properties"].get("product") == "test-89"
              and a["client_properties"].get("version") == "1.2", "properties %r" % a["client_properties"])
        check(before - 2000 <= a["connected_since"] <= after + 2000,
              "connected_since %r not in [%d, %d]" % (a["connected_since"], before, after))
        check(a["bytes_in"] >= 3000 and a["bytes_out"] > 0,
              "bytes in %r out %r (3 x 1000-byte bodies sent)" % (a["bytes_in"], a["bytes_out"]))
        me = [x for x in conns if x["self"]]
        check(len(me) == 1 and me[0]["user"] == "anonymous" and me[0]["sasl_mechanism"] == "ANONYMOUS"
              and me[0]["tls_version"] is None, "mqctl's own connection: %r" % me)
        rc, out, err = ctl(b, "connection", "list")
        rows = out.strip().split("\n")
        check(rc == 0 and rows[0].split()[:5] == ["ID", "USER", "SASL", "TLS", "CONNECTED_SINCE"],
              "table head %r" % rows[:1])
        arow = [r for r in rows if " alice " in r]
        check(arow and " PLAIN " in arow[0] and " TLSv1." in arow[0], "alice's row %r" % arow)
        return c, a["id"]


def config(b, conf, part_line, coll):
    with coll.case("config show: values and where they came from"):
        ctl(b, "topic", "alter", "orders", "--config", "retention_ms=2h")
        r = ok_json(b, "config", "show")
        rows = {((s["topic"] or ""), s["key"]): (s["value"], s["source"]) for s in r["settings"]}
        want = {
            ("", "max_topics"): ("777", "%s:2" % conf),
            ("", "log_level"): ("info", "%s:1" % conf),
            ("", "idle_timeout_ms"): ("45s", "--set"),
            ("", "data_dir"): (b.data_dir, "--data-dir"),
            ("", "max_sessions"): ("64", "default"),
            ("orders", "partitions"): ("3", "%s:%d" % (conf, part_line)),
            ("orders", "retention_ms"): ("2h", "management"),
        }
        for k, v in want.items():
            check(rows.get(k) == v, "config %s: %r, want %r" % (k, rows.get(k), v))
        check(rows[("", "listen")][1] == "--listen", "listen source %r" % (rows[("", "listen")],))
        check(r["file"] == conf, "file %r" % r["file"])
        text = json.dumps(r)
        check("pbkdf2" not in text and "password" not in text, "secrets in config show")
        rc, out, err = ctl(b, "config", "show")
        line = [ln for ln in out.split("\n") if ln.startswith("topic.orders.partitions ")]
        check(rc == 0 and line and line[0].split()[1:] == ["3", "%s:%d" % (conf, part_line)],
              "human row %r" % line)


def audit(b, alice_conn, alice_id, coll):
    with coll.case("audit: one line per management change, none for reads"):
        n0 = len(audit_lines(b))
        ok_json(b, "topic", "list")
        ok_json(b, "topic", "describe", "orders")
        ok_json(b, "config", "show")
        check(len(audit_lines(b)) == n0, "reads were audited: %r" % audit_lines(b)[n0:])
        ok_json(b, "topic", "create", "t89", "--partitions", "2")
        ok_json(b, "topic", "alter", "t89", "--config", "dead_letter=on")
        ok_json(b, "group", "reset", "t89", "g89", "--to", "earliest", "--create")
        ok_json(b, "topic", "delete", "t89")
        rc, _, _ = ctl(b, "topic", "delete", "nosuch89")
        check(rc == 3, "delete of a missing topic: exit %d" % rc)
        rc, _, err = ctl(b, "topic", "create", "bobs", user="bob")
        check(rc == 7, "bob's create: exit %d %s" % (rc, err))
        rc, _, _ = ctl(b, "connection", "close", alice_id)
        check(rc == 0, "connection close: exit %d" % rc)
        deadline = time.monotonic() + 10 * mqdtest.SLOW
        while len(audit_lines(b)) < n0 + 7 and time.monotonic() < deadline:
            time.sleep(0.05)
        got = audit_lines(b)[n0:]
        for ln in got:
            log("audit line: %s" % ln)
        want = [("anonymous", "CREATE", "com.mqd:topic", "t89", "201"),
                ("anonymous", "UPDATE", "com.mqd:topic", "t89", "200"),
                ("anonymous", "RESET", "com.mqd:consumergroup", "t89/g89", "200"),
                ("anonymous", "DELETE", "com.mqd:topic", "t89", "204"),
                ("anonymous", "DELETE", "com.mqd:topic", "nosuch89", "404"),
                ("bob", "CREATE", "com.mqd:topic", "bobs", "401"),
                ("anonymous", "DELETE", "com.mqd:connection", alice_id, "204")]
        check(len(got) == len(want), "%d audit lines, want %d" % (len(got), len(want)))
        for ln, (user, op, typ, target, status) in zip(got, want):
            m = re.search(r'audit: user=(\S+) peer=\S+ op=(\S+) type=(\S+) target="([^"]*)" '
                          r'status=(\d+)', ln)
            check(m and m.groups() == (user, op, typ, target, status),
                  "audit line %r, want %r" % (ln, (user, op, typ, target, status)))
        check("reason=" in got[4] and "nosuch89" in got[4], "no reason on the 404: %r" % got[4])


def body(t):
    pki = make_cert(t.tmpdir)
    conf = os.path.join(t.tmpdir, "mqd.conf")
    part_line = write_conf(conf, pki)
    tls_port = mqdtest.free_port()
    b = t.broker("b89", conf=conf, sets={"idle_timeout_ms": "45s"},
                 args=["--listen", "amqps://127.0.0.1:%d" % tls_port])
    mqdtest.wait_port(tls_port, 15 * mqdtest.SLOW)
    coll = Collect()
    alice = connections(b, tls_port, pki, coll)
    config(b, conf, part_line, coll)
    if alice:
        audit(b, alice[0], alice[1], coll)
    coll.finish()


if __name__ == "__main__":
    mqdtest.main(body, timeout=180)
