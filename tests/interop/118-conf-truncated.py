#!/usr/bin/python3
"""Issue 32 point 6: a config file cut short does not reload (or start) fail-open.

One broker with allow_anonymous = off, two users (admin: every right; alice: send,
receive and create on orders.* only) and an [acl] of two rules:

(a) SIGHUP with the file emptied: refused ("reload failed, keeping the running config:
    FILE: allow_no_users: no [user NAME] section (the file is empty), but the running
    config had 2 user(s) ... set allow_no_users = on"); admin still logs in and sends
    anywhere, alice is still refused `secret` and still sends to orders.a.
(b) SIGHUP with the file cut before [acl]: refused ("FILE:LINE: [acl]: no [acl] section
    (the file ends at line LINE) ... `allow * all *`"), and mqctl reload of it answers
    with the same reason; alice still cannot send to `secret`.
(c) start with a truncated installed config: the broker stopped, the file cut before
    [acl] (then emptied), a start on the same data dir exits non-zero and logs
    "refusing to start: FILE:LINE: [acl]: ... the config of the last start or reload on
    DATA had 2 rule(s)" (then the users' message); the whole file starts again and
    alice is still restricted.
(d) the explicit forms are taken: an [acl] of `allow * all *` (alice now sends to
    `secret`), then `allow_no_users = on` with no user (admin's login now fails), and a
    restart with that file starts (its census has no user).
(e) the development config (etc/mqd-dev.conf: no users, no [acl]) starts on a new data
    dir and reloads, anonymous clients send."""

import os
import re
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdtest import Collect, check, log, skip  # noqa: E402

from proton import ConnectionException, Message  # noqa: E402
from proton.utils import BlockingConnection, LinkDetached, SendException  # noqa: E402

SLOW = mqdtest.SLOW
PW = {"admin": "admin-pw-1", "alice": "alice-pw-2"}
GLOBAL = "allow_anonymous = off\nallow_plain_without_tls = on\n"
ACL = "[acl]\nallow admin all *\nallow alice send,receive,create orders.*\n"


def passwd(user):
    prog = os.path.join(os.environ.get("MQD_BUILDDIR", ""), "mqd-passwd")
    if not os.access(prog, os.X_OK):
        skip("mqd-passwd not built")
    r = subprocess.run([prog, "--iterations", "1000", user], input=PW[user] + "\n",
                       capture_output=True, text=True, timeout=60 * SLOW)
    check(r.returncode == 0, "mqd-passwd %s: %s" % (user, r.stderr))
    return r.stdout


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def log_size(b):
    return os.path.getsize(b.logs[-1])


def log_since(b, start):
    with open(b.logs[-1], "rb") as f:
        f.seek(start)
        return f.read().decode("utf-8", "replace")


def reload(b, path, text, pattern):
    """Writes text to path, SIGHUPs b, waits for a log line matching pattern."""
    write(path, text)
    start = log_size(b)
    os.kill(b.pid, signal.SIGHUP)
    deadline = time.monotonic() + 15 * SLOW
    while True:
        m = re.search(pattern, log_since(b, start))
        if m or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    check(m is not None, "after SIGHUP no log line matching %r; log since:\n%s"
          % (pattern, log_since(b, start)))
    log("logged: %s" % m.group(0))
    return m


def connect(b, user):
    return BlockingConnection(b.url, timeout=15 * SLOW, user=user, password=PW[user],
                              allowed_mechs="PLAIN")


def sends(b, user, address):
    """True if user could log in and send one message to address, False if refused."""
    try:
        c = connect(b, user)
    except ConnectionException as e:
        log("%s cannot log in: %s" % (user, e))
        return False
    try:
        c.create_sender(address).send(Message(body="%s to %s" % (user, address)))
        return True
    except (LinkDetached, SendException, ConnectionException) as e:
        log("%s -> %s refused: %s" % (user, address, e))
        check("unauthorized-access" in str(e), "refused, but not by the ACL: %s" % e)
        return False
    finally:
        try:
            c.close()
        except Exception:  # noqa: BLE001 - a refused connection may already be closed
            pass


def check_restricted(b, when):
    check(sends(b, "admin", "secret"), "%s: admin cannot send to secret" % when)
    check(sends(b, "alice", "orders.a"), "%s: alice cannot send to orders.a" % when)
    check(not sends(b, "alice", "secret"), "%s: alice sent to secret (ACL gone)" % when)


def start_refused(b, what):
    """Runs b's command line (b stopped); it must exit non-zero. Its output."""
    check(not b.alive(), "broker still running")
    r = subprocess.run(b.argv(), stdin=subprocess.DEVNULL, capture_output=True, text=True,
                       timeout=60 * SLOW)
    out = r.stdout + r.stderr
    check(r.returncode != 0, "%s: mqd started (exit %d):\n%s" % (what, r.returncode, out))
    log("%s: exit %d" % (what, r.returncode))
    return out


def body(t):
    coll = Collect()
    users = passwd("admin") + passwd("alice")
    full = GLOBAL + users + ACL
    cut_before_acl = GLOBAL + users
    conf = os.path.join(t.tmpdir, "mqd.conf")
    write(conf, full)
    cut_line = cut_before_acl.count("\n")
    b = t.broker("guard", conf=conf)
    check_restricted(b, "at start")
    q = re.escape(conf)

    with coll.case("(a) SIGHUP with an empty file keeps the users and the ACL"):
        reload(b, conf, "", r"reload failed, keeping the running config: %s: allow_no_users: "
               r"no \[user NAME\] section \(the file is empty\), but the running config had 2 "
               r"user\(s\): is the file cut short\? To run without users on purpose, set "
               r"allow_no_users = on" % q)
        check_restricted(b, "after the empty reload")

    with coll.case("(b) SIGHUP with the file cut before [acl] is refused"):
        reload(b, conf, cut_before_acl, r"reload failed, keeping the running config: %s:%d: "
               r"\[acl\]: no \[acl\] section \(the file ends at line %d\), but the running "
               r"config had 2 rule\(s\): is the file cut short\? Without one every client may "
               r"do everything; to allow that on purpose, write \[acl\] with the rule "
               r"`allow \* all \*`" % (q, cut_line, cut_line))
        check_restricted(b, "after the cut reload")
        rc, out, err = mqdtest.mqctl("amqp://admin:%s@%s" % (PW["admin"], b.hostport), "reload")
        check(rc != 0 and re.search(r"%s:%d: \[acl\]: no \[acl\] section .*`allow \* all \*`"
                                    % (q, cut_line), err),
              "mqctl reload of the cut file: exit %d, stderr %r" % (rc, err))
        check_restricted(b, "after mqctl reload")
    b.check_alive()

    with coll.case("(c) a start with a truncated installed config is refused"):
        b.stop()
        write(conf, cut_before_acl)
        out = start_refused(b, "cut before [acl]")
        want = (r"refusing to start: %s:%d: \[acl\]: no \[acl\] section \(the file ends at line "
                r"%d\), but the config of the last start or reload on %s had 2 rule\(s\)"
                % (q, cut_line, cut_line, re.escape(b.data_dir)))
        check(re.search(want, out), "no refusal naming the file's end in:\n%s" % out)
        write(conf, "")
        out = start_refused(b, "empty")
        check(re.search(r"refusing to start: %s: allow_no_users: no \[user NAME\] section \(the "
                        r"file is empty\), but the config of the last start or reload on \S+ "
                        r"had 2 user\(s\)" % q, out), "no users' refusal in:\n%s" % out)
        write(conf, full)
        b.start()
        check_restricted(b, "after the refused starts")

    with coll.case("(d) the explicit forms are accepted"):
        reload(b, conf, GLOBAL + users + "[acl]\nallow * all *\n",
               r"reloaded %s: \d+ reloadable keys changed" % q)
        check(sends(b, "alice", "secret"), "allow * all *: alice still refused secret")
        reload(b, conf, GLOBAL + "allow_no_users = on\n" + "[acl]\nallow * all *\n",
               r"reloaded %s: \d+ reloadable keys changed" % q)
        check(not sends(b, "admin", "orders.a"), "admin logged in after the users were removed")
        b.stop()
        b.start()  # the census of the last reload has no users: the file starts
        check(not sends(b, "admin", "orders.a"), "admin logged in after the restart")
    b.check_alive()

    with coll.case("(e) the development config starts and reloads on a new data dir"):
        src = os.environ.get("MQD_SRCDIR") or os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                           "..", "..")
        dev_conf = os.path.join(t.tmpdir, "mqd-dev.conf")
        with open(os.path.join(src, "etc", "mqd-dev.conf")) as f:
            write(dev_conf, f.read())
        d = t.broker("dev", conf=dev_conf)
        reload(d, dev_conf, open(dev_conf).read(), r"reloaded %s: " % re.escape(dev_conf))
        c = BlockingConnection(d.url, timeout=15 * SLOW)
        c.create_sender("dev.topic").send(Message(body="anonymous"))
        c.close()
        d.stop()
        d.start()
        d.check_alive()
    coll.finish()


if __name__ == "__main__":
    mqdtest.main(body, timeout=240)
