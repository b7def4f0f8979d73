#!/usr/bin/python3
"""History that survives a reload (issue 38 point 2): the broker samples its totals, each
topic and each group's lag every 5 s (metrics/history.c) and the console's charts start
from those samples.

- while no page is open, Proton sends 16 rounds of 20 messages, a second apart, and a
  group consumes 100 of them; then GET /api/history?series=broker gives 5 s points from
  before, whose rates integrate to exactly the 320 messages in (sum of rate x interval);
  the topic's series says the same; the group's series ends at lag 220 and was higher
  before; the hour's 1 m resolution answers too;
- a monitor user may read it; a user without monitor gets 403; a bad series is 400;
- in headless Chromium the overview's rate chart, opened after the traffic, holds points
  from before the page was opened, and still does after a reload; so does the group
  page's lag chart (screenshots kept);
- issue 38 point 6: when the broker stops, the open page shows a banner saying it does not
  answer, and greys its values as stale."""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import consoletest  # noqa: E402
import mqdtest  # noqa: E402
import webdriver  # noqa: E402
from mqdtest import SLOW, check, log  # noqa: E402

from proton import Message  # noqa: E402
from proton.utils import BlockingConnection  # noqa: E402

TAB, ENTER = "\ue004", "\ue007"
ROUNDS, PER = 16, 20


def integral(points, col):
    """The counter's rise the rates stand for: sum of rate x interval (the first point's
    rate covers the interval before it, one sample long)."""
    total, prev = 0.0, None
    for p in points:
        total += p[col] * ((p[0] - prev) if prev is not None else 5000) / 1000.0
        prev = p[0]
    return total


def body(t):
    b = consoletest.console_broker(t)
    art = webdriver.artifacts_dir("153-console-history")
    conn = BlockingConnection(b.url, timeout=30 * SLOW)
    snd = conn.create_sender("orders")
    t_start = time.time() * 1000
    for r in range(ROUNDS):
        for i in range(PER):
            snd.send(Message(body="r%d-%d" % (r, i)))
        time.sleep(1.0)
    conn.close()
    got = mqdtest.receive(b.url, "orders/ConsumerGroups/billing", 100, credit=100)
    check(len(got.got) == 100, "billing consumed %d" % len(got.got))
    time.sleep(11 * SLOW)  # two more samples after the last send and the consumption
    t_open = time.time() * 1000

    admin = consoletest.Http(b.console_port)
    check(admin.login("admin")[0] == 200, "admin login")
    st, h = admin.get("history?series=broker")
    check(st == 200 and h["interval_ms"] == 5000 and h["fields"][:2] == ["in_per_s", "out_per_s"],
          "broker history: %s %r" % (st, h if st != 200 else h["fields"]))
    pts = h["points"]
    check(len(pts) >= 4 and pts[0][0] < t_start + 5000 and all(p[0] < t_open for p in pts),
          "points %d, first %r, start %r" % (len(pts), pts[0][0] if pts else None, t_start))
    total = integral([p for p in pts], 1)
    check(round(total) == ROUNDS * PER, "broker rates integrate to %.3f messages in, want %d"
          % (total, ROUNDS * PER))
    check(max(p[1] for p in pts) > 0 and any(p[2] > 0 for p in pts), "in and out rates seen")
    st, th = admin.get("history?series=topic/orders")
    check(st == 200 and round(integral(th["points"], 1)) == ROUNDS * PER, "topic history: %s" % st)
    st, gh = admin.get("history?series=%s" % "group/orders/billing".replace("/", "%2F"))
    check(st == 200 and gh["fields"] == ["lag"], "group history: %s %r" % (st, gh))
    lags = [p[1] for p in gh["points"]]
    check(lags and lags[-1] == ROUNDS * PER - 100 and max(lags) >= lags[-1],
          "group lag history %r" % lags)
    st, mh = admin.get("history?series=broker&resolution=1m")
    check(st == 200 and mh["interval_ms"] == 60000, "1m resolution: %s" % st)
    log("history: %d broker points before the page, rates integrate to %d; billing's lag "
        "ends at %d" % (len(pts), round(total), lags[-1]))

    viewer = consoletest.Http(b.console_port)
    viewer.login("viewer")
    check(viewer.get("history?series=broker")[0] == 200, "viewer reads the history")
    producer = consoletest.Http(b.console_port)
    st, _ = producer.login("producer")
    check(st == 403, "producer (no monitor) may not log in to the console: %s" % st)
    st, doc = admin.get("history?series=nonsense")
    check(st == 400, "bad series: %s %r" % (st, doc))
    st, doc = admin.get("history?series=topic/nosuch")
    check(st == 404, "unknown topic's series: %s %r" % (st, doc))

    br = webdriver.Browser(t, height=1000)
    try:
        ui = b.console_url + "/ui/"
        br.go(ui)
        br.wait_js("return document.activeElement && document.activeElement.id === 'login-user'", "login")
        br.keys("admin" + TAB + consoletest.PW["admin"] + ENTER)
        br.wait_js("return document.getElementById('who').textContent", "logged in")
        for when in ("opened", "reloaded"):
            first = br.wait_js("var c=document.getElementById('rates-chart');"
                               "return c && c.dataset.first && Number(c.dataset.points) >= 3 && Number(c.dataset.first)",
                               "overview chart with history (%s)" % when)
            check(first < t_open - 5000, "overview chart %s: first point %d ms before the page"
                  % (when, t_open - first))
            log("overview chart %s: its first point is %.1f s older than the page"
                % (when, (t_open - first) / 1000))
            if when == "opened":
                br.screenshot(os.path.join(art, "overview-history.png"))
                br.js("window.mqdBeforeReload = true; location.reload()")
                br.wait_js("return !window.mqdBeforeReload && document.getElementById('who') &&"
                           " document.getElementById('who').textContent", "the reloaded page")
        br.go(ui + "#/group/orders/billing")
        first = br.wait_js("var c=document.getElementById('lag-chart');"
                           "return c && c.dataset.first && Number(c.dataset.first)", "lag chart with history")
        check(first < t_open - 5000, "lag chart's first point %d ms before the page" % (t_open - first))
        br.screenshot(os.path.join(art, "group-history.png"))
        # the broker goes down (issue 38 point 6): a banner says so, the values go grey
        check(br.js("return document.getElementById('banner').hidden") is True, "a banner while up")
        b.stop()
        text = br.wait_js("var e=document.getElementById('banner');"
                          "return e && !e.hidden && e.textContent", "the broker-down banner", 15)
        check("does not answer" in text and br.js("return document.getElementById('main')"
                                                   ".classList.contains('stale')"),
              "banner %r, main stale %r" % (text, br.js("return document.getElementById('main').className")))
        br.screenshot(os.path.join(art, "broker-down.png"))
        log("broker stopped: the page says %r and greys its values" % text)
    finally:
        br.quit()


if __name__ == "__main__":
    mqdtest.main(body, timeout=300)
