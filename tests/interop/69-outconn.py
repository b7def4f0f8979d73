#!/usr/bin/python3
"""Connections mqd opens itself (issue 18 point 3). `outconn_probe` is an mqd of its own
(mqd_server_new, no listener) whose mqd_outconn connects to a second, real mqd and sends
COUNT durable messages to one address, at least once (what was not accepted when a
connection ended goes again on the next). The test reads the second broker back with
Proton:

(a) amqp://, SASL ANONYMOUS: 2,000 messages, all accepted, read back exactly once and in
    order; the probe connected once (attempts = connects = opened = 1).
(b) amqps:// with the test CA and SASL PLAIN on a broker with allow_anonymous = off and
    allow_plain_without_tls = off: 500 messages, exact and in order. A wrong password: the
    peer refuses the login (amqp:unauthorized-access), the probe keeps retrying with a
    doubling backoff (>= 3 attempts in 2 s at 50 -> 400 ms), nothing is stored. A CA that
    did not sign the server's certificate: the TLS handshake fails, no connection opens.
    A hostname the certificate does not name: the same.
(c) reconnect: the probe starts before anything listens on the port (connect refused,
    retried with backoff), the broker comes up 1.5 s later, and is SIGKILLed and
    restarted while 20,000 messages flow (paced at 5,000 a second): every one of them is on the broker afterwards,
    in order of first appearance, each accepted one present (duplicates only from sends
    in flight at the kill); the probe opened 2 connections or more.
(d) the same across a clean restart (SIGTERM): the probe answers the broker's close and
    reconnects; all 10,000 there, in order of first appearance.
(e) a client certificate (the cert_file/key_file options) against a broker with
    tls_verify_client = required: with carol's certificate and PLAIN 100 messages are
    accepted and read back; without a certificate the handshake fails and nothing opens;
    a key that does not match the certificate fails mqd_outconn_new (MQD_EINVAL, logged).
(f) SASL EXTERNAL (sasl_external, as a follower logs in with replication_peer_verify and no
    replication_user) and the peer's CN (peer_cn): with carol's certificate against a
    broker with tls_ca, 100 messages are accepted, one EXTERNAL login as carol; an authzid
    of another user is refused at SASL and nothing opens; a peer_cn the server's
    certificate does not carry (mqd-node-9, it says localhost) fails the handshake on
    every attempt before any SASL exchange, the probe's last error naming both CNs; a
    broker that asks for no certificate (so offers no EXTERNAL) with allow_anonymous = on
    is logged into with ANONYMOUS instead, 100 accepted."""

import importlib.util
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdtest import check, log, skip  # noqa: E402

from proton.utils import BlockingConnection  # noqa: E402

_spec = importlib.util.spec_from_file_location(
    "tls20", os.path.join(os.path.dirname(os.path.abspath(__file__)), "20-tls.py"))
tls20 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tls20)


def probe_bin():
    p = os.path.join(os.environ.get("MQD_BUILDDIR", ""), "tests", "interop", "outconn_probe")
    if not os.access(p, os.X_OK):
        skip("outconn_probe not built (run through make check)")
    return p


def parse(out):
    kv = dict(re.findall(r'(\w+)=("[^"]*"|\S+)', out))
    for k in ("count", "accepted", "sent", "rejected", "downs", "attempts", "connects", "opened"):
        kv[k] = int(kv.get(k, -1))
    return kv


def run_probe(t, args, timeout):
    log("probe " + " ".join(args))
    r = subprocess.run([probe_bin()] + args, capture_output=True, text=True, timeout=timeout)
    kv = parse(r.stdout)
    log("probe exit %d: %s" % (r.returncode, r.stdout.strip()))
    with open(os.path.join(t.tmpdir, "probe.log"), "a") as f:
        f.write(r.stderr)
    return r.returncode, kv, r.stderr


def read_bodies(url, address, want, ssl_domain=None, user=None, password=None, quiet_ms=1500):
    """Every body on `address`, read through a fresh consumer group until `want` arrived
    and then nothing more for quiet_ms."""
    kw = {}
    if ssl_domain is not None:
        kw.update(ssl_domain=ssl_domain, user=user, password=password, allowed_mechs="PLAIN")
    conn = BlockingConnection(url, timeout=30 * mqdtest.SLOW, **kw)
    rcv = conn.create_receiver(address + "/ConsumerGroups/check", credit=500)
    got = []
    deadline = time.monotonic() + 60 * mqdtest.SLOW
    while time.monotonic() < deadline:
        try:
            m = rcv.receive(timeout=(quiet_ms / 1000.0 if len(got) >= want else 10 * mqdtest.SLOW))
        except Exception:  # Timeout: nothing more arrived
            break
        got.append(m.body)
        rcv.accept()
    conn.close()
    return got


def case_plain(t):
    b = t.broker("plain")
    rc, kv, _ = run_probe(t, ["--url", b.url, "--address", "oc-a", "--count", "2000",
                              "--seconds", str(60 * mqdtest.SLOW)], 120 * mqdtest.SLOW)
    check(rc == 0 and kv["accepted"] == 2000, "(a) probe: %r" % kv)
    check(kv["attempts"] == 1 and kv["connects"] == 1 and kv["opened"] == 1 and kv["downs"] == 0,
          "(a) one connection expected: %r" % kv)
    got = read_bodies(b.url, "oc-a", 2000)
    want = ["oc-a-%d" % i for i in range(2000)]
    check(got == want, "(a) read %d bodies, first wrong at %r" % (
        len(got), next((i for i, (x, y) in enumerate(zip(got, want)) if x != y), len(got))))
    log("(a) 2000 sent, accepted, read back in order")


def case_tls(t):
    pki = tls20.make_pki(t.tmpdir)
    b, port, url = tls20.tls_broker(t, "tls", pki, "")
    base = ["--url", url, "--ca", pki["ca.crt"], "--backoff-min", "50", "--backoff-max", "400"]
    rc, kv, _ = run_probe(t, base + ["--user", "alice", "--password", tls20.PASSWORD,
                                     "--address", "oc-b", "--count", "500",
                                     "--seconds", str(60 * mqdtest.SLOW)], 120 * mqdtest.SLOW)
    check(rc == 0 and kv["accepted"] == 500 and kv["opened"] == 1, "(b) TLS + PLAIN probe: %r" % kv)
    domain = tls20.client_domain(pki)
    got = read_bodies(url, "oc-b", 500, ssl_domain=domain, user="alice", password=tls20.PASSWORD)
    check(got == ["oc-b-%d" % i for i in range(500)], "(b) read %d bodies back, not the 500 in order" % len(got))
    log("(b) 500 over TLS + PLAIN, read back in order")
    rc, kv, err = run_probe(t, base + ["--user", "alice", "--password", "wrong", "--address", "oc-bad",
                                       "--count", "10", "--seconds", "2", "--expect-down"], 60)
    check(rc == 0 and kv["accepted"] == 0 and kv["opened"] == 0, "(b) wrong password: %r" % kv)
    check(kv["attempts"] >= 3, "(b) wrong password: %d attempts in 2 s (backoff 50 -> 400 ms)" % kv["attempts"])
    check(kv["downs"] >= 1 and "unauthorized" in kv.get("last_down", "") + kv.get("last_error", ""),
          "(b) wrong password: the refusal is not named: %r" % kv)
    log("(b) wrong password: %d attempts, last %s" % (kv["attempts"], kv["last_down"]))
    rogue = dict(pki)
    rc, kv, err = run_probe(t, ["--url", url, "--ca", rogue["rogue.crt"], "--user", "alice",
                                "--password", tls20.PASSWORD, "--address", "oc-bad", "--count", "10",
                                "--seconds", "1.5", "--backoff-min", "50", "--expect-down"], 60)
    check(rc == 0 and kv["opened"] == 0 and kv["connects"] >= 1, "(b) untrusted CA: %r" % kv)
    check("certificate verify failed" in err, "(b) untrusted CA: no verification failure logged")
    rc, kv, err = run_probe(t, base + ["--hostname", "not-localhost.example", "--user", "alice",
                                       "--password", tls20.PASSWORD, "--address", "oc-bad",
                                       "--count", "10", "--seconds", "1.5", "--expect-down"], 60)
    check(rc == 0 and kv["opened"] == 0, "(b) wrong hostname: %r" % kv)
    # nothing of the refused probes reached the broker
    got = read_bodies(url, "oc-bad", 0, ssl_domain=domain, user="alice", password=tls20.PASSWORD,
                      quiet_ms=500)
    check(got == [], "(b) refused probes stored %d messages" % len(got))


def spawn_reconnecting(t, b, address, n):
    """A probe sending n messages to address at 5,000 a second, reconnecting with a 50 to
    400 ms backoff; its stderr goes to probe-<address>.log."""
    return t.spawn([probe_bin(), "--url", b.url, "--address", address, "--count", str(n),
                    "--backoff-min", "50", "--backoff-max", "400", "--rate", "5000",
                    "--seconds", str(120 * mqdtest.SLOW)],
                   stdout=subprocess.PIPE,
                   stderr=open(os.path.join(t.tmpdir, "probe-%s.log" % address), "w"), text=True)


def case_reconnect(t):
    b = t.broker("reconnect", start=False)
    n = 20000
    p = spawn_reconnecting(t, b, "oc-c", n)
    time.sleep(1.5)
    check(p.poll() is None, "(c) the probe gave up before the broker came up")
    b.start()
    # kill it while messages flow (5,000 a second: 4 s in all), once the topic exists
    deadline = time.monotonic() + 30 * mqdtest.SLOW
    while time.monotonic() < deadline and not os.path.isdir(os.path.join(b.data_dir, "topics", "oc-c")):
        time.sleep(0.02)
    time.sleep(1.0)
    check(p.poll() is None, "(c) the probe was done before the kill")
    b.restart(kill=True)
    out, _ = p.communicate(timeout=180 * mqdtest.SLOW)
    kv = parse(out)
    log("(c) probe: %s" % out.strip())
    check(p.returncode == 0 and kv["accepted"] == n, "(c) probe did not get every message accepted: %r" % kv)
    check(kv["opened"] >= 2 and kv["downs"] >= 1 and kv["attempts"] > kv["opened"],
          "(c) expected refused attempts before the start and a reconnect after the kill: %r" % kv)
    got = read_bodies(b.url, "oc-c", n)
    firsts = list(dict.fromkeys(got))
    check(set(firsts) == set("oc-c-%d" % i for i in range(n)),
          "(c) %d of %d messages on the broker" % (len(set(firsts)), n))
    check(firsts == ["oc-c-%d" % i for i in range(n)], "(c) first appearances out of order")
    log("(c) %d messages, %d read (%d duplicates of sends in flight at the kill), %d attempts, "
        "%d connections opened" % (n, len(got), len(got) - n, kv["attempts"], kv["opened"]))


def case_clean_restart(t):
    """(d) the peer stops cleanly (SIGTERM) and comes back while messages flow."""
    b = t.broker("clean")
    n = 10000
    p = spawn_reconnecting(t, b, "oc-d", n)
    time.sleep(1.0)
    check(p.poll() is None, "(d) the probe was done before the restart")
    b.restart(kill=False)
    out, _ = p.communicate(timeout=180 * mqdtest.SLOW)
    kv = parse(out)
    log("(d) probe: %s" % out.strip())
    check(p.returncode == 0 and kv["accepted"] == n and kv["opened"] >= 2 and kv["downs"] >= 1,
          "(d) probe across a clean restart: %r" % kv)
    got = read_bodies(b.url, "oc-d", n)
    firsts = list(dict.fromkeys(got))
    check(firsts == ["oc-d-%d" % i for i in range(n)], "(d) %d distinct of %d, or out of order"
          % (len(firsts), n))


def case_client_cert(t):
    d = os.path.join(t.tmpdir, "pki-e")
    os.makedirs(d)
    pki = tls20.make_pki(d)
    b, port, url = tls20.tls_broker(t, "mtls", pki, "tls_verify_client = required\ntls_ca = %s\n"
                                    % pki["ca.crt"])
    base = ["--url", url, "--ca", pki["ca.crt"], "--user", "alice", "--password", tls20.PASSWORD,
            "--backoff-min", "50", "--backoff-max", "400"]
    rc, kv, _ = run_probe(t, base + ["--cert", pki["carol.crt"], "--key", pki["carol.key"],
                                     "--address", "oc-e", "--count", "100",
                                     "--seconds", str(60 * mqdtest.SLOW)], 120 * mqdtest.SLOW)
    check(rc == 0 and kv["accepted"] == 100 and kv["opened"] == 1, "(e) client certificate: %r" % kv)
    got = read_bodies(url, "oc-e", 100, ssl_domain=tls20.client_domain(pki, pki["carol.crt"],
                                                                       pki["carol.key"]),
                      user="alice", password=tls20.PASSWORD)
    check(got == ["oc-e-%d" % i for i in range(100)], "(e) read %d bodies back" % len(got))
    rc, kv, err = run_probe(t, base + ["--address", "oc-e-bad", "--count", "10", "--seconds", "1.5",
                                       "--expect-down"], 60)
    log("(e) without a certificate: %r" % kv)
    check(rc == 0 and kv["opened"] == 0 and kv["connects"] >= 1 and kv["accepted"] == 0,
          "(e) without a certificate: %r" % kv)
    rc, kv, err = run_probe(t, base + ["--cert", pki["carol.crt"], "--key", pki["rogue.key"],
                                       "--address", "oc-e-bad", "--count", "10", "--seconds", "1"],
                            60)
    check(rc == 1 and kv.get("setup_error") == "-3" and "does not load" in err,
          "(e) a key of another certificate: exit %d %r %r" % (rc, kv, err[-300:]))


def case_external(t):
    d = os.path.join(t.tmpdir, "pki-f")
    os.makedirs(d)
    pki = tls20.make_pki(d)
    b, port, url = tls20.tls_broker(t, "ext", pki, "tls_verify_client = optional\ntls_ca = %s\n"
                                    % pki["ca.crt"])
    base = ["--url", url, "--ca", pki["ca.crt"], "--cert", pki["carol.crt"], "--key",
            pki["carol.key"], "--external", "--backoff-min", "50", "--backoff-max", "400"]
    rc, kv, _ = run_probe(t, base + ["--peer-cn", "localhost", "--address", "oc-f", "--count",
                                     "100", "--seconds", str(60 * mqdtest.SLOW)],
                          120 * mqdtest.SLOW)
    logins = len(re.findall(r"SASL EXTERNAL peer=\S+ user=carol", b.log_text()))
    log("(f) EXTERNAL, peer CN localhost: %r; %d EXTERNAL logins as carol" % (kv, logins))
    check(rc == 0 and kv["accepted"] == 100 and kv["opened"] == 1 and logins == 1,
          "(f) EXTERNAL as carol: %r, %d logins" % (kv, logins))
    got = read_bodies(url, "oc-f", 100, ssl_domain=tls20.client_domain(pki, pki["carol.crt"],
                                                                       pki["carol.key"]),
                      user="alice", password=tls20.PASSWORD)
    check(got == ["oc-f-%d" % i for i in range(100)], "(f) read %d bodies back" % len(got))
    rc, kv, _ = run_probe(t, base + ["--authzid", "alice", "--address", "oc-f-bad", "--count", "10",
                                     "--seconds", "1.5", "--expect-down"], 60)
    log("(f) EXTERNAL with authzid alice: %r" % kv)
    check(rc == 0 and kv["opened"] == 0 and kv["accepted"] == 0 and
          "authorization identity differs" in b.log_text(), "(f) authzid alice: %r" % kv)
    seen = b.log_text().count("SASL")
    rc, kv, _ = run_probe(t, base + ["--peer-cn", "mqd-node-9", "--address", "oc-f-bad", "--count",
                                     "10", "--seconds", "1.5", "--expect-down"], 60)
    log("(f) peer CN mqd-node-9 wanted: %r" % kv)
    check(rc == 0 and kv["opened"] == 0 and kv["connects"] >= 2 and
          "names CN=localhost, not mqd-node-9" in kv["last_error"] and
          b.log_text().count("SASL") == seen,
          "(f) peer CN mismatch: %r (SASL lines %d -> %d)" % (kv, seen, b.log_text().count("SASL")))
    # a peer that offers no EXTERNAL (asks for no certificate): ANONYMOUS, if it allows that
    b2, port2, url2 = tls20.tls_broker(t, "noext", pki, "allow_anonymous = on\n")
    rc, kv, _ = run_probe(t, [a if a != url else url2 for a in base] +
                          ["--address", "oc-f2", "--count", "100",
                           "--seconds", str(60 * mqdtest.SLOW)], 120 * mqdtest.SLOW)
    anon = len(re.findall(r"SASL ANONYMOUS peer=\S+ user=anonymous", b2.log_text()))
    log("(f) EXTERNAL not offered: %r; %d ANONYMOUS logins" % (kv, anon))
    check(rc == 0 and kv["accepted"] == 100 and anon == 1, "(f) fallback: %r" % kv)


def body(t):
    coll = mqdtest.Collect()
    with coll.case("(a) amqp:// ANONYMOUS"):
        case_plain(t)
    import shutil
    with coll.case("(b) amqps:// PLAIN, refusals"):
        if not shutil.which("openssl"):
            skip("openssl CLI not installed")
        case_tls(t)
    with coll.case("(c) reconnect across a start and a SIGKILL"):
        case_reconnect(t)
    with coll.case("(d) reconnect across a clean restart"):
        case_clean_restart(t)
    with coll.case("(e) amqps:// with a client certificate"):
        if not shutil.which("openssl"):
            skip("openssl CLI not installed")
        case_client_cert(t)
    with coll.case("(f) amqps:// SASL EXTERNAL, the peer's CN"):
        if not shutil.which("openssl"):
            skip("openssl CLI not installed")
        case_external(t)
    coll.finish()


if __name__ == "__main__":
    mqdtest.main(body, timeout=400)
