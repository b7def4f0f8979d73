#!/usr/bin/python3
"""The web console off and on, its input checks and the message browser's API (issue 22):
- console_listen unset: the broker's only listening socket is its AMQP port (from
  /proc/PID/fd and /proc/net/tcp*), and the port the console would use refuses; with it
  set, exactly one more socket listens: the console's;
- allow_plain_without_tls = off: a password login is refused (403, naming the key), since
  the console is plain HTTP and the password would cross the network in clear; a SCRAM
  login (POST /api/login/scram twice, the server's signature checked) works, and a wrong
  password, an unknown user, a tampered proof get 401, a user without rights 403, an
  unknown exchange 401, a malformed message 400; with console_session_idle_ms = 10s a
  session used 5 s ago still answers, one idle for 10.5 s gets 401;
- bad input gets a clear status and changes nothing: a %00 or ".." in the path 400, a
  login body that is not JSON 400, a body over 16 KiB refused, an unknown route 404, an
  unknown file 404, PUT refused; / redirects to /ui/; pages carry a CSP and nosniff;
- PEEK: the last N or from an offset, body as stored (a string, a binary with every
  byte value, a map as JSON), application properties; count 0 or 101 -> 400, a missing
  partition -> 404, from past the end -> no messages; peeking consumes nothing: the
  group's committed offset stays and its next consumer starts at offset 0;
- a reset of a group with a live member passes mgmt's 409 through;
- three logins pipelined on one connection: the first is answered 200, any other reply is
  200 or 503 (evhttp 2.1 answers only the first and closes), and a connection that closes
  with its login still under check leaves the broker running."""

import json
import os
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdtest import check, log  # noqa: E402
import consoletest  # noqa: E402
from consoletest import Http  # noqa: E402

from proton import Message, Timeout  # noqa: E402
from proton.utils import BlockingConnection  # noqa: E402


def listening_ports(pid):
    inodes = set()
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            link = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    ports = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                cols = line.split()
                if cols[3] == "0A" and cols[9] in inodes:  # 0A = LISTEN
                    ports.append(int(cols[1].split(":")[1], 16))
    return sorted(ports)


def refused(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
        return False
    except ConnectionRefusedError:
        return True


def pipelined_logins(b):
    """Logins pipelined on one connection, then a connection that closes while its check
    may still run: the replies that come are whole, and the broker lives on (under ASan a
    dangling request would show)."""
    body = json.dumps({"user": "admin", "password": consoletest.PW["admin"]}).encode()
    one = (b"POST /api/login HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
           b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    statuses = []
    for close_early in (False, True):
        s = socket.create_connection(("127.0.0.1", b.console_port), timeout=20 * mqdtest.SLOW)
        s.sendall(one + one + one)
        if close_early:
            s.close()
            continue
        data = b""
        while data.count(b"HTTP/1.1 ") < 3 or not data.rstrip().endswith(b"}"):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        s.close()
        statuses = [int(x.split(b" ")[1]) for x in data.split(b"\r\n") if x.startswith(b"HTTP/1.1 ")]
    check(statuses and statuses[0] == 200 and all(x in (200, 503) for x in statuses),
          "pipelined logins: %r" % statuses)
    st, _ = Http(b.console_port).login("viewer")
    check(st == 200 and b.alive(), "the console still answers after pipelined logins")
    log("3 pipelined logins on one connection answered %r; one more connection closed early" % statuses)


def body(t):
    # off: nothing new listens
    quiet_port = mqdtest.free_port()
    off = t.broker("off", conf=consoletest.write_conf(t, 0, name="off"))
    ports = listening_ports(off.pid)
    check(ports == [off.port], "console off: listening %r, want only AMQP %d" % (ports, off.port))
    check(refused(quiet_port), "console off: port %d refuses" % quiet_port)
    log("console off: the broker listens on %r only" % ports)
    off.stop()

    b = consoletest.console_broker(t)
    ports = listening_ports(b.pid)
    check(ports == sorted([b.port, b.console_port]), "console on: %r" % ports)
    log("console on: %r (AMQP %d, console %d)" % (ports, b.port, b.console_port))

    noplain = consoletest.console_broker(t, name="noplain", plain=False,
                                         extra="console_session_idle_ms = 10s\n")
    st, doc = Http(noplain.console_port).login("admin")
    check(st == 403 and "allow_plain_without_tls" in doc["description"], "no plain: %s %r" % (st, doc))
    # SCRAM: the password never crosses the network, so it works without TLS
    sh = Http(noplain.console_port)
    st, doc = consoletest.scram_login(sh, "admin", consoletest.PW["admin"])
    check(st == 200 and doc["mechanism"] == "SCRAM-SHA-256" and doc["manage"], "SCRAM login: %s %r" % (st, doc))
    st, topics = sh.get("topics")
    check(st == 200 and topics == [], "a SCRAM session reads: %s %r" % (st, topics))
    st, doc = consoletest.scram_login(Http(noplain.console_port), "admin", "wrong")
    check(st == 401, "SCRAM wrong password: %s %r" % (st, doc))
    st, doc = consoletest.scram_login(Http(noplain.console_port), "nobody", "x")
    check(st == 401 and doc["description"] == "wrong user or password", "SCRAM unknown user: %s %r" % (st, doc))
    st, doc = consoletest.scram_login(Http(noplain.console_port), "admin", consoletest.PW["admin"], tamper=True)
    check(st == 401, "SCRAM with a tampered proof: %s" % st)
    st, doc = consoletest.scram_login(Http(noplain.console_port), "producer", consoletest.PW["producer"])
    check(st == 403, "SCRAM user without monitor/manage: %s" % st)
    x = Http(noplain.console_port)
    st, doc = x.request("POST", "/api/login/scram", {"exchange": "0" * 64, "client_final": "c=biws,r=x,p=AA=="})
    check(st == 401, "an unknown exchange: %s %r" % (st, doc))
    st, doc = x.request("POST", "/api/login/scram", {"client_first": "garbage"})
    check(st == 400, "a malformed client-first: %s %r" % (st, doc))
    log("allow_plain_without_tls = off: password login 403; SCRAM login 200 (wrong password, "
        "unknown user, tampered proof 401; no right 403)")
    # console_session_idle_ms = 10s: used within it the session lives on, idle past it ends
    time.sleep(5)
    st, _ = sh.get("overview")
    check(st == 200, "the session 5 s after its last use: %s" % st)
    time.sleep(10.5)
    st, doc = sh.get("overview")
    check(st == 401, "the session 10.5 s idle: %s %r" % (st, doc))
    log("console_session_idle_ms = 10s: 200 after 5 s, 401 after 10.5 s idle")
    noplain.stop()

    h = Http(b.console_port)
    st, doc = h.request("GET", "/")
    check(st == 302 and h.last_headers.get("location") == "/ui/", "/ -> %s %r" % (st, h.last_headers))
    st, page = h.request("GET", "/ui/")
    check(st == 200 and b"<main" in page and h.last_headers["content-type"].startswith("text/html"),
          "/ui/: %s" % st)
    check("default-src 'self'" in h.last_headers["content-security-policy"] and
          h.last_headers["x-content-type-options"] == "nosniff", "headers %r" % h.last_headers)
    for path, want in [("/ui/nothing.js", 404), ("/api/topics/%00", 400), ("/api/../ui/", 400),
                       ("/api/nosuch", 401), ("/elsewhere", 404)]:
        st, _ = h.request("GET", path)
        check(st == want, "GET %s: %s, want %s" % (path, st, want))
    st, doc = h.request("POST", "/api/login", raw=b"user=admin&password=x",
                        headers={"Content-Type": "application/x-www-form-urlencoded"})
    check(st == 400, "a form body: %s %r" % (st, doc))
    st, _ = h.request("POST", "/api/login", raw=b"{" + b" " * 20000 + b"}",
                      headers={"Content-Type": "application/json"})
    check(st in (400, 413), "20 kB body: %s" % st)
    st, _ = h.request("PUT", "/api/topics")
    check(st in (405, 501), "PUT: %s" % st)
    pipelined_logins(b)
    check(h.login("admin")[0] == 200, "login")
    st, _ = h.get("nosuch")
    check(st == 404, "unknown route after login: %s" % st)

    # PEEK
    c = BlockingConnection(b.url, timeout=30 * mqdtest.SLOW)
    s = c.create_sender("p")
    allbytes = bytes(range(256))
    s.send(Message(body="hello peek", properties={"colour": "red", "n": 1}, subject="first"))
    s.send(Message(body=allbytes))
    s.send(Message(body={"k": "v", "n": 3}))
    for i in range(3, 12):
        s.send(Message(body="m%d" % i))
    r = c.create_receiver("p/ConsumerGroups/gp", credit=1)
    m = r.receive(timeout=20 * mqdtest.SLOW)
    r.accept()
    try:
        c.wait(lambda: False, timeout=0.5)
    except Timeout:
        pass
    check(m.body == "hello peek", "first consumed: %r" % m.body)
    st, doc = h.post("groups/p/gp/reset", {"to": "earliest"})
    check(st == 409 and "live members" in doc["description"], "reset with a member: %s %r" % (st, doc))
    c.close()

    st, doc = h.get("groups/p/gp")
    before = [p["committed"] for p in doc["partitions"]]
    check(before == [1], "gp committed after 1: %r" % before)
    st, doc = h.get("topics/p/partitions/0/messages?from=0&count=3")
    check(st == 200 and [m["offset"] for m in doc["messages"]] == [0, 1, 2], "from 0: %s %r" % (st, doc))
    m0, m1, m2 = doc["messages"]
    check(bytes.fromhex(m0["body_hex"]) == b"hello peek" and m0["body_type"] == "value", "m0 %r" % m0)
    check(m0["application_properties"] == {"colour": "red", "n": 1}, "m0 app props %r" % m0)
    # Python Proton sends bytes as an amqp-value binary: the payload is the binary's bytes
    check(bytes.fromhex(m1["body_hex"]) == allbytes and m1["body_size"] == 256 and
          not m1["body_truncated"], "m1 binary: %r" % m1)
    check(m2["body"] == {"k": "v", "n": 3}, "m2 map body: %r" % m2.get("body"))
    log("peek from 0: a string, 256 binary bytes (%s) and a map %r" % (m1["body_type"], m2["body"]))
    st, doc = h.get("topics/p/partitions/0/messages?count=2")
    check([bytes.fromhex(m["body_hex"]) for m in doc["messages"]] == [b"m10", b"m11"] and
          doc["end"] == 12, "last 2: %r" % doc)
    for q, want in [("count=0", 400), ("count=101", 400), ("from=-1", 400), ("count=x", 400)]:
        st, doc = h.get("topics/p/partitions/0/messages?" + q)
        check(st == want, "peek %s: %s %r" % (q, st, doc))
    st, doc = h.get("topics/p/partitions/5/messages")
    check(st == 404, "partition 5: %s" % st)
    st, doc = h.get("topics/nope/partitions/0/messages")
    check(st == 404, "no topic: %s" % st)
    st, doc = h.get("topics/p/partitions/0/messages?from=500")
    check(st == 200 and doc["messages"] == [], "from past the end: %r" % doc)
    st, doc = h.get("groups/p/gp")
    check([p["committed"] for p in doc["partitions"]] == before, "peek moved nothing: %r" % doc)
    c = BlockingConnection(b.url, timeout=30 * mqdtest.SLOW)
    r = c.create_receiver("p/ConsumerGroups/fresh", credit=1)
    m = r.receive(timeout=20 * mqdtest.SLOW)
    check(m.body == "hello peek" and m.annotations["x-opt-offset"] == "0", "fresh group starts at 0")
    c.close()
    st, doc = h.get("topics/p")
    check(doc["messages_out"] >= 2, "messages_out counts consumers only: %r" % doc["messages_out"])


mqdtest.main(body, timeout=180)
