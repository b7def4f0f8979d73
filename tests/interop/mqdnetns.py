"""Network namespaces for the partition tests (95): a hub namespace holding a bridge, and
one namespace per host (the test itself with etcd, each mqd node) joined to it by a veth
pair. Every name carries the test's PID; nothing of the host's own network is touched
(the veths are created with both ends inside our namespaces).

Addresses stay in the loopback range: each host namespace keeps only 127.0.0.1/32 on its
lo (so the rest of 127/8 is not local there), sets route_localnet and puts 127.1.0.X/24 on
its veth. Links are cut with nft drop rules inside a host's namespace (table inet mqdnp)."""

import atexit
import ctypes
import os
import shutil
import subprocess

CLONE_NEWNET = 0x40000000
SUBNET = "127.1.0.%d"


def skip_reason():
    """Why namespaces and nft cannot be used here, or None."""
    if os.geteuid() != 0:
        return "needs root (ip netns, nft)"
    for tool in ("ip", "nft"):
        if shutil.which(tool) is None:
            return "%s is not on PATH (Debian: apt-get install iproute2 nftables)" % tool
    name = "mqdnpprobe%d" % os.getpid()
    try:
        _run(["ip", "netns", "add", name])
    except RuntimeError as e:
        return "ip netns add failed: %s" % e
    try:
        _run(["ip", "netns", "exec", name, "nft", "add", "table", "inet", "probe"])
    except RuntimeError as e:
        return "nft in a namespace failed: %s" % e
    finally:
        subprocess.run(["ip", "netns", "del", name], stderr=subprocess.DEVNULL)
    return None


def netpart():
    """Test 95's namespaced etcd and broker (NsEtcd, NsBroker, the addresses), for the
    other tests that run nodes in namespaces (84, 134)."""
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "95-repl-netpart.py")
    spec = importlib.util.spec_from_file_location("netpart95", path)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def run_cluster(t, racks, run):
    """The body of a test whose etcd and nodes (one per id of racks) run in namespaces
    with test 95's layout (84, 134): skipped without etcd, root, ip or nft; run(t, net,
    np) is called inside the test's own namespace, np being netpart()."""
    import mqdtest
    if shutil.which("etcd") is None:
        mqdtest.skip("etcd is not on PATH (Debian: apt-get install etcd-server)")
    why = skip_reason()
    if why:
        mqdtest.skip(why)
    np = netpart()
    hosts = {"ctl": [np.CLIENT, np.ETCD_ADDR]}
    hosts.update({"n%d" % i: [np.NODE_ADDR[i]] for i in racks})
    net = Net(hosts)
    try:
        net.up()
        net.enter("ctl")
        run(t, net, np)
    finally:
        t.cleanup()
        net.down()


def _run(argv):
    p = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=30)
    if p.returncode != 0:
        raise RuntimeError("%s: %s" % (" ".join(argv), p.stdout.decode(errors="replace").strip()))
    return p.stdout.decode(errors="replace")


class Net:
    """hosts: {label: [addresses]} (first address primary). Call up(), then enter(label)
    to move this process into a host's namespace; down() (also at exit) removes every
    namespace by name after returning to the original one."""

    def __init__(self, hosts):
        self.prefix = "mqdnp%d" % os.getpid()
        self.hosts = hosts
        self.made = []
        self.home = os.open("/proc/self/ns/net", os.O_RDONLY)
        self.libc = ctypes.CDLL(None, use_errno=True)
        atexit.register(self.down)

    def ns(self, label):
        return "%s%s" % (self.prefix, label)

    def _add(self, label):
        _run(["ip", "netns", "add", self.ns(label)])
        self.made.append(self.ns(label))

    def up(self):
        hub = self.ns("hub")
        self._add("hub")
        _run(["ip", "-n", hub, "link", "add", "br0", "type", "bridge"])
        _run(["ip", "-n", hub, "link", "set", "br0", "up"])
        for i, (label, addrs) in enumerate(self.hosts.items()):
            ns = self.ns(label)
            self._add(label)
            _run(["ip", "link", "add", "v0", "netns", ns, "type", "veth", "peer", "name",
                  "p%d" % i, "netns", hub])
            _run(["ip", "-n", hub, "link", "set", "p%d" % i, "master", "br0", "up"])
            _run(["ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv4.conf.all.route_localnet=1",
                  "net.ipv4.conf.v0.route_localnet=1"])
            _run(["ip", "-n", ns, "link", "set", "lo", "up"])
            _run(["ip", "-n", ns, "addr", "del", "127.0.0.1/8", "dev", "lo"])
            _run(["ip", "-n", ns, "addr", "add", "127.0.0.1/32", "dev", "lo"])
            for a in addrs:
                _run(["ip", "-n", ns, "addr", "add", a + "/24", "dev", "v0"])
            _run(["ip", "-n", ns, "link", "set", "v0", "up"])
            _run(["ip", "netns", "exec", ns, "nft", "add", "table", "inet", "mqdnp"])
            _run(["ip", "netns", "exec", ns, "nft", "add chain inet mqdnp in "
                  "{ type filter hook input priority 0; policy accept; }"])
            _run(["ip", "netns", "exec", ns, "nft", "add chain inet mqdnp out "
                  "{ type filter hook output priority 0; policy accept; }"])

    def enter(self, label):
        fd = os.open("/run/netns/" + self.ns(label), os.O_RDONLY)
        try:
            if self.libc.setns(fd, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns " + self.ns(label))
        finally:
            os.close(fd)

    def exec_prefix(self, label):
        return ["ip", "netns", "exec", self.ns(label)]

    def cut(self, label, peers):
        """Drops every packet between host label and the addresses peers, both ways."""
        ns = self.ns(label)
        s = "{ %s }" % ", ".join(peers)
        _run(["ip", "netns", "exec", ns, "nft", "add rule inet mqdnp in ip saddr %s drop" % s])
        _run(["ip", "netns", "exec", ns, "nft", "add rule inet mqdnp out ip daddr %s drop" % s])

    def heal(self, label):
        ns = self.ns(label)
        _run(["ip", "netns", "exec", ns, "nft", "flush", "chain", "inet", "mqdnp", "in"])
        _run(["ip", "netns", "exec", ns, "nft", "flush", "chain", "inet", "mqdnp", "out"])

    def rules(self, label):
        return _run(["ip", "netns", "exec", self.ns(label), "nft", "list", "table", "inet", "mqdnp"])

    def down(self):
        if self.home is not None:
            self.libc.setns(self.home, CLONE_NEWNET)
        for ns in reversed(self.made):
            subprocess.run(["ip", "netns", "del", ns], stderr=subprocess.DEVNULL)
        self.made = []
