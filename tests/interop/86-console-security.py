#!/usr/bin/python3
"""The web console's security and its API against mqctl --json (issue 22), over plain
HTTP from Python against a real mqd with users, an [acl] and console_listen:
- no access without login: every /api/ route answers 401, a POST too, and nothing changes;
  a wrong password and an unknown user get 401 the same way;
- the session cookie: HttpOnly, SameSite=Strict, Path=/, no Secure on plain HTTP (Secure
  when a TLS proxy says X-Forwarded-Proto: https), a 64-hex random id, different per login; the password never appears in a URL (login is a
  POST body) and the login reply carries a CSRF token that is not the cookie;
- a monitor-only user (viewer) reads everything, but a group reset and a connection close
  get 403 and nothing changed (committed offsets, the connection is still there);
- a user with neither monitor nor manage cannot log in (403);
- a POST without the CSRF token, with a wrong one, or from a foreign Origin gets 403 and
  nothing changed; with the token the same reset works;
- logout ends the session (the old cookie then gets 401);
- the API equals mqctl --json for the same objects: topic describe, topic list, group
  describe, group list, user list, acl list, topic peek, broker status (minus the uptime/rss that move), the
  same connection row (with tls, sasl_mechanism, the client's properties) and the same
  link row;
- over AMQP `$management` the same rights hold: viewer (monitor, browse) reads and peeks
  with mqctl, its reset is refused and changes nothing; producer cannot read."""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdtest import check, log  # noqa: E402
import consoletest  # noqa: E402
from consoletest import Http, PW  # noqa: E402

from proton import Message  # noqa: E402
from proton.utils import BlockingConnection  # noqa: E402


def fill(url, topic, n):
    c = BlockingConnection(url, timeout=30 * mqdtest.SLOW)
    s = c.create_sender(topic)
    for i in range(n):
        s.send(Message(body=json.dumps({"n": i}), subject="s%d" % i))
    c.close()


def consume(url, address, n):
    c = BlockingConnection(url, timeout=30 * mqdtest.SLOW)
    r = c.create_receiver(address, credit=n)
    got = []
    for _ in range(n):
        got.append(r.receive(timeout=20 * mqdtest.SLOW))
        r.accept()
    c.close()
    return got


def committed(admin, topic, group):
    st, g = admin.get("groups/%s/%s" % (topic, group))
    check(st == 200, "group read: %s %r" % (st, g))
    return [p["committed"] for p in g["partitions"]]


def body(t):
    b = consoletest.console_broker(t)
    fill(b.url, "orders", 20)
    consume(b.url, "orders/ConsumerGroups/g1", 8)

    anon = Http(b.console_port)
    with_routes = ["overview", "topics", "topics/orders", "topics/orders/partitions",
                   "topics/orders/groups", "topics/orders/partitions/0/messages", "groups",
                   "groups/orders/g1", "connections", "links", "session"]
    for r in with_routes:
        st, doc = anon.get(r)
        check(st == 401, "GET /api/%s without login: %s %r" % (r, st, doc))
    st, _ = anon.post("groups/orders/g1/reset", {"to": "earliest"})
    check(st == 401, "POST reset without login: %s" % st)
    st, _ = anon.post("connections/x/close")
    check(st == 401, "POST close without login: %s" % st)
    log("without login: %d routes and 2 POSTs answered 401" % len(with_routes))

    st, doc = Http(b.console_port).login("admin", "wrong")
    check(st == 401 and doc["description"] == "wrong user or password", "wrong password: %s %r" % (st, doc))
    st, doc = Http(b.console_port).login("nobody", "x")
    check(st == 401 and doc["description"] == "wrong user or password", "unknown user: %s %r" % (st, doc))
    st, doc = Http(b.console_port).login("producer")
    check(st == 403, "a user without monitor/manage: %s %r" % (st, doc))
    st, doc = anon.request("GET", "/api/login")
    check(st == 405, "GET /api/login: %s" % st)

    admin = Http(b.console_port)
    st, doc = admin.login("admin")
    check(st == 200 and doc["manage"] is True and doc["user"] == "admin", "admin login: %s %r" % (st, doc))
    cookie = admin.set_cookies[0]
    attrs = [a.strip() for a in cookie.split(";")]
    log("Set-Cookie: mqd_session=<64 hex>; %s" % "; ".join(attrs[1:]))
    check("HttpOnly" in attrs and "SameSite=Strict" in attrs and "Path=/" in attrs,
          "cookie flags: %r" % attrs)
    check(not any(a.lower() == "secure" for a in attrs), "no Secure on plain HTTP: %r" % attrs)
    check(len(admin.cookie) == 64 and all(ch in "0123456789abcdef" for ch in admin.cookie),
          "session id: %r" % admin.cookie)
    check(len(admin.csrf) == 64 and admin.csrf != admin.cookie, "csrf token differs from the id")
    check(PW["admin"] not in cookie and PW["admin"] not in json.dumps(doc), "no password echoed")
    proxied = Http(b.console_port)
    st, _ = proxied.request("POST", "/api/login", {"user": "admin", "password": PW["admin"]},
                            headers={"X-Forwarded-Proto": "https"})
    check(st == 200 and "; Secure" in proxied.set_cookies[0], "behind a TLS proxy: %r" % proxied.set_cookies)
    admin2 = Http(b.console_port)
    admin2.login("admin")
    check(admin2.cookie != admin.cookie and admin2.csrf != admin.csrf, "each login its own id and token")
    st, doc = admin.get("session")
    check(st == 200 and doc["csrf"] == admin.csrf, "session info: %r" % doc)

    # a client that stays connected: its connection is what close would end
    victim = BlockingConnection(b.url, timeout=30 * mqdtest.SLOW)
    vrecv = victim.create_receiver("orders/ConsumerGroups/vg", credit=0)
    st, conns = admin.get("connections")
    check(st == 200 and len(conns) == 1, "one AMQP connection: %r" % conns)
    vid = conns[0]["id"]

    before = committed(admin, "orders", "g1")
    check(before == [8], "g1 committed after consuming 8: %r" % before)

    viewer = Http(b.console_port)
    st, doc = viewer.login("viewer")
    check(st == 200 and doc["monitor"] is True and doc["manage"] is False, "viewer login: %r" % doc)
    st, doc = viewer.get("users")
    check(st == 200 and [u["name"] for u in doc] == ["admin", "viewer", "producer"] and
          all(u["password"] and u["scram_sha256"] for u in doc) and
          "password_hash" not in json.dumps(doc) and "pbkdf2" not in json.dumps(doc),
          "viewer reads the users, without credentials: %r" % doc)
    st, doc = viewer.get("acl")
    check(st == 200 and doc["present"] and doc["rules"][1] ==
          {"action": "allow", "who": "viewer", "rights": ["browse", "monitor"], "pattern": "*"},
          "the [acl] as configured: %r" % doc)
    st, doc = viewer.get("topics/orders")
    check(st == 200 and doc["partition_info"][0]["end"] == 20, "viewer reads the topic: %s" % st)
    st, doc = viewer.post("groups/orders/g1/reset", {"to": "earliest"})
    check(st == 403 and "manage" in doc["description"], "viewer reset: %s %r" % (st, doc))
    st, doc = viewer.post("connections/%s/close" % vid)
    check(st == 403, "viewer close: %s %r" % (st, doc))
    check(committed(admin, "orders", "g1") == [8], "nothing changed after the viewer's reset")
    st, conns = admin.get("connections")
    check([c["id"] for c in conns] == [vid], "the connection is still there: %r" % conns)
    log("viewer: GET 200, reset 403, close 403; committed still %r, connection %s still open" % (before, vid))

    # CSRF: no token, a wrong token, a foreign origin
    st, doc = admin.post("groups/orders/g1/reset", {"to": "earliest"}, csrf=False)
    check(st == 403 and "X-CSRF-Token" in doc["description"], "no token: %s %r" % (st, doc))
    st, doc = admin.post("groups/orders/g1/reset", {"to": "earliest"}, csrf=False,
                         headers={"X-CSRF-Token": admin2.csrf})
    check(st == 403, "another session's token: %s" % st)
    st, doc = admin.post("groups/orders/g1/reset", {"to": "earliest"},
                         headers={"Origin": "http://evil.example"})
    check(st == 403 and "cross-site" in doc["description"], "foreign origin: %s %r" % (st, doc))
    st, doc = admin.post("groups/orders/g1/reset", {"to": "earliest"},
                         headers={"Origin": "https://evil.example"})
    check(st == 403, "foreign https origin: %s" % st)
    st, doc = admin.post("groups/orders/g1/reset", {"to": "earliest"},
                         headers={"Origin": "http://127.0.0.1:%d.evil.example" % b.console_port})
    check(st == 403, "an origin that only starts like ours: %s" % st)
    st, doc = admin.post("groups/orders/g1/reset", {"to": "earliest"},
                         headers={"Sec-Fetch-Site": "cross-site"})
    check(st == 403, "Sec-Fetch-Site cross-site: %s" % st)
    check(committed(admin, "orders", "g1") == [8], "nothing changed after the refused POSTs")
    st, doc = admin.post("groups/orders/g1/reset", {"to": "offset", "value": 3},
                         headers={"Origin": b.console_url})
    check(st == 200 and [p["committed"] for p in doc["partitions"]] == [3], "reset with token: %s %r" % (st, doc))
    log("CSRF: 6 refused POSTs left committed at 8; with the token it is 3")

    # the API equals mqctl --json for the same objects
    url = "amqp://admin:%s@127.0.0.1:%d" % (PW["admin"], b.port)
    pairs = [(["topic", "describe", "orders"], "topics/orders"),
             (["topic", "list"], "topics"),
             (["group", "describe", "orders", "g1"], "groups/orders/g1"),
             (["group", "list"], "groups"),
             (["user", "list"], "users"),
             (["acl", "list"], "acl"),
             (["topic", "peek", "orders/0", "--from", "2", "--count", "3"],
              "topics/orders/partitions/0/messages?from=2&count=3")]
    for argv, route in pairs:
        rc, out, err = mqdtest.mqctl(url, "--json", *argv)
        check(rc == 0, "mqctl %s: %s" % (argv, err))
        st, api = admin.get(route)
        check(st == 200, "GET %s: %s" % (route, st))
        cli = json.loads(out)
        if cli != api:
            fail_keys = sorted(set(json.dumps(cli, sort_keys=True).split(",")) ^
                               set(json.dumps(api, sort_keys=True).split(",")))
            check(False, "%s differs from mqctl --json %s: %r" % (route, " ".join(argv), fail_keys[:10]))
        log("GET /api/%s == mqctl --json %s (%d bytes of JSON)" % (route, " ".join(argv), len(out)))
    rc, out, _ = mqdtest.mqctl(url, "--json", "status")
    st, ov = admin.get("overview")
    cli = json.loads(out)
    for k in ("version", "topics", "data_dir", "listen", "stopping"):
        check(cli[k] == ov[k], "status %s: mqctl %r, API %r" % (k, cli[k], ov[k]))
    check(set(cli) <= set(ov), "overview has every status field: missing %r" % (set(cli) - set(ov)))
    rc, out, _ = mqdtest.mqctl(url, "--json", "connection", "list")
    cli = json.loads(out)
    st, api = admin.get("connections")
    check(cli and api and set(cli[0]) == set(api[0]), "connection fields: %r vs %r" % (cli[0], api[0]))
    check(vid in [c["id"] for c in cli], "mqctl lists the same connection %s" % vid)
    mine = [c for c in cli if c["id"] == vid][0]
    theirs = [c for c in api if c["id"] == vid][0]
    check(mine == theirs, "the same connection row: %r vs %r" % (mine, theirs))
    check(theirs["tls"] is False and theirs["sasl_mechanism"] == "ANONYMOUS" and
          theirs["client_properties"] == {}, "connection details: %r" % theirs)
    rc, out, _ = mqdtest.mqctl(url, "--json", "link", "list")
    cli = json.loads(out)
    st, api = admin.get("links")
    vl = [x for x in api if x["connection"] == vid]
    check(len(vl) == 1 and vl[0]["role"] == "receiver" and vl[0]["kind"] == "consumer" and
          vl[0]["address"] == "orders/ConsumerGroups/vg" and vl[0]["group"] == "vg",
          "the victim's link: %r" % vl)
    check(vl[0] in cli, "mqctl link list has the same row: %r" % cli)
    log("connection %s and its link: the same rows from mqctl --json and the API" % vid)

    # the same rights over AMQP: viewer (monitor) reads with mqctl, cannot reset
    vurl = "amqp://viewer:%s@127.0.0.1:%d" % (PW["viewer"], b.port)
    rc, out, err = mqdtest.mqctl(vurl, "--json", "topic", "describe", "orders")
    check(rc == 0 and json.loads(out)["name"] == "orders", "viewer's mqctl describe: %s %s" % (rc, err))
    rc, out, err = mqdtest.mqctl(vurl, "--json", "topic", "peek", "orders/0", "--count", "1")
    check(rc == 0 and len(json.loads(out)["messages"]) == 1, "viewer's mqctl peek: %s %s" % (rc, err))
    rc, out, err = mqdtest.mqctl(vurl, "group", "reset", "orders", "g1", "--to", "earliest")
    check(rc != 0 and "not allowed" in err, "viewer's mqctl reset: %s %s" % (rc, err))
    check(committed(admin, "orders", "g1") == [3], "nothing changed by the viewer's AMQP reset")
    purl = "amqp://producer:%s@127.0.0.1:%d" % (PW["producer"], b.port)
    rc, out, err = mqdtest.mqctl(purl, "topic", "list")
    check(rc != 0 and "not allowed" in err, "producer (no monitor) cannot list: %s %s" % (rc, err))
    log("over AMQP: viewer reads and peeks, its reset is refused (%s); producer cannot read" % err.strip())

    # logout: the old cookie is dead
    st, _ = admin.post("logout")
    check(st == 200 and any("Max-Age=0" in c for c in admin.set_cookies), "logout clears the cookie")
    st, _ = admin.get("topics")
    check(st == 401, "after logout: %s" % st)
    victim.close()
    del vrecv


mqdtest.main(body, timeout=180)
