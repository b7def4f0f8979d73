#!/usr/bin/python3
"""AMQP 0-9-1 with rabbitmq-c's command-line clients (Debian's amqp-tools) and Proton.
- amqp-declare-queue creates the queue (a topic); 100 lines published with
  `amqp-publish -l -p -C text/plain -H "origin: tools"` are read back: the first 50 by a
  Proton receiver (body as a data section, content-type, durable, the header as an
  application property), the other 50 by `amqp-consume -c 50 -p 10 cat`, in order.
- 20 messages sent with Proton are printed by amqp-consume in order.
- amqp-publish with a wrong password fails (403 at login) and stores nothing."""

import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
import amqp091test as a9  # noqa: E402
from mqdtest import check, log, skip  # noqa: E402

from proton import Message  # noqa: E402

PW = "alice-pw"


def tool(b, name, *args, stdin=None, pw=PW):
    argv = [name, "--server=127.0.0.1", "--port=%d" % b.port, "--username=alice",
            "--password=%s" % pw] + list(args)
    r = subprocess.run(argv, input=stdin, capture_output=True, timeout=60 * mqdtest.SLOW)
    log("%s -> %d %s" % (" ".join([name] + list(args)), r.returncode, r.stderr.decode()[-200:].strip()))
    return r


def proton_conn(b):
    return a9.proton_conn(b.url, "alice", PW)


def body(t):
    for prog in ("amqp-publish", "amqp-consume", "amqp-declare-queue"):
        if subprocess.run(["sh", "-c", "command -v " + prog], capture_output=True).returncode != 0:
            skip("amqp-tools is not installed")
    conf = os.path.join(t.tmpdir, "mqd.conf")
    with open(conf, "w") as f:
        f.write("allow_anonymous = off\n" + a9.mqd_passwd("alice", PW))
        f.write("[acl]\nallow alice send,receive,create q.*\n")
    b = t.broker("tools", conf=conf)
    coll = mqdtest.Collect()

    with coll.case("amqp-publish 100 lines: 50 read by Proton, 50 by amqp-consume"):
        r = tool(b, "amqp-declare-queue", "-q", "q.tools", "-d")
        check(r.returncode == 0 and r.stdout.strip() == b"q.tools", "declare: %r" % r.stdout)
        lines = "".join("line-%03d\n" % i for i in range(100)).encode()
        r = tool(b, "amqp-publish", "-r", "q.tools", "-l", "-p", "-C", "text/plain", "-H", "origin: tools",
                 stdin=lines)
        check(r.returncode == 0, "amqp-publish failed")
        c = proton_conn(b)
        rcv = c.create_receiver("q.tools", credit=10)
        for i in range(50):
            m = rcv.receive(timeout=10 * mqdtest.SLOW)
            rcv.accept()
            check(bytes(m.body).rstrip(b"\n") == b"line-%03d" % i, "message %d: %r" % (i, m.body))
            check(m.content_type == "text/plain" and m.durable, "message %d: %r %r" % (i, m.content_type, m.durable))
            check(m.properties == {"origin": "tools"}, "message %d: properties %r" % (i, m.properties))
        rcv.close()
        c.close()
        r = tool(b, "amqp-consume", "-q", "q.tools", "-c", "50", "-p", "10", "cat")
        check(r.returncode == 0, "amqp-consume failed")
        got = r.stdout.decode().split()
        check(got == ["line-%03d" % i for i in range(50, 100)], "amqp-consume printed %r" % got[:5])

    with coll.case("sent with Proton, printed by amqp-consume"):
        c = proton_conn(b)
        s = c.create_sender("q.tools2")
        for i in range(20):
            m = Message(body=("p-%02d\n" % i).encode())
            m.inferred = True
            s.send(m)
        c.close()
        r = tool(b, "amqp-consume", "-q", "q.tools2", "-c", "20", "cat")
        check(r.returncode == 0, "amqp-consume failed")
        got = r.stdout.decode().split()
        check(got == ["p-%02d" % i for i in range(20)], "amqp-consume printed %r" % got)

    with coll.case("wrong password: refused, nothing stored"):
        r = tool(b, "amqp-publish", "-r", "q.tools2", "-b", "nope", pw="wrong")
        check(r.returncode != 0, "amqp-publish with a wrong password succeeded")
        c = proton_conn(b)
        rcv = c.create_receiver("q.tools2", credit=1)
        try:
            m = rcv.receive(timeout=1 * mqdtest.SLOW)
            check(False, "something was stored: %r" % m.body)
        except mqdtest.TestFailure:
            raise
        except Exception:
            pass
        c.close()
    coll.finish()


if __name__ == "__main__":
    mqdtest.main(body, timeout=180)
