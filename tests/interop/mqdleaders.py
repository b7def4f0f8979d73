"""Who may serve a partition's links (issue 32 point 4), checked from the outside: the
nodes' own logs and what the clients received. Shared by 111 and the crash loops (92, 93).

A node serves a partition's links only while it leads it: a consumer joins a group on
it only after its role line `repl: T/P: leader (...)` and before any later role line
(`follower`, `no role`), and every member is gone (its `group: leave` logged) by the
time such a line says it stopped leading. Clients add the other half: each message a
client got from node X came while X led, and on one link the offsets only grow.

These are pure functions over log files and lists; nothing here talks to a broker."""

import bisect
import datetime
import re

_TS = r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})Z"
ROLE_RE = re.compile(_TS + r" \w+ repl: (\S+)/(\d+): (leader|follower|no role) \(")
GROUP_RE = re.compile(_TS + r" \w+ group: (join|leave) topic=(\S+) group=(\S+) member=.* members=(\d+)$")
START_RE = re.compile(_TS + r" ")


def log_time(s):
    """A log line's UTC timestamp (YYYY-MM-DDTHH:MM:SS.mmm) as seconds since the epoch."""
    d = datetime.datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%f")
    return d.replace(tzinfo=datetime.timezone.utc).timestamp()


def scan_logs(logs, topic, part=0):
    """Over one node's log files (one per start, in order): (violations, timeline).

    violations: the exact checks, in the log's own order (one thread writes it): a
    member of a group of `topic` joined while the node's last role line for topic/part
    was not `leader` (or before any), or a role line other than `leader` came while a
    group of `topic` still had members on the node.
    timeline: [(time, role)] with role "leader", "follower", "no role", and "start" at
    each log's first line (a new process leads nothing yet)."""
    bad, timeline = [], []
    for run, path in enumerate(logs, 1):
        try:
            with open(path, "rb") as f:
                text = f.read().decode("utf-8", "replace")
        except OSError:
            continue
        role, members, first = None, {}, True
        for line in text.splitlines():
            if first:
                m = START_RE.match(line)
                if m:
                    timeline.append((log_time(m.group(1)), "start"))
                    first = False
            m = ROLE_RE.match(line)
            if m and m.group(2) == topic and int(m.group(3)) == part:
                role = m.group(4)
                timeline.append((log_time(m.group(1)), role))
                held = {g: n for g, n in members.items() if n}
                if role != "leader" and held:
                    bad.append("run %d: groups %r still had members when it became %s (%s)"
                               % (run, held, role, m.group(1)))
                continue
            m = GROUP_RE.match(line)
            if m and m.group(3) == topic:
                members[m.group(4)] = int(m.group(5))
                if m.group(2) == "join" and role != "leader":
                    bad.append("run %d: a member of group %s joined while %s: %s"
                               % (run, m.group(4), role or "it had no role yet", line))
    return bad, timeline


def scan_nodes(brokers, topic, part=0):
    """scan_logs over every broker ({id: mqdtest.Broker}): ([violation text], {id: timeline})."""
    bad, tls = [], {}
    for i, b in sorted(brokers.items()):
        v, tls[i] = scan_logs(b.logs, topic, part)
        bad += ["node %d %s" % (i, x) for x in v]
    return bad, tls


def not_led(timelines, node, t, slack):
    """Why a message that a client got from `node` at wall-clock time t did not come from
    the partition's leader, or None. It did if the node's last role event at or before t
    is `leader`, or if its last `leader` period ended (a step-down, or a start of a new
    process) at most `slack` seconds before t (sent before the step-down, read late by a
    busy client)."""
    tl = timelines.get(node) or []
    k = bisect.bisect_right([e[0] for e in tl], t)
    if k == 0:
        return "before any role line of node %r" % node
    when, role = tl[k - 1]
    if role == "leader":
        return None
    # the node's last leader period ended (a step-down, or its process died and a new
    # one started: a fast failover makes that restart follow within 0.1 s) at most slack
    # before t
    j = max((i for i in range(k - 1) if tl[i][1] == "leader"), default=None)
    if j is not None and t - tl[j + 1][0] <= slack:
        return None
    return "node %r was %s since %.3f s before" % (node, "starting" if role == "start" else role, t - when)


def delivery_violations(timelines, got, slack):
    """got: [(node, wall-clock time, what)]; the ones not_led finds, as text."""
    times = {n: [e[0] for e in tl] for n, tl in timelines.items()}
    bad = []
    for node, t, what in got:
        tl = timelines.get(node) or []
        k = bisect.bisect_right(times.get(node, []), t)
        if k and tl[k - 1][1] == "leader":
            continue  # the common case, without building a message
        why = not_led(timelines, node, t, slack)
        if why:
            bad.append("%s: %s" % (what, why))
    return bad


def served_violations(timelines, got, slack):
    """delivery_violations with forwarding (issue 33): a client connected to a node that
    follows (or has no role) is served through it by the leader (forwarded links), so
    only a message from a node that had no role line yet (starting) counts; whether a
    node served a partition from its own log is the logs' check (scan_logs)."""
    return [v for v in delivery_violations(timelines, got, slack)
            if "was follower" not in v and "was no role" not in v]


def link_order_violations(deliveries):
    """deliveries: [(link number, node, offset, ...)] in arrival order. On one link the
    offsets must grow (a client that never releases gets nothing twice on one link);
    the (link, node, previous offset, offset) of each that did not."""
    last, bad = {}, []
    for d in deliveries:
        link, node, off = d[0], d[1], d[2]
        if link in last and off <= last[link]:
            bad.append((link, node, last[link], off))
        last[link] = max(off, last.get(link, -1))
    return bad
