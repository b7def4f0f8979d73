#!/usr/bin/python3
"""The web console in a real headless browser (Debian's chromium + chromium-driver,
driven over W3C WebDriver from urllib; issue 22). One mqd with users, an [acl] and
console_listen; Proton clients make the traffic. Asserts:
- login with the keyboard only (user, Tab, password, Enter) lands on the overview, which
  shows the topic count and the totals; the page logged in with SCRAM-SHA-256 (Web Crypto:
  the password never left the browser);
- a topic Proton just filled with 40 messages shows 40 on the topics page and on its own
  page; the filter box hides it for a name that does not match; sorting by a column
  header works from the keyboard (Enter on the header button);
- a group's lag, as the group page shows it, falls while a Proton consumer drains the
  group: 40 at the start, then each value the page shows is at most the one before, and
  it reaches 0;
- peek (message browser) from offset 7 shows the bodies {"n": 7}, 8, 9 as JSON, and the
  hex view the body's bytes; the group's committed offset is unchanged by it;
- reset offsets (to offset 25, with the confirmation step) on the group page, and the
  next Proton consumer of the group starts at offset 25 (body n = 25);
- close a connection on the connections page: that Proton client sees
  amqp:connection:forced;
- at 200 % zoom (a viewport of half the CSS pixels) the pages reflow without
  horizontal scrolling;
- a screenshot of each page (overview, topics, topic, group, browser, connections) is
  saved under tests/artifacts/85-console-browser/ (MQD_TEST_ARTIFACTS to move it)."""

import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdtest import check, log  # noqa: E402
import consoletest  # noqa: E402
import webdriver  # noqa: E402

from proton import Message  # noqa: E402
from proton.handlers import MessagingHandler  # noqa: E402
from proton.reactor import Container  # noqa: E402
from proton import Timeout  # noqa: E402
from proton.utils import BlockingConnection  # noqa: E402

TAB, ENTER = "\ue004", "\ue007"
N = 40


class Victim(MessagingHandler):
    """A connection with a consumer that waits; records how the broker closed it."""

    def __init__(self, url):
        super().__init__()
        self.url = url
        self.condition = None
        self.opened = threading.Event()

    def on_start(self, event):
        self.conn = event.container.connect(self.url)
        event.container.create_receiver(self.conn, "orders/ConsumerGroups/victim")

    def on_link_opened(self, event):
        self.opened.set()

    def on_connection_remote_close(self, event):
        c = event.connection.remote_condition
        self.condition = c.name if c else None
        event.connection.close()

    def on_transport_error(self, event):
        c = event.transport.condition
        if self.condition is None and c:
            self.condition = c.name


def pump(conn, seconds=0.3):
    """Lets a BlockingConnection write what it holds (the accepted dispositions)."""
    try:
        conn.wait(lambda: False, timeout=seconds)
    except Timeout:
        pass


def text_of(css):
    return "var e = document.querySelector(%s); return e ? e.textContent : null;" % json.dumps(css)


def body(t):
    b = consoletest.console_broker(t)
    art = webdriver.artifacts_dir("85-console-browser")
    shots = {}
    conn = BlockingConnection(b.url, timeout=30 * mqdtest.SLOW)
    snd = conn.create_sender("orders")
    for i in range(N):
        snd.send(Message(body=json.dumps({"n": i}), subject="order-%d" % i,
                         properties={"i": i}))
    conn.close()
    log("Proton sent %d messages to orders" % N)

    br = webdriver.Browser(t, height=1000)
    try:
        ui = b.console_url + "/ui/"
        br.go(ui)
        br.wait_js("return document.activeElement && document.activeElement.id === 'login-user'",
                   "the login form with the focus on the user field")
        br.keys("admin" + TAB + consoletest.PW["admin"] + ENTER)
        who = br.wait_js("return document.getElementById('who').textContent", "logged in")
        check(who == "admin (manage)", "who: %r" % who)
        mech = br.js("return document.getElementById('who').dataset.mechanism")
        check(mech == "SCRAM-SHA-256", "the browser logged in with %r (Web Crypto on 127.0.0.1)" % mech)
        cookies = br.cookies()
        check(len(cookies) == 1 and cookies[0]["name"] == "mqd_session" and cookies[0]["httpOnly"]
              and cookies[0].get("sameSite") == "Strict", "browser cookie: %r" % cookies)
        check(br.js("return document.cookie") == "", "the script cannot read the HttpOnly cookie")
        topics = br.wait_js(text_of("#ov-topics"), "overview topic count")
        check(topics == "1", "overview topics: %r" % topics)
        check(br.wait_js(text_of("#ov-in"), "overview in") == str(N), "overview messages in")
        # traffic while the overview polls: its rate chart gets a line
        c1 = BlockingConnection(b.url, timeout=30 * mqdtest.SLOW)
        s1 = c1.create_sender("demo")
        r1 = c1.create_receiver("demo/ConsumerGroups/d", credit=10)
        backlog = 0
        rates = []
        for i in range(48):  # about 12 s: a rising, then falling send rate; receives lag
            burst = 5 + 3 * (i if i < 24 else 48 - i)
            for _ in range(burst):
                s1.send(Message(body="tick"))
            backlog += burst
            if i % 8 == 7:
                rates.append(br.js("return document.getElementById('ov-rate').textContent"))
            if i >= 4:
                for _ in range(min(backlog, 30)):
                    r1.receive(timeout=20 * mqdtest.SLOW)
                    r1.accept()
                    backlog -= 1
            time.sleep(0.25)
        while backlog:  # the consumer catches up after the producer stopped
            for _ in range(min(backlog, 30)):
                r1.receive(timeout=20 * mqdtest.SLOW)
                r1.accept()
                backlog -= 1
            time.sleep(0.25)
        c1.close()
        check(any(r[0] in "123456789" for r in rates), "an in rate above 0 on the page: %r" % rates)
        log("overview rates while sending: %s" % "; ".join(rates))
        shots["overview"] = br.screenshot(os.path.join(art, "overview.png"))

        br.go(ui + "#/topics")
        cell = br.wait_js(text_of('#topics-table tr[data-name="orders"] td.messages'), "orders row")
        check(cell == str(N), "topics page: orders holds %r, want %d" % (cell, N))
        br.type("#topic-filter", "nomatch")
        cnt = br.wait_js("var e=document.getElementById('topics-count'); return e && e.textContent.startsWith('0 of') && e.textContent", "filter")
        check(cnt == "0 of 2 topics", "filter: %r" % cnt)
        check("filter=nomatch" in br.js("return location.hash"), "the filter is in the URL")
        br.type("#topic-filter", "ord")
        br.wait_js(text_of('#topics-table tr[data-name="orders"] td.messages'), "orders row again")
        br.js("document.querySelector('#topics-table th button[data-key=\"messages\"]').focus()")
        br.keys(ENTER)
        sort = br.wait_js("var th=document.querySelector('#topics-table th[aria-sort]'); return th && th.textContent + '|' + th.getAttribute('aria-sort')", "sorted")
        check(sort.startswith("Messages stored") and sort.endswith("ascending"), "sort: %r" % sort)
        shots["topics"] = br.screenshot(os.path.join(art, "topics.png"))

        br.click('#topics-table tr[data-name="orders"] td.name a')
        msgs = br.wait_js(text_of("#topic-messages"), "topic page")
        check(msgs == str(N) and "#/topic/orders" in br.js("return location.hash"),
              "topic page: %r at %s" % (msgs, br.js("return location.hash")))
        shots["topic"] = br.screenshot(os.path.join(art, "topic.png"))
        part = br.js("return document.querySelector('#partitions-table tr[data-partition=\"0\"] td.messages').textContent")
        check(part == str(N), "partition 0 messages: %r" % part)

        # the group's lag falls while a consumer drains it
        c2 = BlockingConnection(b.url, timeout=30 * mqdtest.SLOW)
        rcv = c2.create_receiver("orders/ConsumerGroups/g1", credit=0)
        br.go(ui + "#/group/orders/g1")
        first = br.wait_js(text_of("#group-lag"), "group lag", 20)
        check(first == str(N), "lag before draining: %r" % first)
        seen = [int(first)]
        got = []
        for step in range(4):
            rcv.flow(10)
            for _ in range(10):
                m = rcv.receive(timeout=20 * mqdtest.SLOW)
                got.append(json.loads(m.body)["n"])
                rcv.accept()
            pump(c2)
            want = N - 10 * (step + 1)
            v = br.wait_js("var e=document.getElementById('group-lag'); return e && Number(e.textContent) <= %d && e.textContent" % want,
                           "lag <= %d" % want, 20)
            seen.append(int(v.replace(",", "")))
        check(got == list(range(N)), "the consumer got 0..%d in order" % (N - 1))
        check(all(a >= b2 for a, b2 in zip(seen, seen[1:])) and seen[-1] == 0,
              "lag seen on the page: %r" % seen)
        log("lag on the group page while draining: %r" % seen)
        time.sleep(1.5)
        shots["group"] = br.screenshot(os.path.join(art, "group.png"))
        c2.close()

        # peek: never consumes
        br.go(ui + "#/browse/orders/0?from=7&count=3&view=json")
        bodies = br.wait_js("var a=[...document.querySelectorAll('#browse-out article')]; return a.length===3 && a.map(e=>e.dataset.offset+'='+e.querySelector('pre').textContent)", "peek", 20)
        check(bodies == ['7={\n  "n": 7\n}', '8={\n  "n": 8\n}', '9={\n  "n": 9\n}'], "peek bodies: %r" % bodies)
        props = br.js("var d=document.querySelector('#browse-out article[data-offset=\"8\"] dl'); return d && d.textContent")
        check("subject: \"order-8\"" in props and '{"i":8}' in props, "peek properties: %r" % props)
        shots["browse"] = br.screenshot(os.path.join(art, "browse.png"))
        br.go(ui + "#/browse/orders/0?from=7&count=1&view=hex")
        hexv = br.wait_js("var p=document.querySelector('#browse-out article[data-offset=\"7\"] pre'); return p && p.textContent", "hex", 20)
        check(hexv.strip() == " ".join("%02x" % x for x in b'{"n": 7}'), "hex view: %r" % hexv)
        br.go(ui + "#/group/orders/g1")
        lag = br.wait_js(text_of("#group-lag"), "group lag after peek")
        check(lag == "0", "peek changed nothing: lag %r" % lag)

        # reset offsets with the confirmation step; the next consumer starts there
        br.js("document.getElementById('reset-to').value='offset'")
        br.type("#reset-value", "25")
        br.click("#reset-button")
        br.wait_js("return !!document.getElementById('confirm-yes')", "confirmation")
        br.click("#confirm-yes")
        res = br.wait_js("var e=document.getElementById('action-result'); return e && e.textContent", "reset result")
        check(res == "Reset done: committed 0:25", "reset result: %r" % res)
        c3 = BlockingConnection(b.url, timeout=30 * mqdtest.SLOW)
        r3 = c3.create_receiver("orders/ConsumerGroups/g1", credit=1)
        m = r3.receive(timeout=20 * mqdtest.SLOW)
        r3.accept()
        pump(c3)
        n = json.loads(m.body)["n"]
        off = m.annotations.get("x-opt-offset")
        check(n == 25 and off == "25", "after reset the consumer starts at n=%r offset=%r" % (n, off))
        c3.close()
        log("reset to 25 from the page: the next consumer got n=25 (x-opt-offset %s)" % off)

        # close a connection from the page
        v = Victim(b.url)
        cont = Container(v)
        cont.container_id = "victim-85"
        th = threading.Thread(target=cont.run, daemon=True)
        th.start()
        check(v.opened.wait(20 * mqdtest.SLOW), "victim attached")
        br.go(ui + "#/connections")
        br.wait_js("return !!document.querySelector('#connections-table tr[data-container=\"victim-85\"] button')", "victim row")
        shots["connections"] = br.screenshot(os.path.join(art, "connections.png"))
        br.click('#connections-table tr[data-container="victim-85"] button')
        br.click("#confirm-yes")
        res = br.wait_js("var e=document.getElementById('action-result'); return e && e.textContent", "close result")
        check(res.startswith("Closed 127.0.0.1:"), "close result: %r" % res)
        th.join(20 * mqdtest.SLOW)
        check(not th.is_alive(), "the victim's container ended")
        check(v.condition == "amqp:connection:forced", "victim saw %r" % v.condition)
        log("closed from the page: the client saw %s" % v.condition)
        br.go(ui + "#/users")
        rows = br.wait_js("var r=[...document.querySelectorAll('#users-table tbody tr')]; return r.length && r.map(e=>e.dataset.name)", "users")
        check(rows == ["admin", "viewer", "producer"], "users page: %r" % rows)
        shots["users"] = br.screenshot(os.path.join(art, "users.png"))
        # 200 % zoom: a viewport half as wide and high in CSS pixels; the page reflows
        # (no horizontal scrolling of the page; wide tables scroll in their own box)
        br.cmd("POST", "/window/rect", {"width": 640, "height": 450})
        for route, ready in [("#/topics", '#topics-table tr[data-name="orders"]'),
                             ("#/group/orders/g1", "#group-lag"), ("#/", "#ov-topics")]:
            br.go(ui + route)
            br.wait_js("return !!document.querySelector(%s)" % json.dumps(ready), route)
            w = br.js("return [document.documentElement.scrollWidth, window.innerWidth]")
            check(w[0] <= w[1] + 1, "%s at 200 %%: page %d px wide in a %d px viewport" % (route, w[0], w[1]))
        shots["overview-200"] = br.screenshot(os.path.join(art, "overview-200pct.png"))
        log("200 %% zoom: topics, group and overview reflow within %d CSS px" % w[1])
        for k, size in shots.items():
            check(size > 5000, "screenshot %s is %d bytes" % (k, size))
        log("screenshots in %s: %s" % (art, ", ".join("%s.png" % k for k in shots)))
    finally:
        br.quit()


mqdtest.main(body, timeout=300)
