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
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
import amqp091test as a9  # noqa: E402
from mqdtest import check, log, skip  # noqa: E402

from proton import SSLDomain  # noqa: E402

pika = a9.pika

PW = "alice-pw"


def params(port, d, pw=PW, tls=True):
    return a9.params(port, "alice", pw, os.path.join(d, "ca.crt") if tls else None)


def body(t):
    a9.need_pika()
    if not shutil.which("openssl"):
        skip("openssl CLI not installed")
    d = os.path.join(t.tmpdir, "pki")
    os.makedirs(d)
    a9.make_pki(d)
    conf = os.path.join(t.tmpdir, "mqd.conf")
    with open(conf, "w") as f:
        f.write("allow_anonymous = off\nallow_plain_without_tls = off\n")
        f.write("tls_cert = %s\ntls_key = %s\n" % (os.path.join(d, "server.crt"), os.path.join(d, "server.key")))
        f.write(a9.mqd_passwd("alice", PW))
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
        c = a9.proton_conn("amqps://127.0.0.1:%d" % tport, "alice", PW, ssl_domain=dom)
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
