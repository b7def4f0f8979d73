#!/usr/bin/python3
"""systemd notify protocol: with NOTIFY_SOCKET set, mqd sends READY=1 only once it has
recovered its data dir and its port accepts connections, and STOPPING=1 on SIGTERM."""

import os
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdtest import check, log, send  # noqa: E402

from proton import Message  # noqa: E402


def wait_msg(sock, timeout):
    sock.settimeout(timeout * mqdtest.SLOW)
    try:
        return sock.recv(4096).decode()
    except socket.timeout:
        return None


def body(t):
    # a data dir with existing topics, so READY=1 has a recovery to wait for
    b = t.broker()
    for i in range(5):
        send(b.url, "t%d" % i, [Message(body="m%d" % n) for n in range(50)])
    b.stop()

    path = os.path.join(t.tmpdir, "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    env = dict(os.environ, NOTIFY_SOCKET=path)
    logf = open(os.path.join(t.tmpdir, "notify-run.log"), "wb")
    p = t.spawn(b.argv(), env=env, stdout=logf, stderr=subprocess.STDOUT)
    msg = wait_msg(sock, 30)
    check(msg is not None, "no notification within 30s")
    log("notify: %r" % msg)
    check("READY=1" in msg.split("\n"), "first notification is not READY=1: %r" % msg)
    # the port must already accept connections when READY=1 arrives
    s = socket.create_connection(("127.0.0.1", b.port), timeout=2)
    s.close()
    check("STATUS=serving 5 topics" in msg, "READY before recovery of the 5 topics? %r" % msg)
    os.kill(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + 30 * mqdtest.SLOW
    got = []
    while time.monotonic() < deadline:
        m = wait_msg(sock, 5)
        if m is None:
            break
        got.append(m)
        if "STOPPING=1" in m.split("\n"):
            break
    log("after SIGTERM: %r" % got)
    check(any("STOPPING=1" in m.split("\n") for m in got), "no STOPPING=1 after SIGTERM: %r" % got)
    check(p.wait(timeout=30 * mqdtest.SLOW) == 0, "mqd exit status %s after SIGTERM" % p.returncode)


mqdtest.main(body, timeout=120)
