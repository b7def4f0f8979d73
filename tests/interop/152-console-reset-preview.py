#!/usr/bin/python3
"""The console's group reset per partition, by date or duration, with a before/after
preview (issue 38 point 1), in a real headless Chromium (WebDriver, as test 85):

- a `manage` user (admin) on the group page: "shift by -4" on partitions 0,2 shows a
  preview table (committed now 10/10/10, after 6/10/6) and changes nothing until
  confirmed (mqctl's group describe still says 10,10,10); the confirmation moves exactly
  partitions 0 and 2 to 6 (mqctl) and the next Proton consumer of partition 0 gets the
  message at offset 6;
- a reset "to a date and time" (ISO 8601, typed into the page) between two rounds of
  sends lands every partition on the second round's first offset (10); "a duration back
  from now" of 1h lands them on 0; a bad date is refused in the page with a message and
  nothing is sent;
- a `monitor` user (viewer) sees no reset form, and the same reset POSTed with the
  viewer's own session and CSRF token is refused (403, "manage"); the offsets are
  unchanged;
- screenshots of the preview, the result and the viewer's page are kept under
  tests/artifacts/152-console-reset-preview/."""

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import consoletest  # noqa: E402
import mqdtest  # noqa: E402
import webdriver  # noqa: E402
from mqdtest import SLOW, check, log  # noqa: E402

from proton import Message  # noqa: E402

TAB, ENTER = "\ue004", "\ue007"
T, G = "orders", "billing"


def adm(b):
    return b.url.replace("amqp://", "amqp://admin:%s@" % consoletest.PW["admin"])


def committed(b):
    rc, out, err = mqdtest.mqctl(adm(b), "--json", "group", "describe", T, G)
    check(rc == 0, "describe: %s" % err)
    return [p["committed"] for p in json.loads(out)["partitions"]]


def send_round(b, tag):
    for p in range(3):
        mqdtest.send(b.url, "%s/Partitions/%d" % (T, p),
                     [Message(body="%s-%d-%d" % (tag, p, i)) for i in range(10)])


def login(br, ui, user):
    br.go(ui)
    br.wait_js("return document.activeElement && document.activeElement.id === 'login-user'", "login form")
    br.keys(user + TAB + consoletest.PW[user] + ENTER)
    return br.wait_js("return document.getElementById('who').textContent", "logged in")


def preview(br, mode, value, parts=""):
    br.js("document.getElementById('reset-to').value = arguments[0]", mode)
    br.type("#reset-value", value) if value else br.js("document.getElementById('reset-value').value=''")
    if parts:
        br.type("#reset-partitions", parts)
    else:
        br.js("document.getElementById('reset-partitions').value=''")
    br.click("#reset-button")
    return br.wait_js("var r=[...document.querySelectorAll('#reset-preview tbody tr')];"
                      "return r.length && r.map(e => [e.querySelector('.before').textContent,"
                      " e.querySelector('.after').textContent])", "preview of %s %s" % (mode, value))


def confirm(br):
    br.click("#confirm-yes")
    return br.wait_js("var e=document.getElementById('action-result'); return e && e.textContent", "reset result")


def body(t):
    b = consoletest.console_broker(t)
    art = webdriver.artifacts_dir("152-console-reset-preview")
    rc, out, err = mqdtest.mqctl(adm(b), "topic", "create", T, "--partitions", "3")
    check(rc == 0, "create: %s" % err)
    send_round(b, "early")
    time.sleep(1.2 * SLOW)
    mid = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time()))
    time.sleep(1.2 * SLOW)
    send_round(b, "late")
    r = mqdtest.receive(b.url, "%s/ConsumerGroups/%s" % (T, G), 60)
    check(len(r.got) == 60, "billing consumed %d" % len(r.got))
    rc, out, err = mqdtest.mqctl(adm(b), "group", "reset", T, G, "--to", "10")
    check(rc == 0 and committed(b) == [10, 10, 10], "billing at 10: %d %s %r" % (rc, err, committed(b)))

    br = webdriver.Browser(t, height=1000)
    try:
        ui = b.console_url + "/ui/"
        check(login(br, ui, "admin") == "admin (manage)", "admin logged in")
        br.go(ui + "#/group/%s/%s" % (T, G))
        br.wait_js("return document.getElementById('group-lag')", "group page")

        rows = preview(br, "shift", "-4", "0,2")
        check(rows == [["10", "6"], ["10", "10"], ["10", "6"]], "shift preview: %r" % rows)
        br.screenshot(os.path.join(art, "preview.png"))
        check(committed(b) == [10, 10, 10], "the preview changed the offsets: %r" % committed(b))
        res = confirm(br)
        check(res == "Reset done: committed 0:6, 1:10, 2:6", "result: %r" % res)
        check(committed(b) == [6, 10, 6], "after the confirmed shift: %r" % committed(b))
        br.screenshot(os.path.join(art, "result.png"))
        got = mqdtest.receive(b.url, "%s/ConsumerGroups/%s/Partitions/0" % (T, G), 1, credit=1)
        check([m.body for m in got.got] == ["early-0-6"], "next on 0: %r" % [m.body for m in got.got])
        log("shift -4 on 0,2: preview 10->6, nothing moved until confirmed, then [6,10,6]; "
            "the consumer got early-0-6")

        rows = preview(br, "datetime", mid)
        check([a for _, a in rows] == ["10", "10", "10"], "datetime %s preview: %r" % (mid, rows))
        check(confirm(br) == "Reset done: committed 0:10, 1:10, 2:10", "datetime result")
        check(committed(b) == [10, 10, 10], "after the date: %r" % committed(b))
        rows = preview(br, "duration", "1h")
        check([a for _, a in rows] == ["0", "0", "0"], "1h preview: %r" % rows)
        check(confirm(br) == "Reset done: committed 0:0, 1:0, 2:0", "duration result")
        check(committed(b) == [0, 0, 0], "after 1h back: %r" % committed(b))
        log("date %s -> 10 on every partition; 1h back -> 0" % mid)

        br.js("document.getElementById('reset-to').value = 'datetime'")
        br.type("#reset-value", "yesterday")
        br.click("#reset-button")
        msg = br.wait_js("var e=document.getElementById('action-result'); return e && e.textContent", "refusal")
        check("ISO 8601" in msg, "bad date: %r" % msg)
        check(committed(b) == [0, 0, 0], "a refused date moved offsets")

        br.cmd("DELETE", "/cookie")  # a new session for the viewer
        check(login(br, ui, "viewer") == "viewer (monitor)", "viewer logged in")
        br.go(ui + "#/group/%s/%s" % (T, G))
        br.wait_js("return document.getElementById('group-lag')", "viewer's group page")
        check(br.js("return document.getElementById('reset-form')") is None and
              "Needs the manage right" in br.js("return document.body.textContent"),
              "the viewer sees a reset form")
        br.screenshot(os.path.join(art, "viewer.png"))
    finally:
        br.quit()

    viewer = consoletest.Http(b.console_port)
    st, _ = viewer.login("viewer")
    check(st == 200, "viewer login over HTTP: %s" % st)
    st, doc = viewer.post("groups/%s/%s/reset" % (T, G), {"shift": 5, "partitions": "1", "dry_run": False})
    check(st == 403 and "manage" in doc["description"], "viewer's reset: %s %r" % (st, doc))
    st, doc = viewer.post("groups/%s/%s/reset" % (T, G), {"to": "latest", "dry_run": True})
    check(st == 403, "viewer's preview: %s %r" % (st, doc))
    check(committed(b) == [0, 0, 0], "the viewer moved offsets: %r" % committed(b))
    admin = consoletest.Http(b.console_port)
    admin.login("admin")
    st, doc = admin.post("groups/%s/nosuch/reset" % T, {"to": "latest"})
    check(st == 404, "console reset of a missing group: %s %r" % (st, doc))
    rc, out, err = mqdtest.mqctl(adm(b), "--json", "group", "list", T)
    check("nosuch" not in out, "the console's reset made a group: %s" % out)
    log("viewer: no form, POST refused 403, offsets unchanged; a missing group is 404")


if __name__ == "__main__":
    mqdtest.main(body, timeout=300)
