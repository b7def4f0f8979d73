#!/usr/bin/python3
"""uamqp (python3-uamqp, Azure's uAMQP C library) interop: 100 messages sent with
uamqp.SendClient and received with uamqp.ReceiveClient, bodies (and application
properties) intact, in order, with mqd's x-opt-* annotations.

Debian's uamqp connects only over TLS (amqps), so the test runs a local TLS relay
(socat OPENSSL-LISTEN on 127.0.0.1 -> mqd's plain port) with a throwaway self-signed
certificate made by openssl in the test's temp dir; uamqp is given that certificate as
its trust store (verify=PATH). Skips (77) if uamqp, socat or openssl is missing."""

import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdtest import check, log, skip  # noqa: E402

N = 100
TOPIC = "uamqp-topic"


def make_cert(d):
    key = os.path.join(d, "relay.key")
    crt = os.path.join(d, "relay.crt")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", crt,
                    "-days", "2", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    pem = os.path.join(d, "relay.pem")
    with open(pem, "wb") as f:
        f.write(open(crt, "rb").read() + open(key, "rb").read())
    return crt, key, pem


def body(t):
    try:
        import uamqp
        from uamqp import authentication
    except ImportError as e:
        skip("python3-uamqp not importable: %s" % e)
    for tool in ("socat", "openssl"):
        if not shutil.which(tool):
            skip("%s not installed (Debian package %s)" % (tool, tool))
    b = t.broker()
    crt, key, pem = make_cert(t.tmpdir)
    tls_port = mqdtest.free_port()
    relay_log = open(os.path.join(t.tmpdir, "socat.log"), "wb")
    t.spawn(["socat", "-d", "OPENSSL-LISTEN:%d,bind=127.0.0.1,reuseaddr,fork,cert=%s,key=%s,verify=0"
             % (tls_port, crt, key), "TCP:127.0.0.1:%d" % b.port], stdout=relay_log, stderr=subprocess.STDOUT)
    mqdtest.wait_port(tls_port, 15, what="socat TLS relay")
    log("TLS relay 127.0.0.1:%d -> %s" % (tls_port, b.hostport))

    target = "amqps://localhost:%d/%s" % (tls_port, TOPIC)
    auth = authentication.SASLAnonymous(hostname="localhost", port=tls_port, verify=crt)
    sender = uamqp.SendClient(target, auth=auth, debug=bool(os.environ.get("MQD_DEBUG")))
    try:
        for i in range(N):
            m = uamqp.Message(body=("uamqp-%03d" % i).encode(), application_properties={"i": i})
            sender.queue_message(m)
        try:
            results = sender.send_all_messages(close_on_done=False)
        except uamqp.errors.AMQPError as e:
            # uamqp (like the Event Hubs SDKs built on it) puts the whole URI
            # "amqps://HOST:PORT/PATH" into target.address / source.address.
            mqdtest.fail("uamqp send to target address %r failed: %s: %s"
                         % ("amqps://localhost/" + TOPIC, type(e).__name__, e))
    finally:
        sender.close()
    states = [str(r) for r in results]
    check(len(results) == N and all(r == uamqp.constants.MessageState.SendComplete for r in results),
          "uamqp send results: %s" % sorted(set(states)))
    log("uamqp sent %d messages" % N)

    auth = authentication.SASLAnonymous(hostname="localhost", port=tls_port, verify=crt)
    receiver = uamqp.ReceiveClient(target, auth=auth, prefetch=50, timeout=0,
                                   debug=bool(os.environ.get("MQD_DEBUG")))
    got = []
    deadline = time.monotonic() + 60 * mqdtest.SLOW
    try:
        while len(got) < N and time.monotonic() < deadline:
            batch = receiver.receive_message_batch(max_batch_size=50, timeout=2000)
            for m in batch:
                m.accept()
                got.append(m)
        # a short extra wait for unexpected duplicates
        extra = receiver.receive_message_batch(max_batch_size=50, timeout=1000)
        for m in extra:
            m.accept()
            got.append(m)
    finally:
        receiver.close()
    bodies = [b"".join(m.get_data()) for m in got]
    want = [("uamqp-%03d" % i).encode() for i in range(N)]
    check(bodies == want, "uamqp received %d messages; first differences: %s"
          % (len(bodies), [(i, x) for i, x in enumerate(bodies) if i >= N or x != want[i]][:5]))
    for i, m in enumerate(got):
        ap = m.application_properties or {}
        check(ap.get(b"i", ap.get("i")) == i, "message %d: application properties %r" % (i, ap))
        ann = {(k.decode() if isinstance(k, bytes) else str(k)): v for k, v in (m.annotations or {}).items()}
        check(ann.get("x-opt-partition-id") == 0, "message %d: annotations %r" % (i, ann))
        off = ann.get("x-opt-offset")
        off = off.decode() if isinstance(off, bytes) else off
        check(off == str(i) and ann.get("x-opt-sequence-number") == i,
              "message %d: x-opt-offset %r x-opt-sequence-number %r" % (i, off, ann.get("x-opt-sequence-number")))
    log("uamqp received all %d intact, in order" % N)


if __name__ == "__main__":
    mqdtest.main(body, timeout=150)
