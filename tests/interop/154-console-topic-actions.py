#!/usr/bin/python3
"""The console alters and deletes topics (issue 38 point 1), in headless Chromium as test
85, checked by what mqctl then reports:

- a `manage` user (admin) on the topic page: alter to 3 partitions and retention_ms = 7d
  (with the confirmation step): mqctl describe shows 3 partitions, retention_ms 604800000
  set by management; a bad setting is refused on the page and changes nothing; delete
  (confirmed): mqctl describe exits 3 and the topic list lacks it;
- a `monitor` user (viewer) has no such controls, and its own POSTs (with its session's
  CSRF token) are refused with 403 "manage", the topic unchanged;
- screenshots under tests/artifacts/154-console-topic-actions/."""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import consoletest  # noqa: E402
import mqdtest  # noqa: E402
import webdriver  # noqa: E402
from mqdtest import check, log  # noqa: E402

TAB, ENTER = "\ue004", "\ue007"
T = "t154"


def adm(b):
    return b.url.replace("amqp://", "amqp://admin:%s@" % consoletest.PW["admin"])


def describe(b):
    rc, out, err = mqdtest.mqctl(adm(b), "--json", "topic", "describe", T)
    return rc, json.loads(out) if rc == 0 else None


def result(br):
    return br.wait_js("var e=document.getElementById('action-result'); return e && e.textContent", "result")


def body(t):
    b = consoletest.console_broker(t)
    art = webdriver.artifacts_dir("154-console-topic-actions")
    rc, out, err = mqdtest.mqctl(adm(b), "topic", "create", T, "--partitions", "2")
    check(rc == 0, "create: %s" % err)
    br = webdriver.Browser(t, height=1000)
    try:
        ui = b.console_url + "/ui/"
        br.go(ui)
        br.wait_js("return document.activeElement && document.activeElement.id === 'login-user'", "login")
        br.keys("admin" + TAB + consoletest.PW["admin"] + ENTER)
        br.wait_js("return document.getElementById('who').textContent", "logged in")
        br.go(ui + "#/topic/" + T)
        br.wait_js("return document.getElementById('alter-form')", "the alter form")
        br.type("#alter-partitions", "3")
        br.type("#alter-key", "retention_ms")
        br.type("#alter-value", "7d")
        br.click("#alter-button")
        br.wait_js("return !!document.getElementById('confirm-yes')", "confirmation")
        br.screenshot(os.path.join(art, "alter-confirm.png"))
        br.click("#confirm-yes")
        check(result(br) == "Altered: 3 partitions", "alter result")
        rc, d = describe(b)
        check(rc == 0 and d["partitions"] == 3 and d["config"]["retention_ms"] == 604800000 and
              "retention_ms" in d["overrides"], "after the page's alter: %r" % d)
        br.js("document.getElementById('alter-partitions').value=''")
        br.type("#alter-key", "retention_ms")
        br.type("#alter-value", "soon")
        br.click("#alter-button")
        br.click("#confirm-yes")
        msg = result(br)
        check(msg.startswith("Refused:") and "(400)" in msg, "bad setting: %r" % msg)
        check(describe(b)[1]["config"]["retention_ms"] == 604800000, "a refused alter changed it")
        log("page alter: 3 partitions, retention_ms 7d; a bad value refused (%s)" % msg)

        br.cmd("DELETE", "/cookie")
        br.go(ui)
        br.wait_js("return document.activeElement && document.activeElement.id === 'login-user'", "login")
        br.keys("viewer" + TAB + consoletest.PW["viewer"] + ENTER)
        br.wait_js("return document.getElementById('who').textContent === 'viewer (monitor)'", "viewer")
        br.go(ui + "#/topic/" + T)
        br.wait_js("return document.getElementById('topic-messages')", "viewer's topic page")
        check(br.js("return document.getElementById('alter-form') || document.getElementById('delete-button')")
              is None, "the viewer sees topic controls")
        br.screenshot(os.path.join(art, "viewer.png"))
        viewer = consoletest.Http(b.console_port)
        check(viewer.login("viewer")[0] == 200, "viewer login")
        for path, bd in (("alter", {"partitions": 5}), ("delete", {})):
            st, doc = viewer.post("topics/%s/%s" % (T, path), bd)
            check(st == 403 and "manage" in doc["description"], "viewer's %s: %s %r" % (path, st, doc))
        check(describe(b)[1]["partitions"] == 3, "the viewer changed the topic")

        br.cmd("DELETE", "/cookie")
        br.go(ui)
        br.wait_js("return document.activeElement && document.activeElement.id === 'login-user'", "login")
        br.keys("admin" + TAB + consoletest.PW["admin"] + ENTER)
        br.wait_js("return document.getElementById('who').textContent === 'admin (manage)'", "admin again")
        br.go(ui + "#/topic/" + T)
        br.wait_js("return document.getElementById('delete-button')", "delete button")
        br.click("#delete-button")
        br.click("#confirm-yes")
        check(result(br) == "Deleted " + T, "delete result")
        br.screenshot(os.path.join(art, "deleted.png"))
    finally:
        br.quit()
    rc, _ = describe(b)
    check(rc == 3, "describe after the page's delete: exit %d" % rc)
    rc, out, err = mqdtest.mqctl(adm(b), "--json", "topic", "list")
    check(T not in [x["name"] for x in json.loads(out)], "topic list still has %s" % T)
    log("viewer refused (403, no controls); the page's delete removed %s" % T)


if __name__ == "__main__":
    mqdtest.main(body, timeout=300)
