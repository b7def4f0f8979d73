#!/usr/bin/python3
"""Issue 32 point 7(a): a client's string cannot write a line that looks like mqd's own.

Each injection carries a newline followed by a complete forged line in mqd's format
("2026-01-01T00:00:00.000Z notice auth: SASL PLAIN peer=10.6.6.6:1 user=admin"):

- a SASL PLAIN user name sent before login (raw sasl-init; also a byte that is not
  UTF-8 and a carriage return): refused, logged as "SASL refused ... user=x\\n2026-...";
- a link address (with a U+2028 line separator as well) alice's sender is refused: logged
  as "refused attach: ... address 'secret\\n2026-...\\u2028tail'";
- a $cbs put-token audience (a broker on the built-in defaults): "$cbs put-token
  refused ... audience=hub\\n2026-...";
- a web console login name (POST /api/login, wrong password): "login refused ...
  user=x\\n2026-...".

Then, in both brokers' logs, every line starts with mqd's own prefix (time, level,
subsystem), no line starts with the forged time, and each injection appears escaped
(\\n, \\r, \\xff, \\u2028) inside the line that logged it."""

import http.client
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

from proton import Data, Described, Message, symbol, ulong  # noqa: E402
from proton.utils import BlockingConnection, LinkDetached, SendException  # noqa: E402

SLOW = mqdtest.SLOW
PW = "alice-pw-119"
FORGED_TIME = "2026-01-01T00:00:00.000Z"
FORGED = FORGED_TIME + " notice auth: SASL PLAIN peer=10.6.6.6:1 user=admin"
# an mqd log line: "YYYY-MM-DDTHH:MM:SS.mmmZ LEVEL subsys: message"
LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (error|warn|notice|info|debug) "
                  r"[\w.-]+: ")


def passwd(user):
    prog = os.path.join(os.environ.get("MQD_BUILDDIR", ""), "mqd-passwd")
    if not os.access(prog, os.X_OK):
        skip("mqd-passwd not built")
    r = subprocess.run([prog, "--iterations", "1000", user], input=PW + "\n",
                       capture_output=True, text=True, timeout=60 * SLOW)
    check(r.returncode == 0, "mqd-passwd %s: %s" % (user, r.stderr))
    return r.stdout


def frame(body, ftype=1):
    return struct.pack(">IBBH", 8 + len(body), 2, ftype, 0) + body


def encode(descriptor, fields):
    d = Data()
    d.put_object(Described(ulong(descriptor), fields))
    return d.encode()


def raw_plain(port, user_bytes, pw=b"wrong"):
    """SASL header, sasl-init PLAIN with user_bytes; the outcome code."""
    s = socket.create_connection(("127.0.0.1", port), timeout=15 * SLOW)
    try:
        s.sendall(b"AMQP\x03\x01\x00\x00")
        s.sendall(frame(encode(0x41, [symbol("PLAIN"), b"\0" + user_bytes + b"\0" + pw, None])))
        data = b""
        deadline = time.monotonic() + 15 * SLOW
        while b"\x00\x53\x44" not in data and time.monotonic() < deadline:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        i = data.find(b"\x00\x53\x44")
        check(i >= 0, "no sasl-outcome in %r" % data)
        return data[data.find(b"\x50", i + 3) + 1]
    finally:
        s.close()


def wait_log(b, needle, what):
    deadline = time.monotonic() + 15 * SLOW
    while time.monotonic() < deadline:
        if needle in b.log_text():
            return
        time.sleep(0.1)
    fail_text = b.log_text()[-4000:]
    check(False, "%s: %r not in the log:\n%s" % (what, needle, fail_text))


def check_lines(b):
    """Every line of every start's log is one of mqd's; none starts with the forged time."""
    n = 0
    for p in b.logs:
        with open(p, "rb") as f:
            for raw in f.read().split(b"\n"):
                if not raw:
                    continue
                n += 1
                line = raw.decode("utf-8", "replace")
                check(LINE.match(line), "%s: a line that is not mqd's: %r" % (b.name, line))
                check(not line.startswith(FORGED_TIME), "%s: forged line: %r" % (b.name, line))
    log("%s: %d lines, all mqd's own" % (b.name, n))


def console_login(port, user, pw):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30 * SLOW)
    try:
        c.request("POST", "/api/login", body=json.dumps({"user": user, "password": pw}).encode(),
                  headers={"Content-Type": "application/json", "Accept": "application/json"})
        r = c.getresponse()
        r.read()
        return r.status
    finally:
        c.close()


def body(t):
    coll = Collect()
    console_port = mqdtest.free_port()
    conf = os.path.join(t.tmpdir, "auth.conf")
    with open(conf, "w") as f:
        f.write("allow_anonymous = off\nallow_plain_without_tls = on\n"
                "console_listen = 127.0.0.1:%d\n" % console_port)
        f.write(passwd("alice"))
        f.write("[acl]\nallow alice send,receive,create orders.*\n"
                "allow alice monitor $management\n")
    a = t.broker("auth", conf=conf)
    mqdtest.wait_port(console_port, 15 * SLOW, a.proc, "console")

    with coll.case("SASL PLAIN user name before login"):
        user = b"x\n" + FORGED.encode() + b"\r\xff"
        code = raw_plain(a.port, user)
        check(code == 1, "sasl-outcome %d, want 1 (auth)" % code)
        wait_log(a, "mech=PLAIN user=x\\n%s\\r\\xff reason=unknown user" % FORGED, "SASL refusal")

    with coll.case("a refused link address"):
        c = BlockingConnection(a.url, timeout=15 * SLOW, user="alice", password=PW,
                               allowed_mechs="PLAIN")
        addr = "secret\n%s\u2028tail" % FORGED
        try:
            c.create_sender(addr).send(Message(body="must not arrive"))
            check(False, "alice sent to %r" % addr)
        except (LinkDetached, SendException) as e:
            log("refused as expected: %s" % str(e)[:200])
        c.close()
        wait_log(a, "refused attach: ", "attach refusal")
        wait_log(a, "address 'secret\\n%s\\u2028tail'" % FORGED, "attach refusal's address")

    with coll.case("a web console login name"):
        st = console_login(console_port, "x\n" + FORGED, "wrong")
        check(st == 401, "console login: status %d, want 401" % st)
        wait_log(a, "login refused peer=127.0.0.1:", "console refusal")
        wait_log(a, "user=x\\n%s: " % FORGED, "console refusal's user")
    a.check_alive()

    b = t.broker("cbs")  # built-in defaults: anonymous, sas_required = auto on loopback
    with coll.case("a $cbs audience"):
        c = BlockingConnection(b.url, timeout=15 * SLOW)
        rx = c.create_receiver("$cbs", name="cbs-replies")
        tx = c.create_sender("$cbs")
        aud = "sb://127.0.0.1/hub\n%s" % FORGED
        tx.send(Message(body="not a token", reply_to="cbs-replies",
                        properties={"operation": "put-token",
                                    "type": "servicebus.windows.net:sastoken", "name": aud}))
        try:
            reply = rx.receive(timeout=10 * SLOW)
            log("put-token reply: %r" % reply.properties)
        except Exception as e:  # noqa: BLE001 - the log is what this case checks
            log("no put-token reply: %s" % e)
        c.close()
        wait_log(b, "$cbs put-token refused peer=", "put-token refusal")
        wait_log(b, "audience=sb://127.0.0.1/hub\\n%s: 401" % FORGED, "put-token audience")
    b.check_alive()

    with coll.case("every line is mqd's own"):
        check_lines(a)
        check_lines(b)
    coll.finish()


if __name__ == "__main__":
    mqdtest.main(body, timeout=180)
