#!/usr/bin/python3
"""Issue 21 point 1: on the installed config (etc/mqd.conf: allow_anonymous = off,
allow_plain_without_tls = off) a user made by `mqd-passwd USER` with its default can
log in with mqctl, and every refusal is logged as a SASL refusal with the mechanism,
the user and the reason.

- mqd-passwd's default writes both password_hash and scram_sha256;
- mqctl (its own SCRAM-SHA-256 client) runs status and topic create over plain TCP;
- a wrong password: mqctl exits 2 with amqp:unauthorized-access, mqd logs
  mech=SCRAM-SHA-256 user=alice reason=wrong password;
- a broker that accepts the proof but signs with the wrong ServerKey (v=): mqctl
  refuses the success (exit 2, "signature (v=) is wrong") and sends no request;
- Proton Python over TLS + PLAIN with the same "both" user sends and receives;
- Proton Python with PLAIN on plain TCP (not offered): mqd logs mech=none and the offer;
- a raw sasl-init with ANONYMOUS: outcome auth (1), mqd logs mech=ANONYMOUS and why;
- a user with only a PLAIN hash: mqd warns at start that it cannot log in."""

import json
import os
import re
import socket
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdtest import Collect, check, log, skip  # noqa: E402

from proton import Message, SSLDomain  # noqa: E402
from proton.utils import BlockingConnection  # noqa: E402

SLOW = mqdtest.SLOW
PW = "horse-battery-7"


def passwd(*args, pw=PW):
    prog = os.path.join(os.environ.get("MQD_BUILDDIR", ""), "mqd-passwd")
    if not os.access(prog, os.X_OK):
        skip("mqd-passwd not built")
    r = subprocess.run([prog] + list(args), input=pw + "\n", capture_output=True, text=True,
                       timeout=60 * SLOW)
    check(r.returncode == 0, "mqd-passwd %s: %s" % (" ".join(args), r.stderr))
    return r.stdout


def installed_conf():
    src = os.environ.get("MQD_SRCDIR") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    with open(os.path.join(src, "etc", "mqd.conf")) as f:
        text = f.read()
    for line in ("allow_anonymous = off", "allow_plain_without_tls = off"):
        check(re.search(r"^%s\s*$" % re.escape(line), text, re.M), "etc/mqd.conf lacks %r" % line)
    return text


def make_pki(d):
    def sh(*a):
        r = subprocess.run(list(a), cwd=d, capture_output=True, timeout=60 * SLOW)
        check(r.returncode == 0, "%s: %s" % (" ".join(a), r.stderr.decode(errors="replace")))
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    sh("openssl", "req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
       "-subj", "/CN=mqd test CA")
    with open(os.path.join(d, "san.ext"), "w") as f:
        f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    sh("openssl", "req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost")
    sh("openssl", "x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
       "-CAcreateserial", "-out", "server.crt", "-days", "2", "-extfile", "san.ext")
    return {n: os.path.join(d, n) for n in ("ca.crt", "server.crt", "server.key")}


def write_conf(t, name, users, pki=None):
    path = os.path.join(t.tmpdir, name + ".conf")
    text = installed_conf()
    # the [user] sections go last; TLS files before any section
    tls = "tls_cert = %s\ntls_key = %s\n" % (pki["server.crt"], pki["server.key"]) if pki else ""
    with open(path, "w") as f:
        f.write(tls + text + "\n" + users)
    return path


def sasl_frame(body):
    return struct.pack(">IBBH", 8 + len(body), 2, 1, 0) + body


def raw_anonymous(port):
    """SASL header, then sasl-init ANONYMOUS whatever is offered: the outcome code."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10 * SLOW)
    s.sendall(b"AMQP\x03\x01\x00\x00")
    fields = b"\xa3\x09ANONYMOUS" + b"\xa0\x09anonymous"
    s.sendall(sasl_frame(b"\x00\x53\x41" + bytes([0xc0, len(fields) + 1, 2]) + fields))
    data = b""
    deadline = time.monotonic() + 10 * SLOW
    while b"\x00\x53\x44" not in data and time.monotonic() < deadline:
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
    s.close()
    i = data.find(b"\x00\x53\x44")
    check(i >= 0, "no sasl-outcome frame in %r" % data)
    # outcome: described list8/list32 whose first field is ubyte 0x50 CODE
    j = data.find(b"\x50", i + 3)
    return data[j + 1]


def log_has(b, pattern, timeout=5):
    deadline = time.monotonic() + timeout * SLOW
    while time.monotonic() < deadline:
        m = re.search(pattern, b.log_text())
        if m:
            return m.group(0)
        time.sleep(0.05)
    return None


def ctl(url, *args):
    return mqdtest.mqctl(url, "--json", *args)


def body(t):
    coll = Collect()
    pki = make_pki(t.tmpdir)
    both = passwd("alice")
    with coll.case("mqd-passwd's default writes both credentials"):
        keys = [ln.split(" = ")[0] for ln in both.splitlines()]
        check(keys == ["[user alice]", "password_hash", "scram_sha256"], "mqd-passwd alice: %r" % keys)
    tls_port = mqdtest.free_port()
    b = t.broker("installed", conf=write_conf(t, "installed", both, pki),
                 args=["--listen", "amqps://127.0.0.1:%d" % tls_port])
    mqdtest.wait_port(tls_port, 15 * SLOW)
    url = "amqp://alice:%s@%s" % (PW, b.hostport)
    with coll.case("mqctl logs in with SCRAM-SHA-256 on the plain-TCP listener"):
        rc, out, err = ctl(url, "status")
        check(rc == 0, "mqctl status: exit %d: %s" % (rc, err))
        check(json.loads(out)["connections"] == 1, "status: %s" % out)
        rc, out, err = ctl(url, "topic", "create", "orders", "--partitions", "3")
        check(rc == 0 and json.loads(out)["partitions"] == 3, "topic create: exit %d %s" % (rc, err))
        check(log_has(b, r"SASL SCRAM-SHA-256 peer=\S+ user=alice"), "no SCRAM login logged")
    with coll.case("a wrong password is refused and logged with mechanism, user, reason"):
        rc, out, err = ctl("amqp://alice:wrong@%s" % b.hostport, "status")
        check(rc == 6 and "amqp:unauthorized-access" in err, "wrong password: exit %d %r" % (rc, err))
        check(log_has(b, r"SASL refused peer=\S+ mech=SCRAM-SHA-256 user=alice reason=wrong password"),
              "refusal not logged as such")
    with coll.case("Proton Python over TLS + PLAIN with the 'both' user"):
        dom = SSLDomain(SSLDomain.MODE_CLIENT)
        dom.set_trusted_ca_db(pki["ca.crt"])
        dom.set_peer_authentication(SSLDomain.VERIFY_PEER)
        c = BlockingConnection("amqps://127.0.0.1:%d" % tls_port, ssl_domain=dom, user="alice",
                               password=PW, allowed_mechs="PLAIN", timeout=10 * SLOW)
        s = c.create_sender("orders")
        for i in range(5):
            s.send(Message(body="o%d" % i, durable=True))
        r = c.create_receiver("orders", credit=10)
        got = sorted(r.receive(timeout=10 * SLOW).body for _ in range(5))
        c.close()
        check(got == ["o%d" % i for i in range(5)], "received %r" % got)
        check(log_has(b, r"SASL PLAIN peer=\S+ user=alice"), "no PLAIN login logged")
    with coll.case("PLAIN on plain TCP: not offered, and the client's leaving is logged"):
        try:
            c = BlockingConnection(b.url, user="alice", password=PW, allowed_mechs="PLAIN",
                                   timeout=10 * SLOW)
            c.close()
            check(False, "PLAIN over plain TCP logged in")
        except Exception as e:  # noqa: B902
            log("refused as expected: %s" % e)
        check(log_has(b, r"SASL refused peer=\S+ mech=none user=- reason=the connection ended before "
                         r"the client chose one of the mechanisms offered \(SCRAM-SHA-256\)"),
              "no mech=none refusal in the log")
    with coll.case("raw ANONYMOUS: outcome auth, logged with mechanism and reason"):
        code = raw_anonymous(b.port)
        check(code == 1, "sasl-outcome code %d, want 1 (auth)" % code)
        check(log_has(b, r"SASL refused peer=\S+ mech=ANONYMOUS user=anonymous reason=ANONYMOUS "
                         r"not allowed \(allow_anonymous = off\)"), "ANONYMOUS refusal not logged")
    b.check_alive("after the logins")
    b.stop()
    # a broker that accepts alice's proof but signs with another ServerKey
    it, salt, stored, server = re.search(r"scram_sha256 = (.*)", both).group(1).split("$")
    forged = both.replace(server, stored)
    b2 = t.broker("forged", conf=write_conf(t, "forged", forged))
    with coll.case("a wrong server signature (v=) fails mqctl's login"):
        rc, out, err = ctl("amqp://alice:%s@%s" % (PW, b2.hostport), "topic", "create", "nope")
        check(rc == 6 and "signature (v=) is wrong" in err, "forged v=: exit %d %r" % (rc, err))
        check(log_has(b2, r"SASL SCRAM-SHA-256 peer=\S+ user=alice"), "mqd saw no SCRAM success")
    b2.stop()
    b2.start()
    with coll.case("the forged-signature run created nothing"):
        check(not os.path.exists(os.path.join(b2.data_dir, "topics", "nope")), "topic 'nope' exists")
    b2.stop()
    plain_only = passwd("--plain", "bob")
    b3 = t.broker("plainonly", conf=write_conf(t, "plainonly", plain_only))
    with coll.case("a PLAIN-only user on the installed config: warned at start"):
        check(log_has(b3, r"warn auth: user bob cannot log in: the plain-TCP listener \S+ offers "
                          r"SCRAM-SHA-256 only"), "no start warning for bob")
        rc, out, err = ctl("amqp://bob:%s@%s" % (PW, b3.hostport), "status")
        check(rc == 6, "bob logged in: exit %d" % rc)
    coll.finish()


mqdtest.main(body, timeout=300)
