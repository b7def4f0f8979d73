#!/usr/bin/python3
"""The console's SCRAM login slots are bounded per client address (issue 32 point 7b).
Before, one client with no credentials starting SCRAM exchanges it never finished held
all 64 slots for their 30 s and locked every admin out (15 of 20 logins failed at 10
requests/s).

A client at 127.0.0.1 sends 80 SCRAM client-first requests (for admin and for names
that do not exist) and never the final: auth_queue_per_ip (8) of them get an exchange,
the other 72 get 503 naming auth_queue_per_ip. Meanwhile (its exchanges still held) an
admin at 127.0.0.2, another loopback address, logs in with SCRAM 5 times out of 5 and
uses the session (GET /api/session); the attacker's address is still refused; a third
address may start its 8 too. The log has at most a line a second for the refusals."""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import consoletest  # noqa: E402
import mqdtest  # noqa: E402
from mqdtest import check, log  # noqa: E402

PER_IP = 8  # auth_queue_per_ip's default
ATTEMPTS = 80


def From(port, source):
    """consoletest's user agent, connecting from the loopback address `source`."""
    return consoletest.Http(port, source)


def first(h, user):
    return h.request("POST", "/api/login/scram", {"client_first": "n,,n=%s,r=%s" % (
        user, os.urandom(12).hex())})


def body(t):
    b = consoletest.console_broker(t)
    port = b.console_port
    coll = mqdtest.Collect()
    attacker = From(port, "127.0.0.1")
    with coll.case("one address holds auth_queue_per_ip exchanges, no more"):
        codes, why = [], set()
        t0 = time.monotonic()
        for i in range(ATTEMPTS):
            st, doc = first(attacker, "admin" if i % 2 else "nobody-%d" % i)
            codes.append(st)
            if st != 200:
                why.add(doc.get("description") if isinstance(doc, dict) else str(doc))
        log("attacker: %d exchanges started, %d refused in %.1f s: %r"
            % (codes.count(200), codes.count(503), time.monotonic() - t0, why))
        check(codes.count(200) == PER_IP, "the attacker started %d exchanges (want %d)"
              % (codes.count(200), PER_IP))
        check(codes.count(503) == ATTEMPTS - PER_IP, "refusals: %r" % sorted(set(codes)))
        check(all("auth_queue_per_ip" in w for w in why), "refusal reasons: %r" % why)
    with coll.case("an admin from another address logs in meanwhile"):
        ok = 0
        for i in range(5):
            admin = From(port, "127.0.0.2")
            st, doc = consoletest.scram_login(admin, "admin", consoletest.PW["admin"])
            check(st == 200, "admin login %d from 127.0.0.2: %s %r" % (i, st, doc))
            st, doc = admin.get("session")
            check(st == 200 and doc["user"] == "admin", "session: %s %r" % (st, doc))
            ok += 1
        log("admin logged in %d of 5 times from 127.0.0.2" % ok)
        st, doc = consoletest.scram_login(From(port, "127.0.0.1"), "admin", consoletest.PW["admin"])
        check(st == 503, "the attacker's own address got %s (want 503 while its %d exchanges "
              "are held)" % (st, PER_IP))
        third = From(port, "127.0.0.3")
        got = [first(third, "nobody")[0] for _ in range(PER_IP + 1)]
        check(got == [200] * PER_IP + [503], "a third address: %r" % got)
    with coll.case("refusals logged once a second"):
        text = b.log_text()
        n = text.count("SCRAM login refused")
        log("%d 'SCRAM login refused' lines" % n)
        check(1 <= n <= 10 * mqdtest.SLOW + 5, "%d refusal lines for %d refusals" % (n, ATTEMPTS))
    coll.finish()


if __name__ == "__main__":
    mqdtest.main(body, timeout=180)
