#!/usr/bin/python3
"""SIGHUP reload swaps a whole validated config (issue 18 point 4). One broker, started
with a config file holding log_level = info and no per-address connection limit:

(a) a file whose line 4 is bad (max_unsettled_per_link = many) after good lines that set
    log_level = debug and max_connections_per_ip = 2: the reload is refused, logged as
    "reload failed, keeping the running config: FILE:4: max_unsettled_per_link: ...", and
    nothing changed: 3 connections from 127.0.0.1 open and send (the limit of 2 was not
    applied), and no debug line is logged after the reload (the level was not either).
(b) the same keys without the bad line, plus max_connections = 5 (needs a restart): one
    reload applies both live keys in one step: the log says "2 reloadable keys changed"
    and "2 apply hooks run" (log_level's and auth's), "log_level info -> debug", and names
    exactly max_connections as "needs restart, not applied" (not the --listen and
    --data-dir the harness gives: the command line applies over the file again, as at
    start); with 2 connections open a 3rd from
    127.0.0.1 is closed at once, the 2 still send, and debug lines follow.
(c) the bad file again: refused, and the live limit of 2 from (b) stays in force; mqctl
    reload of it fails with the same FILE:4: max_unsettled_per_link reason.
(d) a file that parses but names a tls_cert that does not load (with log_level = info and
    max_connections_per_ip = 1): refused as a whole ("reload failed, keeping the running
    config: FILE: tls_cert: ..."): the limit stays 2 and debug lines go on.
(e) a broker started with --set max_connections_per_ip = 2: a reload of a file without the
    key keeps it (the command line applies over the file again, as at start), and nothing
    is named as needing a restart.

Before this change (d) applied the log level and the limit although the certificate
failed (only TLS and ACLs were kept), and (e) lost the --set limit and named listen and
data_dir as needing a restart at every reload."""

import os
import re
import signal
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdtest import check, log  # noqa: E402

from proton import Message  # noqa: E402
from proton.utils import BlockingConnection  # noqa: E402

GOOD = ("log_level = debug\n"
        "max_connections_per_ip = 2\n"
        "max_connections = 5\n")
BAD = ("log_level = debug\n"
       "max_connections_per_ip = 2\n"
       "# line 3: a comment\n"
       "max_unsettled_per_link = many\n")


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def log_tail(b, start):
    with open(b.logs[-1], "rb") as f:
        f.seek(start)
        return f.read().decode("utf-8", "replace")


def log_size(b):
    return os.path.getsize(b.logs[-1])


def wait_log(b, start, pattern, seconds):
    """The first match of pattern in the log after byte `start`, waiting up to seconds."""
    deadline = time.monotonic() + seconds * mqdtest.SLOW
    while True:
        m = re.search(pattern, log_tail(b, start))
        if m or time.monotonic() > deadline:
            return m
        time.sleep(0.1)


def reload(b, path, text, pattern):
    write(path, text)
    start = log_size(b)
    os.kill(b.pid, signal.SIGHUP)
    m = wait_log(b, start, pattern, 10)
    check(m is not None, "after SIGHUP no log line matching %r; log since:\n%s"
          % (pattern, log_tail(b, start)))
    log("reload logged: %s" % m.group(0))
    return start


def open_and_send(b, n, tag):
    """n connections from 127.0.0.1, each sends one message; returns them (open)."""
    conns = []
    for i in range(n):
        c = BlockingConnection(b.url, timeout=10 * mqdtest.SLOW)
        c.create_sender("reload68", name="%s-%d" % (tag, i)).send(Message(body="%s %d" % (tag, i)))
        conns.append(c)
    return conns


def closed_within(sock, seconds):
    sock.settimeout(0.2)
    deadline = time.monotonic() + seconds * mqdtest.SLOW
    while time.monotonic() < deadline:
        try:
            if not sock.recv(65536):
                return True
        except socket.timeout:
            continue
        except ConnectionResetError:
            return True
    return False


def debug_lines(text):
    return len(re.findall(r"^\S+ debug ", text, re.M))


def body(t):
    coll = mqdtest.Collect()
    conf = os.path.join(t.tmpdir, "mqd.conf")
    write(conf, "log_level = info\n")
    b = t.broker("reload", conf=conf)

    with coll.case("(a) a bad line changes nothing"):
        pat = (r"reload failed, keeping the running config: %s:4: max_unsettled_per_link: [^\n]*"
               % re.escape(conf))
        start = reload(b, conf, BAD, pat)
        conns = open_and_send(b, 3, "a")
        log("3 connections from 127.0.0.1 open after the refused reload (limit 2 not applied)")
        for c in conns:
            c.close()
        text = log_tail(b, start)
        check(debug_lines(text) == 0, "%d debug lines after a refused reload that set "
              "log_level = debug" % debug_lines(text))
        check("needs restart" not in text and "reloaded " not in text,
              "a refused reload logged an applied one:\n%s" % text)

    with coll.case("(b) a good reload applies the live keys in one step"):
        start = reload(b, conf, GOOD, r"reloaded %s: (\d+) reloadable keys changed, "
                       r"(\d+) apply hooks run" % re.escape(conf))
        text = log_tail(b, start)
        m = re.search(r"reloaded [^\n]*: (\d+) reloadable keys changed, (\d+) apply hooks run",
                      text)
        check(m.group(1) == "2", "reloadable keys changed: %s, want 2 (log_level, "
              "max_connections_per_ip)" % m.group(1))
        # the log level hook and auth's every-reload hook
        check(m.group(2) == "2", "apply hooks run: %s, want 2" % m.group(2))
        check("reload: log_level info -> debug" in text, "no log_level hook line:\n%s" % text)
        # the broker runs with --listen and --data-dir: the command line applies over the
        # file again, so only the file's own restart-only change is named
        nr = re.search(r"reload: ([^\n]*): needs restart, not applied", text)
        check(nr is not None and nr.group(1) == "max_connections",
              "needs restart: %r, want exactly 'max_connections':\n%s"
              % (nr.group(1) if nr else None, text))
        held = open_and_send(b, 2, "b")
        extra = socket.create_connection(("127.0.0.1", b.port), timeout=5 * mqdtest.SLOW)
        check(closed_within(extra, 2.0), "a 3rd connection from 127.0.0.1 was not refused "
              "after max_connections_per_ip = 2 was reloaded")
        extra.close()
        for i, c in enumerate(held):  # the 2 connections are still good
            c.create_sender("reload68", name="b-still-%d" % i).send(Message(body="b still"))
        n_debug = debug_lines(log_tail(b, start))
        check(n_debug > 0, "no debug line after log_level = debug was reloaded")
        log("after the reload: 3rd connection refused, %d debug lines" % n_debug)
        for c in held:
            c.close()

    with coll.case("(c) a refused reload keeps the reloaded limit"):
        pat = r"reload failed, keeping the running config: %s:4: max_unsettled_per_link" % re.escape(conf)
        reload(b, conf, BAD, pat)
        # mqctl reload (the $management RELOAD) gets the same reason
        rc, out, err = mqdtest.mqctl(b.url, "reload")
        check(rc != 0 and re.search(r"%s:4: max_unsettled_per_link" % re.escape(conf), err),
              "mqctl reload of the bad file: exit %d, stderr %r" % (rc, err))
        held = open_and_send(b, 2, "c")
        extra = socket.create_connection(("127.0.0.1", b.port), timeout=5 * mqdtest.SLOW)
        check(closed_within(extra, 2.0), "the limit of 2 was lost by a refused reload")
        extra.close()
        for c in held:
            c.close()
    with coll.case("(d) a certificate that does not load refuses the whole reload"):
        junk = os.path.join(t.tmpdir, "junk.pem")
        write(junk, "not a certificate\n")
        text = "log_level = info\nmax_connections_per_ip = 1\ntls_cert = %s\n" % junk
        start = reload(b, conf, text, r"reload failed, keeping the running config: %s: "
                       r"tls_cert: [^\n]*" % re.escape(conf))
        held = open_and_send(b, 2, "d")  # the limit is still 2, not 1
        extra = socket.create_connection(("127.0.0.1", b.port), timeout=5 * mqdtest.SLOW)
        check(closed_within(extra, 2.0), "a 3rd connection was let in: the limit changed")
        extra.close()
        for c in held:
            c.close()
        after = log_tail(b, start)
        check("reload: log_level" not in after and "reloaded " not in after,
              "a refused reload applied something:\n%s" % after)
        check(debug_lines(after) > 0, "log_level went back to info: no debug line since")
    b.check_alive()

    with coll.case("(e) the command line applies over the file again"):
        conf2 = os.path.join(t.tmpdir, "cli.conf")
        write(conf2, "log_level = info\n")
        c2 = t.broker("cli", conf=conf2, sets={"max_connections_per_ip": "2"})
        start = reload(c2, conf2, "log_level = notice\n", r"reloaded %s: (\d+) reloadable "
                       r"keys changed" % re.escape(conf2))
        text = log_tail(c2, start)
        check("needs restart" not in text, "the command line's listen/data_dir/--set named "
              "as needing a restart:\n%s" % text)
        held = open_and_send(c2, 2, "e")
        extra = socket.create_connection(("127.0.0.1", c2.port), timeout=5 * mqdtest.SLOW)
        check(closed_within(extra, 2.0), "--set max_connections_per_ip = 2 was lost by the "
              "reload: a 3rd connection was let in")
        extra.close()
        for c in held:
            c.close()
        c2.check_alive()
    coll.finish()


if __name__ == "__main__":
    mqdtest.main(body, timeout=120)
