#!/usr/bin/python3
"""Election by log end (src/repl/cand.c): the replicas' log-end reports
(/mqd/candidates/<T>/<P>/<node>) are deleted once the election they served is decided,
and a report left from an earlier departure of the same leader in the same epoch is not
read again. A real etcd and three mqd nodes (racks a/b/c, lease_ttl_ms 3000), each
reaching etcd through its own relay (mqdcluster.EtcdProxy); topic r3 with
replication_factor 3, acks = all.

(a) 200 sends accepted by the leader L; the ISR is 3.
(b) F is the follower that does not hold /mqd/controller, O the other one. The test
    writes F's report as a leader that came back in the same epoch would have left it:
    the current epoch, end 1,000,000,000, and leader_rev = an older create_revision than
    L's node key has. F's relay is cut (it can neither report nor renew its lease, so it
    stays a live in-sync replica for about lease_ttl_ms), L is SIGKILLed and its lease
    revoked (its key goes at once; the fast failover may have revoked it first). The controller ignores F's old report (logged), waits
    its 1 s for F, and elects O by O's own report (end 200): etcd names O in epoch 2.
    Without the leader_rev check the old report counted: F, cut off from etcd, was
    elected at once by a log end it never had.
(c) once O is elected no report of r3/0 is left in etcd (F's old one included).
(d) F healed and L restarted: the ISR is 3 again, 100 more sends accepted by O, and the
    three logs are equal byte for byte (300 records)."""

import os
import shutil
import sys
import time
import urllib.error

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdcluster import (Etcd, EtcdProxy, Sender, b64, create_rf3, get_json, post,  # noqa: E402
                        read_keys, start_nodes, stopped_logs_equal, wait_for)
from mqdtest import check, log, skip  # noqa: E402

RACKS = {1: "a", 2: "b", 3: "c"}
KEY = "/mqd/partitions/r3/0"
CANDS = "/mqd/candidates/r3/0/"
STALE_END = 10 ** 9


def send(url, n, prefix):
    s = Sender(url, "r3", n, prefix)
    mqdtest.run_container(s, 60)
    log("%s: %s" % (prefix, s.status()))
    return s


def body(t):
    if shutil.which("etcd") is None:
        skip("etcd is not on PATH (Debian: apt-get install etcd-server)")
    etcd = Etcd(t)
    etcd.start()
    proxies = {i: EtcdProxy(etcd) for i in RACKS}
    brokers = start_nodes(t, etcd, RACKS, via=proxies)
    ps = create_rf3(etcd, brokers[1])
    lid = ps["leader"]
    L = brokers[lid]
    wait_for("both followers fetching", lambda: L.log_text().count("fetches from") >= 2, 20)
    coll = mqdtest.Collect()
    try:
        with coll.case("(a) 200 accepted, ISR of 3"):
            s = send(L.url, 200, "a")
            check(s.accepted == 200 and not s.rejected, s.status())
            wait_for("ISR of 3", lambda: len(get_json(etcd.port, KEY)["isr"]) == 3, 20)
        ctl = get_json(etcd.port, "/mqd/controller")["id"]
        fol = [i for i in RACKS if i != lid]
        fid = fol[0] if ctl == lid else [i for i in fol if i != ctl][0]
        oid = [i for i in fol if i != fid][0]
        log("leader %d, controller %d: F = %d, O = %d" % (lid, ctl, fid, oid))
        with coll.case("(b) F's report from an earlier departure of L is ignored: O elected"):
            nodes = read_keys(etcd.port, "/mqd/nodes/")
            _, lease, lrev = nodes["/mqd/nodes/%d" % lid]
            stale = '{"end":%d,"epoch":%d,"leader_rev":%d}' % (STALE_END, ps["epoch"], lrev - 1)
            post(etcd.port, "/v3/kv/put", {"key": b64(CANDS + str(fid)), "value": b64(stale)})
            proxies[fid].block()
            L.kill()
            t0 = time.monotonic()
            try:
                post(etcd.port, "/v3/lease/revoke", {"ID": str(lease)})
            except urllib.error.HTTPError as e:  # the fast failover revoked it first
                check(e.code == 404, "lease revoke: %s" % e)
                log("L's lease was revoked already (fast failover)")
            st = wait_for("a new leader", lambda: (lambda p: p if p["leader"] != lid else None)(
                get_json(etcd.port, KEY)), 10)
            log("elected %r %.2f s after L's key went" % (st, time.monotonic() - t0))
            check(st["leader"] == oid and st["epoch"] == ps["epoch"] + 1,
                  "state %r: want node %d (F = %d holds the old report)" % (st, oid, fid))
            text = "\n".join(brokers[i].log_text() for i in (oid,))
            n = text.count("%s%d: a report about an earlier departure of the leader: ignored" % (CANDS, fid))
            check(n == 1, "the controller logged ignoring F's old report %d times (once per wait)" % n)
            check("the longest reported log" in text, "the controller did not log electing the longest report")
        with coll.case("(c) no report of r3/0 left once O is elected"):
            wait_for("no report left", lambda: not read_keys(etcd.port, CANDS), 5)
            # the controller logs the deletion when etcd's answer reaches it, which can be
            # a moment after the keys are gone (CI: checked 0 ms after, logged 0.1 s later)
            line = "%s*: 2 log-end reports deleted" % CANDS
            wait_for("the controller's log says it deleted the 2 reports",
                     lambda: line in brokers[oid].log_text(), 5)
    finally:
        proxies[fid].heal()
    with coll.case("(d) F back, L restarted: ISR of 3, 100 more, logs equal"):
        L.start()
        wait_for("ISR of 3", lambda: sorted(get_json(etcd.port, KEY)["isr"]) == [1, 2, 3], 30)
        s = send(brokers[oid].url, 100, "d")
        check(s.accepted == 100 and not s.rejected, s.status())
        stopped_logs_equal(brokers, "r3", 0, oid, 300)
    for p in proxies.values():
        p.stop()
    coll.finish()


if __name__ == "__main__":
    mqdtest.main(body, timeout=240)
