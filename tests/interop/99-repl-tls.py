#!/usr/bin/python3
"""Replication over TLS (issue 19, "TLS between nodes"): a real etcd and three real mqd
nodes on loopback, each with a plain listener (clients, mqctl) and an amqps:// listener
with its own certificate (CN n<i>, SAN IP:127.0.0.1) signed by a test CA; every node has
replication_tls = on, replication_ca_file = that CA, replication_user = repl.

(z) replication_tls = on without an amqps:// listener: mqd refuses to start (exit 1),
    the error names replication_tls.
(r) each node registers its TLS listener as repl_address in etcd next to its (plain)
    address.
(a) 1,000 acks = all sends to the leader: all accepted.
(b) the leader's `mqctl --json connection list` shows the two followers' fetch
    connections (user repl, SASL PLAIN) with tls true and a TLSv1.2/1.3 version and a
    cipher.
(c) a plain-TCP $repl/r3/0 attach, logged in as repl with the right password (SASL
    PLAIN over the plain listener) and a follower's node id, is refused with
    amqp:unauthorized-access "replication requires TLS" and receives nothing.
(d) the three logs of r3/0 are byte-equal with 1,000 records (read while quiet).
(f) the leader epoch on the wire (mqd:epoch on the fetch attach), over TLS as repl: a
    follower claiming a newer epoch than the leader's is refused with
    amqp:precondition-failed and the leader reads its partition key again (logged; etcd
    still names it, so its next 10 sends are accepted); one claiming an older epoch is
    refused with mqd:repl:stale-epoch; neither receives anything.
(e) a follower restarted with the wrong CA (another test CA) never gets in sync: its log
    says the certificate failed verification, etcd's ISR drops it (replica_lag_ms) and
    stays without it, 200 further sends are accepted by the other two, and its log keeps
    exactly the 1,010 records it had."""

import json
import os
import re
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdcluster import (repl_user_sets, Etcd, Props, Sender, cluster_sets, count_records, fetch_conn,  # noqa: E402
                        get_json, partition_bytes, read_keys, wait_for)
from mqdtest import SLOW, check, fail, log, skip  # noqa: E402
from proton import SSLDomain, uint, ulong  # noqa: E402

N = 1000
MORE = 200
RACKS = {1: "a", 2: "b", 3: "c"}
LAG_MS = int(3000 * SLOW)


def sh(args, cwd):
    r = subprocess.run(args, cwd=cwd, capture_output=True, timeout=60)
    if r.returncode != 0:
        fail("%s failed: %s" % (" ".join(args), r.stderr.decode(errors="replace")))


def make_pki(d):
    """ca.crt signs n1..n3 (SAN IP:127.0.0.1, the host followers verify); wrong-ca.crt
    signs nothing of theirs."""
    for ca in ("ca", "wrong-ca"):
        sh(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", ca + ".key",
            "-out", ca + ".crt", "-days", "2", "-subj", "/CN=mqd test " + ca], d)
    with open(os.path.join(d, "node.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\n")
    for i in RACKS:
        n = "n%d" % i
        sh(["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", n + ".key", "-out",
            n + ".csr", "-subj", "/CN=" + n], d)
        sh(["openssl", "x509", "-req", "-in", n + ".csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", n + ".crt", "-days", "2", "-extfile", "node.ext"], d)
    return {k: os.path.join(d, k) for k in ("ca.crt", "wrong-ca.crt")}




class PlainFetch(mqdtest.Client):
    """A $repl/ receiver logged in with SASL PLAIN as user/password: over plain TCP, or
    over TLS verified with ca when given."""

    def __init__(self, url, address, props, user, password, ca=None):
        super().__init__()
        self.url, self.address, self.props = url, address, props
        self.user, self.password, self.ca = user, password, ca
        self.link_cond = None
        self.got = 0

    def on_start(self, e):
        kw = {}
        if self.ca:
            dom = SSLDomain(SSLDomain.MODE_CLIENT)
            dom.set_trusted_ca_db(self.ca)
            dom.set_peer_authentication(SSLDomain.VERIFY_PEER)
            kw["ssl_domain"] = dom
        c = self.connect(e.container, self.url, user=self.user, password=self.password,
                         allowed_mechs="PLAIN", allow_insecure_mechs=not self.ca, **kw)
        e.container.create_receiver(c, self.address, options=[Props(self.props)])

    def on_link_opened(self, e):
        e.container.schedule(1.0 * SLOW, self)

    def on_timer_task(self, e):
        self.finish()

    def on_message(self, e):
        self.got += 1

    def on_link_error(self, e):
        c = e.link.remote_condition
        self.link_cond = (c.name, c.description) if c else (None, None)
        self.finish()


def refuses_without_tls_listener(t, etcd, auth):
    """(z): the config check, before anything is started."""
    b = t.broker("z", start=False, sets=dict(cluster_sets(etcd, 9, "z"), replication_tls="on",
                                             **auth))
    r = subprocess.run(b.argv(), stdin=subprocess.DEVNULL, capture_output=True,
                       timeout=30 * SLOW)
    out = (r.stdout + r.stderr).decode(errors="replace")
    log("without a TLS listener: exit %d: %s" % (r.returncode, out.strip()[-300:]))
    check(r.returncode != 0, "mqd started with replication_tls = on and no amqps:// listener")
    check("replication_tls" in out and "amqps://" in out, "the error does not name the key: %r"
          % out[-300:])
    check(not read_keys(etcd.port, "/mqd/nodes/9"), "the refused node registered in etcd")


def node_broker(t, etcd, i, pki_dir, ca, auth):
    tport = mqdtest.free_port()
    sets = cluster_sets(etcd, i, RACKS[i], replica_lag_ms=LAG_MS, replication_tls="on",
                        replication_ca_file=ca,
                        tls_cert=os.path.join(pki_dir, "n%d.crt" % i),
                        tls_key=os.path.join(pki_dir, "n%d.key" % i))
    sets.update(auth)
    b = t.broker("n%d" % i, start=False, sets=sets,
                 args=["--listen", "amqps://127.0.0.1:%d" % tport])
    b.tls_port = tport
    return b


def partition(etcd):
    return get_json(etcd.port, "/mqd/partitions/r3/0")


def body(t):
    if shutil.which("etcd") is None:
        skip("etcd is not on PATH (Debian: apt-get install etcd-server)")
    if shutil.which("openssl") is None:
        skip("openssl CLI not available")
    pki_dir = os.path.join(t.tmpdir, "pki")
    os.makedirs(pki_dir)
    pki = make_pki(pki_dir)
    etcd = Etcd(t)
    etcd.start()
    auth = repl_user_sets()
    coll = mqdtest.Collect()
    with coll.case("(z) replication_tls = on without a TLS listener: refused"):
        refuses_without_tls_listener(t, etcd, auth)
    brokers = {i: node_broker(t, etcd, i, pki_dir, pki["ca.crt"], auth) for i in RACKS}
    for b in brokers.values():
        b.start()
    wait_for("3 nodes in etcd", lambda: len(read_keys(etcd.port, "/mqd/nodes/")) == 3, 20)
    with coll.case("(r) repl_address in each node's etcd key"):
        for i, b in brokers.items():
            nd = get_json(etcd.port, "/mqd/nodes/%d" % i)
            check(nd["address"] == b.hostport and nd.get("repl_address") == "127.0.0.1:%d"
                  % b.tls_port, "node %d registered %r (plain %s, TLS port %d)"
                  % (i, nd, b.hostport, b.tls_port))
    rc, out, err = mqdtest.mqctl(brokers[1].url, "topic", "create", "r3", "--partitions", "1",
                                 "--config", "replication_factor=3")
    check(rc == 0, "mqctl topic create: %s" % (out + err))
    ps = wait_for("/mqd/partitions/r3/0", lambda: partition(etcd), 10)
    leader = ps["leader"]
    followers = [i for i in RACKS if i != leader]
    L = brokers[leader]
    wait_for("both followers fetching", lambda: all(
        "node %d fetches from" % f in L.log_text() for f in followers), 30)
    with coll.case("(a) %d acks=all sends accepted" % N):
        s = Sender(L.url, "r3", N, "m")
        mqdtest.run_container(s, 120)
        log("sender: %s" % s.status())
        check(s.link_cond is None and s.accepted == N and not s.rejected,
              "%s, link %r, rejected %r" % (s.status(), s.link_cond, s.rejected[:3]))
    with coll.case("(b) the followers' fetch connections on the leader are TLS"):
        rc, out, err = mqdtest.mqctl(L.url, "--json", "connection", "list")
        check(rc == 0, "connection list: %d %s" % (rc, err))
        conns = json.loads(out)
        peers = [c for c in conns if c.get("user") == "repl" and fetch_conn(c)]
        log("repl connections: %r" % [(c.get("id"), c.get("tls_version"), c.get("tls_cipher"),
                                       c.get("sasl_mechanism")) for c in peers])
        check(len(peers) == 2, "%d connections of user repl on the leader: %r" % (len(peers), peers))
        for c in peers:
            check(c["tls"] is True and re.match(r"^TLSv1\.[23]$", c["tls_version"] or "")
                  and c["tls_cipher"] and c["sasl_mechanism"] == "PLAIN",
                  "fetch connection %r" % c)
    with coll.case("(c) a plain-TCP $repl/ attach with the right password is refused"):
        p = PlainFetch(L.url, "$repl/r3/0", {"mqd:node-id": uint(followers[0]),
                                             "mqd:fetch-offset": ulong(0)}, "repl", "s3cret")
        mqdtest.run_container(p, 30)
        log("plain fetch: %r, %d received" % (p.link_cond, p.got))
        check(p.link_cond == ("amqp:unauthorized-access", "replication requires TLS"),
              "plain fetch link: %r" % (p.link_cond,))
        check(p.got == 0, "the refused link received %d messages" % p.got)
    with coll.case("(d) the three logs are byte-equal"):
        def same():
            raw = {i: partition_bytes(b, "r3", 0) for i, b in brokers.items()}
            return raw if all(v == raw[leader] for v in raw.values()) else None
        raw = wait_for("the followers' logs equal to the leader's", same, 30)
        n = {i: count_records(v) for i, v in raw.items()}
        log("records per node %r, %d bytes each" % (n, len(raw[leader])))
        check(all(v == N for v in n.values()), "records per node %r" % n)
    with coll.case("(f) the leader epoch on the wire: newer and older than the leader's"):
        ep = partition(etcd)["epoch"]
        tls_url = "amqps://127.0.0.1:%d" % L.tls_port
        reads = L.log_text().count("state read again")
        got = {}
        for name, theirs in (("newer", ep + 5), ("older", ep - 1)):
            p = PlainFetch(tls_url, "$repl/r3/0", {"mqd:node-id": uint(followers[0]),
                                                   "mqd:fetch-offset": ulong(N),
                                                   "mqd:last-epoch": uint(ep),
                                                   "mqd:epoch": uint(theirs)},
                           "repl", "s3cret", ca=pki["ca.crt"])
            mqdtest.run_container(p, 30)
            log("%s epoch %d (leader's %d): %r, %d received" % (name, theirs, ep, p.link_cond, p.got))
            check(p.got == 0, "a refused fetch link received %d" % p.got)
            got[name] = p.link_cond
        check(got["newer"] == ("amqp:precondition-failed",
                               "this leader's epoch %d is older than the follower's %d: reading "
                               "the partition's state again" % (ep, ep + 5)), "newer: %r" % (got["newer"],))
        check(got["older"] == ("mqd:repl:stale-epoch", "stale epoch: the follower's %d, the "
                               "leader's %d" % (ep - 1, ep)), "older: %r" % (got["older"],))
        # the zombie check read etcd again: still the leader there, so it acknowledges again
        wait_for("the leader's re-read", lambda: L.log_text().count("state read again") > reads, 10)
        s = Sender(L.url, "r3", 10, "after-epoch")
        mqdtest.run_container(s, 60)
        check(s.accepted == 10 and not s.rejected, "sends after the re-read: %s" % s.status())
        check(partition(etcd)["leader"] == leader and partition(etcd)["epoch"] == ep,
              "etcd changed: %r" % partition(etcd))
    N2 = N + 10
    bad = followers[-1]
    B = brokers[bad]
    with coll.case("(e) a follower with the wrong CA never gets in sync"):
        B.stop()
        before = count_records(partition_bytes(B, "r3", 0))
        B.sets["replication_ca_file"] = pki["wrong-ca.crt"]
        B.start()
        wait_for("node %d's verification failure" % bad,
                 lambda: "certificate verify failed" in B.log_text().split("----- n%d.2.log" % bad)[-1], 30)
        isr = wait_for("etcd's ISR without node %d" % bad, lambda: (
            lambda p: p["isr"] if p and bad not in p["isr"] else None)(partition(etcd)), 30)
        log("ISR without node %d: %r" % (bad, isr))
        s = Sender(L.url, "r3", MORE, "late")
        mqdtest.run_container(s, 120)
        check(s.accepted == MORE and not s.rejected, "late sends: %s %r" % (s.status(), s.rejected[:3]))
        time.sleep(LAG_MS / 1000.0 + 1.0 * SLOW)  # time to catch up, were it able to
        p = partition(etcd)
        fails = B.log_text().split("----- n%d.2.log" % bad)[-1].count("certificate verify failed")
        after = count_records(partition_bytes(B, "r3", 0))
        lead_n = count_records(partition_bytes(L, "r3", 0))
        log("node %d: %d records before, %d after; leader %d; ISR %r; %d verification failures"
            % (bad, before, after, lead_n, p["isr"], fails))
        check(bad not in p["isr"] and len(p["isr"]) == 2, "ISR %r" % p["isr"])
        check(before == N2 and after == N2 and lead_n == N2 + MORE,
              "records: node %d %d -> %d, leader %d" % (bad, before, after, lead_n))
        check(fails >= 2, "%d verification failures logged (it keeps retrying)" % fails)
    coll.finish()


if __name__ == "__main__":
    mqdtest.main(body, timeout=300)
