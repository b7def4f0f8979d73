#!/usr/bin/python3
"""TLS listeners (listen = amqps://HOST:PORT), run by mqd itself with OpenSSL in front of
Proton. Certificates are made with the openssl CLI in the test's temp dir: a test CA, a
server certificate for 127.0.0.1, client certificates for mutual TLS (good,
self-signed/untrusted, expired).

Broker A (tls_verify_client = none, allow_plain_without_tls = off):
- python3-qpid-proton over TLS, verifying the server with the test CA, SASL PLAIN:
  send + receive work;
- the same user with PLAIN over the plain listener is refused (mqd does not offer PLAIN
  there) and nothing reaches the topic;
- a wrong password over TLS fails with amqp:unauthorized-access;
- the AMQP TLS protocol header (AMQP 2.1.0.0) is answered with the same header and TLS
  follows on the same socket, both for a client that waits for the answer before its
  ClientHello and for one that sends it right away;
- SIGHUP reloads the certificate: a new connection sees the new one, an old connection
  keeps working.
Broker B (tls_verify_client = required, tls_ca = test CA):
- mutual TLS + SASL EXTERNAL: the certificate CN maps to a [user] (cert_cn), send works;
- an untrusted (self-signed) and an expired client certificate fail the TLS handshake
  and leave nothing behind; a client without a certificate fails too.
Broker C (tls_verify_client = optional, tls_ca = test CA, tls_handshake_timeout_ms = 1s):
- a client without a certificate connects and sends with PLAIN, but cannot use EXTERNAL;
- a client with a good certificate logs in with EXTERNAL;
- an untrusted certificate fails the handshake;
- clients that close mid-handshake (after part of a ClientHello, after the ServerHello)
  leave the broker serving; clients that send nothing or stall mid-handshake are closed
  by the handshake timeout."""

import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdtest import check, fail, log, skip  # noqa: E402

from proton import Message, SSLDomain  # noqa: E402
from proton import ConnectionException  # noqa: E402
from proton.utils import BlockingConnection, LinkDetached  # noqa: E402

PASSWORD = "tls-secret"


def sh(args, cwd):
    r = subprocess.run(args, cwd=cwd, capture_output=True, timeout=60)
    if r.returncode != 0:
        fail("%s failed: %s" % (" ".join(args), r.stderr.decode(errors="replace")))


def make_pki(d):
    """CA, server cert (CN=localhost, SAN 127.0.0.1), client certs; returns paths."""
    sh(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
        "-days", "2", "-subj", "/CN=mqd test CA"], d)
    with open(os.path.join(d, "server.ext"), "w") as f:
        f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\n")

    def issue(name, cn, days="2", extra=()):
        sh(["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", name + ".key", "-out", name + ".csr",
            "-subj", "/CN=" + cn], d)
        sh(["openssl", "x509", "-req", "-in", name + ".csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", name + ".crt", "-days", days] + list(extra), d)

    issue("server", "localhost", extra=["-extfile", "server.ext"])
    issue("server2", "localhost", extra=["-extfile", "server.ext"])
    issue("carol", "carol-device")
    # expired: OpenSSL 3's x509 takes -not_before/-not_after only from 3.4; `openssl ca`
    # takes -startdate/-enddate everywhere
    os.makedirs(os.path.join(d, "ca-db"), exist_ok=True)
    open(os.path.join(d, "ca-db", "index.txt"), "w").close()
    with open(os.path.join(d, "ca.cnf"), "w") as f:
        f.write("[ca]\ndefault_ca=d\n[d]\ndatabase=ca-db/index.txt\nnew_certs_dir=ca-db\n"
                "serial=ca-db/serial\ndefault_md=sha256\npolicy=p\n[p]\ncommonName=supplied\n")
    with open(os.path.join(d, "ca-db", "serial"), "w") as f:
        f.write("1000\n")
    sh(["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "expired.key", "-out", "expired.csr",
        "-subj", "/CN=carol-device"], d)
    sh(["openssl", "ca", "-batch", "-config", "ca.cnf", "-cert", "ca.crt", "-keyfile", "ca.key",
        "-in", "expired.csr", "-out", "expired.crt", "-startdate", "20200101000000Z",
        "-enddate", "20200102000000Z", "-notext"], d)
    # untrusted: self-signed with the same CN
    sh(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "rogue.key", "-out", "rogue.crt",
        "-days", "2", "-subj", "/CN=carol-device"], d)
    return {n: os.path.join(d, n) for n in os.listdir(d)}


def write_conf(t, name, pki, extra):
    passwd = os.path.join(os.environ.get("MQD_BUILDDIR", ""), "mqd-passwd")
    if not os.access(passwd, os.X_OK):
        skip("mqd-passwd not built")
    r = subprocess.run([passwd, "--both", "--iterations", "1000", "alice"], input=PASSWORD + "\n",
                       capture_output=True, text=True, timeout=30)
    check(r.returncode == 0, "mqd-passwd failed: %s" % r.stderr)
    path = os.path.join(t.tmpdir, name + ".conf")
    with open(path, "w") as f:
        f.write("allow_anonymous = off\nallow_plain_without_tls = off\n"
                "tls_cert = %s\ntls_key = %s\n%s\n" % (pki["server.crt"], pki["server.key"], extra))
        f.write(r.stdout)
        f.write("[user carol]\ncert_cn = carol-device\n")
    return path


def tls_broker(t, name, pki, extra):
    """A broker with a TLS listener on a free port, its config write_conf's with `extra`:
    (broker, port, url)."""
    port = mqdtest.free_port()
    brk = t.broker(name, conf=write_conf(t, name, pki, extra),
                   args=["--listen", "amqps://127.0.0.1:%d" % port])
    mqdtest.wait_port(port, 15)
    return brk, port, "amqps://127.0.0.1:%d" % port


def client_domain(pki, cert=None, key=None):
    d = SSLDomain(SSLDomain.MODE_CLIENT)
    d.set_trusted_ca_db(pki["ca.crt"])
    # VERIFY_PEER: Proton matches names against DNS SANs only, not IP 127.0.0.1
    d.set_peer_authentication(SSLDomain.VERIFY_PEER)
    if cert:
        d.set_credentials(cert, key, None)
    return d


def connect(url, **kw):
    return BlockingConnection(url, timeout=10 * mqdtest.SLOW, **kw)


def expect_refused(what, url, **kw):
    try:
        c = connect(url, **kw)
        s = c.create_sender("tls-topic")
        s.send(Message(body="must not arrive"))
        c.close()
    except (ConnectionException, LinkDetached, Exception) as e:  # noqa: B014
        log("%s: refused as expected: %s" % (what, e))
        return str(e)
    fail("%s: connection and send succeeded" % what)


def count_messages(url, pki, topic):
    """Browses `topic` as alice over TLS from its first record (a replay: consumed records
    count too); returns how many messages it holds."""
    from proton import symbol
    from proton.reactor import Copy, Filter
    c = connect(url, ssl_domain=client_domain(pki), user="alice", password=PASSWORD, allowed_mechs="PLAIN")
    first = Filter({symbol("rabbitmq:stream-offset-spec"): "first"})
    r = c.create_receiver(topic, options=[Copy(), first], credit=100)
    n = 0
    try:
        while True:
            r.receive(timeout=1)  # browsed deliveries come settled: nothing to accept
            n += 1
    except Exception as e:
        log("browse of %s ended after %d: %r" % (topic, n, e))
    c.close()
    return n


def amqp_tls_header(port, pki, wait_answer=False):
    """AMQP 2.1.0.0 first, then TLS on the same socket, then the SASL header inside TLS.
    The AMQP spec has the server answer with the same header (Proton takes the header
    but never answers it: mqd does). wait_answer: the client reads the answer before it
    sends its ClientHello (a strict client); else it pipelines the ClientHello right after
    the header and takes the answer off the front of what comes back. Returns the answer
    (b"" if none) and the protocol header mqd sent over TLS."""
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(b"AMQP\x02\x01\x00\x00")
    if wait_answer:
        answer = b""
        try:
            while len(answer) < 8:
                got = s.recv(8 - len(answer))
                if not got:
                    break
                answer += got
        except socket.timeout:
            pass
        if answer != b"AMQP\x02\x01\x00\x00":
            s.close()
            return answer, b""
    ctx = ssl.create_default_context(cafile=pki["ca.crt"])
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ctx.wrap_bio(inc, out, server_hostname="localhost")
    echoed, pending, inner = (b"AMQP\x02\x01\x00\x00" if wait_answer else b""), b"", b""
    deadline = time.monotonic() + 10 * mqdtest.SLOW
    state = "handshake"
    while time.monotonic() < deadline and len(inner) < 8:
        try:
            if state == "handshake":
                tls.do_handshake()
                state = "sasl"
                tls.write(b"AMQP\x03\x01\x00\x00")
            else:
                inner += tls.read(8 - len(inner))
                continue
        except ssl.SSLWantReadError:
            pass
        if out.pending:
            s.sendall(out.read())
        data = s.recv(65536)
        if not data:
            break
        pending += data
        if len(echoed) == 0 and pending.startswith(b"AMQP"):
            if len(pending) < 8:
                continue
            echoed, pending = pending[:8], pending[8:]
        inc.write(pending)
        pending = b""
    s.close()
    return echoed, inner


def peer_cert_serial(port, pki):
    ctx = ssl.create_default_context(cafile=pki["ca.crt"])
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        with ctx.wrap_socket(s, server_hostname="localhost") as ts:
            der = ts.getpeercert(binary_form=True)
    return der


def client_hello(pki):
    """The first flight of a TLS client (its ClientHello), as bytes."""
    ctx = ssl.create_default_context(cafile=pki["ca.crt"])
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ctx.wrap_bio(inc, out, server_hostname="localhost")
    try:
        tls.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return out.read()


def closed_by_peer_within(s, seconds):
    """True if the broker closes socket s (EOF or reset) within `seconds`."""
    s.settimeout(seconds)
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            if not s.recv(65536):
                return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False
    return False


def optional_cases(t, pki, coll):
    c_brk, tls_c, url_c = tls_broker(t, "c", pki, "tls_verify_client = optional\ntls_ca = %s\n"
                                     "tls_handshake_timeout_ms = 1000\n" % pki["ca.crt"])

    with coll.case("optional: no certificate, PLAIN works"):
        c = connect(url_c, ssl_domain=client_domain(pki), user="alice", password=PASSWORD,
                    allowed_mechs="PLAIN")
        c.create_sender("opt-topic").send(Message(body="alice without a certificate"))
        c.close()

    with coll.case("optional: no certificate, no EXTERNAL"):
        expect_refused("EXTERNAL without a certificate", url_c, ssl_domain=client_domain(pki),
                       allowed_mechs="EXTERNAL")

    with coll.case("optional: good certificate, EXTERNAL works"):
        c = connect(url_c, ssl_domain=client_domain(pki, pki["carol.crt"], pki["carol.key"]),
                    allowed_mechs="EXTERNAL")
        c.create_sender("opt-topic").send(Message(body="carol with a certificate"))
        c.close()

    for what, cert, key in (("optional: untrusted certificate", "rogue.crt", "rogue.key"),
                            ("optional: expired certificate", "expired.crt", "expired.key")):
        with coll.case(what):
            expect_refused(what, url_c, ssl_domain=client_domain(pki, pki[cert], pki[key]),
                           user="alice", password=PASSWORD, allowed_mechs="PLAIN")

    with coll.case("optional: clients that give up mid-handshake"):
        hello = client_hello(pki)
        for cut in (0, 5, len(hello) // 2, len(hello)):
            s = socket.create_connection(("127.0.0.1", tls_c), timeout=5)
            s.sendall(hello[:cut])
            if cut == len(hello):
                s.recv(65536)  # the ServerHello flight: mid-handshake on the server
            s.close()
        # the same with the AMQP TLS header first
        s = socket.create_connection(("127.0.0.1", tls_c), timeout=5)
        s.sendall(b"AMQP\x02\x01\x00\x00" + hello[:10])
        s.close()
        c_brk.check_alive("after clients closed mid-handshake")
        check(count_messages(url_c, pki, "opt-topic") == 2, "opt-topic: want 2 messages")

    with coll.case("handshake timeout: silent and stalled TLS clients"):
        silent = socket.create_connection(("127.0.0.1", tls_c), timeout=5)
        stalled = socket.create_connection(("127.0.0.1", tls_c), timeout=5)
        stalled.sendall(client_hello(pki))
        check(len(stalled.recv(65536)) > 0, "no ServerHello")
        half_hdr = socket.create_connection(("127.0.0.1", tls_c), timeout=5)
        half_hdr.sendall(b"AMQP\x02")
        for name, s in (("silent", silent), ("stalled", stalled), ("half header", half_hdr)):
            check(closed_by_peer_within(s, 10 * mqdtest.SLOW),
                  "%s client not closed by the handshake timeout" % name)
            s.close()
        check("handshake timeout" in c_brk.log_text(), "no handshake timeout logged")
    c_brk.check_alive()


def body(t):
    if not shutil.which("openssl"):
        skip("openssl CLI not installed")
    pki = make_pki(t.tmpdir)
    coll = mqdtest.Collect()

    # ---------------- broker A: server-verified TLS ----------------
    a, tls_a, url_a = tls_broker(t, "a", pki, "")

    with coll.case("TLS + PLAIN send/receive"):
        c = connect(url_a, ssl_domain=client_domain(pki), user="alice", password=PASSWORD,
                    allowed_mechs="PLAIN")
        s = c.create_sender("tls-topic")
        s.send(Message(body="over tls"))
        r = c.create_receiver("tls-topic")
        m = r.receive(timeout=10)
        check(m.body == "over tls", "body %r" % m.body)
        r.accept()
        c.close()

    with coll.case("PLAIN over plain TCP refused"):
        expect_refused("PLAIN on the plain listener", a.url, user="alice", password=PASSWORD,
                       allowed_mechs="PLAIN")

    with coll.case("wrong password over TLS"):
        err = expect_refused("wrong password", url_a, ssl_domain=client_domain(pki), user="alice",
                             password="nope", allowed_mechs="PLAIN")
        check("unauthorized-access" in err or "Authentication failed" in err,
              "want amqp:unauthorized-access, got %s" % err)

    with coll.case("nothing stored by refused clients"):
        n = count_messages(url_a, pki, "tls-topic")
        check(n == 1, "tls-topic holds %d messages, want only the 1 from the good client" % n)

    with coll.case("AMQP TLS protocol header"):
        for strict in (False, True):
            echoed, inner = amqp_tls_header(tls_a, pki, wait_answer=strict)
            log("AMQP TLS header (%s): answered with %r, then over TLS %r"
                % ("waits for the answer" if strict else "pipelined", echoed, inner))
            check(echoed == b"AMQP\x02\x01\x00\x00", "AMQP TLS header answered with %r" % echoed)
            check(inner == b"AMQP\x03\x01\x00\x00", "after the AMQP TLS header: want the SASL "
                  "header over TLS, got %r" % inner)

    with coll.case("certificate reload on SIGHUP"):
        old_conn = connect(url_a, ssl_domain=client_domain(pki), user="alice", password=PASSWORD,
                           allowed_mechs="PLAIN")
        old_snd = old_conn.create_sender("reload-topic")
        before = peer_cert_serial(tls_a, pki)
        shutil.copy(pki["server2.crt"], pki["server.crt"])
        shutil.copy(pki["server2.key"], pki["server.key"])
        os.kill(a.pid, signal.SIGHUP)
        deadline = time.monotonic() + 10 * mqdtest.SLOW
        after = before
        while after == before and time.monotonic() < deadline:
            time.sleep(0.2)
            after = peer_cert_serial(tls_a, pki)
        check(after != before, "new connections still get the old certificate after SIGHUP")
        old_snd.send(Message(body="old connection still works"))
        old_conn.close()

    # ---------------- broker B: mutual TLS ----------------
    b, _, url_b = tls_broker(t, "b", pki, "tls_verify_client = required\ntls_ca = %s\n" % pki["ca.crt"])

    with coll.case("mutual TLS + EXTERNAL"):
        c = connect(url_b, ssl_domain=client_domain(pki, pki["carol.crt"], pki["carol.key"]),
                    allowed_mechs="EXTERNAL")
        s = c.create_sender("mtls-topic")
        s.send(Message(body="from carol"))
        c.close()

    for what, cert, key in (("untrusted certificate", "rogue.crt", "rogue.key"),
                            ("expired certificate", "expired.crt", "expired.key"),
                            ("no certificate", None, None)):
        with coll.case(what):
            dom = client_domain(pki, pki[cert], pki[key]) if cert else client_domain(pki)
            expect_refused(what, url_b, ssl_domain=dom, allowed_mechs="EXTERNAL")

    with coll.case("only carol's message stored on B"):
        c = connect(url_b, ssl_domain=client_domain(pki, pki["carol.crt"], pki["carol.key"]),
                    allowed_mechs="EXTERNAL")
        r = c.create_receiver("mtls-topic")
        m = r.receive(timeout=10)
        r.accept()
        check(m.body == "from carol", "body %r" % m.body)
        try:
            extra = r.receive(timeout=1)
            fail("an extra message was stored: %r" % extra.body)
        except mqdtest.TestFailure:
            raise
        except Exception:
            pass
        c.close()
    optional_cases(t, pki, coll)
    a.check_alive()
    b.check_alive()
    coll.finish()


if __name__ == "__main__":
    mqdtest.main(body, timeout=240)
