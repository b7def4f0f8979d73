#!/usr/bin/python3
"""AMQP 0-9-1 over TLS: the protocol header chooses the front end on an amqps://
listener too (docs/amqp091.md). With allow_plain_without_tls = off (the installed
config's setting):
- pika over TLS (the test CA, server name checked) logs in with PLAIN, publishes 200
  messages with confirms and consumes them back in order; a Proton client on the same
  amqps:// listener reads one of them;
- pika on the plain listener is refused (403 ACCESS_REFUSED: no password in clear);
- a wrong password over TLS is refused (403)."""

import os
import shutil
import ssl
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdtest import check, fail, log, skip  # noqa: E402

from proton import SSLDomain  # noqa: E402
from proton.utils import BlockingConnection  # noqa: E402

try:
    import pika
    import pika.exceptions
except ImportError:
    pika = None

PW = "alice-pw"


def sh(args, cwd):
    r = subprocess.run(args, cwd=cwd, capture_output=True, timeout=60)
    if r.returncode != 0:
        fail("%s failed: %s" % (" ".join(args), r.stderr.decode(errors="replace")))


def make_pki(d):
    sh(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
        "-days", "2", "-subj", "/CN=mqd test CA"], d)
    with open(os.path.join(d, "server.ext"), "w") as f:
        f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    sh(["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
        "-subj", "/CN=localhost"], d)
    sh(["openssl", "x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "server.crt", "-days", "2", "-extfile", "server.ext"], d)


def mqd_passwd(user, pw):
    prog = os.path.join(os.environ.get("MQD_BUILDDIR", ""), "mqd-passwd")
    if not os.access(prog, os.X_OK):
        skip("mqd-passwd not built")
    r = subprocess.run([prog, "--both", "--iterations", "4096", user], input=pw + "\n",
                       capture_output=True, text=True, timeout=30)
    check(r.returncode == 0, "mqd-passwd: %s" % r.stderr)
    return r.stdout


def params(port, d, pw=PW, tls=True):
    kw = {}
    if tls:
        ctx = ssl.create_default_context(cafile=os.path.join(d, "ca.crt"))
        kw["ssl_options"] = pika.SSLOptions(ctx, "localhost")
    return pika.ConnectionParameters(host="127.0.0.1", port=port,
                                     credentials=pika.PlainCredentials("alice", pw),
                                     connection_attempts=1, socket_timeout=10 * mqdtest.SLOW,
                                     heartbeat=30, **kw)


def body(t):
    if pika is None:
        skip("python3-pika is not installed")
    if not shutil.which("openssl"):
        skip("openssl CLI not installed")
    d = os.path.join(t.tmpdir, "pki")
    os.makedirs(d)
    make_pki(d)
    conf = os.path.join(t.tmpdir, "mqd.conf")
    with open(conf, "w") as f:
        f.write("allow_anonymous = off\nallow_plain_without_tls = off\n")
        f.write("tls_cert = %s\ntls_key = %s\n" % (os.path.join(d, "server.crt"), os.path.join(d, "server.key")))
        f.write(mqd_passwd("alice", PW))
        f.write("[acl]\nallow alice send,receive,create q.*\n")
    tport = mqdtest.free_port()
    b = t.broker("tls", conf=conf, args=["--listen", "amqps://127.0.0.1:%d" % tport])
    mqdtest.wait_port(tport, 15 * mqdtest.SLOW)
    coll = mqdtest.Collect()

    with coll.case("pika over TLS: 200 confirmed publishes, consumed in order"):
        conn = pika.BlockingConnection(params(tport, d))
        ch = conn.channel()
        ch.queue_declare(queue="q.tls", durable=True)
        ch.confirm_delivery()
        for i in range(200):
            ch.basic_publish(exchange="", routing_key="q.tls", body=b"t%d" % i + b"x" * (i * 50))
        ch.basic_qos(prefetch_count=20)
        got = []
        for m, p, bd in ch.consume("q.tls", inactivity_timeout=5 * mqdtest.SLOW):
            check(m is not None, "consumed %d of 200" % len(got))
            got.append(bd)
            ch.basic_ack(m.delivery_tag)
            if len(got) == 199:
                break
        ch.cancel()
        conn.close()
        check(got == [b"t%d" % i + b"x" * (i * 50) for i in range(199)], "bodies out of order or wrong")

    with coll.case("Proton on the same amqps:// listener reads the last one"):
        dom = SSLDomain(SSLDomain.MODE_CLIENT)
        dom.set_trusted_ca_db(os.path.join(d, "ca.crt"))
        dom.set_peer_authentication(SSLDomain.VERIFY_PEER)
        c = BlockingConnection("amqps://127.0.0.1:%d" % tport, ssl_domain=dom, user="alice", password=PW,
                               allowed_mechs="PLAIN", timeout=10 * mqdtest.SLOW)
        r = c.create_receiver("q.tls", credit=1)
        m = r.receive(timeout=10 * mqdtest.SLOW)
        r.accept()
        check(bytes(m.body) == b"t199" + b"x" * (199 * 50), "Proton got %r" % bytes(m.body)[:10])
        c.close()

    with coll.case("plain listener: PLAIN refused (allow_plain_without_tls = off)"):
        try:
            pika.BlockingConnection(params(b.port, d, tls=False)).close()
            check(False, "PLAIN in clear was accepted")
        except pika.exceptions.ProbableAuthenticationError as e:
            check("allow_plain_without_tls" in repr(e), "refusal: %r" % e)
            log("refused: %r" % e)

    with coll.case("wrong password over TLS"):
        try:
            pika.BlockingConnection(params(tport, d, pw="nope")).close()
            check(False, "a wrong password was accepted")
        except pika.exceptions.ProbableAuthenticationError as e:
            check("ACCESS_REFUSED" in repr(e), "refusal: %r" % e)
    coll.finish()


if __name__ == "__main__":
    mqdtest.main(body, timeout=180)
