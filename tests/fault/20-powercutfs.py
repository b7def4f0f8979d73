#!/usr/bin/python3
"""powercutfs keeps exactly what POSIX promises after a power cut, rule by rule:
a file's data and size once the file is fsynced, a directory entry once its directory is
fsynced; everything else is undone by `cut` (and partly, in 512-byte sectors and in write
order, by `cut-torn`). `eio-next-fsync` fails one fsync with EIO and drops the dirty data.
What it does not model is refused, not faked. Exit 77 without root or FUSE."""

import errno
import mmap
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pcfs  # noqa: E402

SKIP = 77
failures = []


def check(cond, msg):
    print(("ok   " if cond else "FAIL ") + msg, flush=True)
    if not cond:
        failures.append(msg)


def fsync_path(p):
    fd = os.open(p, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file(p, data, sync=True, dirsync=True):
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.write(fd, data)
    if sync:
        os.fsync(fd)
    os.close(fd)
    if dirsync:
        fsync_path(os.path.dirname(p))


def read(p):
    try:
        with open(p, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def errno_of(fn):
    try:
        fn()
    except OSError as e:
        return e.errno
    return 0


def rules(fs, m):
    """Sets up one case per rule, each in its own durable directory (a directory fsync
    covers every entry in it), cuts once, remounts and checks every case."""
    cases = ("keep nodirsync nodatasync append overwrite shrink falloc ckpt ckpt2 unlink "
             "unlink2 tree tree2 rmdir other").split()
    for c in cases:
        os.mkdir(os.path.join(m, c))
    fsync_path(m)
    j = lambda *a: os.path.join(m, *a)  # noqa: E731
    write_file(j("keep", "f"), b"k" * 1000)                                  # data + entry synced
    write_file(j("nodirsync", "f"), b"n" * 1000, sync=True, dirsync=False)  # entry never synced
    write_file(j("nodatasync", "f"), b"d" * 1000, sync=False, dirsync=True)  # data never synced
    write_file(j("append", "f"), b"a" * 1000)
    with open(j("append", "f"), "ab") as f:
        f.write(b"b" * 1000)
    write_file(j("overwrite", "f"), b"o" * 8192)
    fd = os.open(j("overwrite", "f"), os.O_WRONLY)
    os.pwrite(fd, b"X" * 100, 5000)
    os.close(fd)
    write_file(j("shrink", "f"), b"S" * 8192)
    os.truncate(j("shrink", "f"), 100)
    write_file(j("falloc", "f"), b"f" * 100)
    fd = os.open(j("falloc", "f"), os.O_WRONLY)
    os.posix_fallocate(fd, 0, 65536)
    os.close(fd)
    # the checkpoint pattern: write temp, fsync, rename; without and with the dir fsync
    for name, dirsync in (("ckpt", False), ("ckpt2", True)):
        write_file(j(name, "f"), b"old")
        write_file(j(name, "f.tmp"), b"new", dirsync=False)
        os.rename(j(name, "f.tmp"), j(name, "f"))
        if dirsync:
            fsync_path(j(name))
    for name, dirsync in (("unlink", False), ("unlink2", True)):
        write_file(j(name, "f"), b"u" * 10)
        os.unlink(j(name, "f"))
        if dirsync:
            fsync_path(j(name))
    # a new topic's tree: the segment and its name in the partition dir are synced, the
    # partition's and topic's names are not (the power cut that lost a whole topic)
    os.makedirs(j("tree", "T", "0"))
    write_file(j("tree", "T", "0", "seg"), b"s" * 4096)
    os.makedirs(j("tree2", "T", "0"))
    write_file(j("tree2", "T", "0", "seg"), b"s" * 4096)
    fsync_path(j("tree2", "T"))
    fsync_path(j("tree2"))
    os.mkdir(j("rmdir", "d"))
    fsync_path(j("rmdir"))
    os.rmdir(j("rmdir", "d"))
    # refused, not faked
    check(errno_of(lambda: os.link(j("keep", "f"), j("keep", "hard"))) == errno.EPERM,
          "link refused (EPERM)")
    check(errno_of(lambda: os.symlink("f", j("keep", "sym"))) == errno.EPERM,
          "symlink refused (EPERM)")
    check(errno_of(lambda: os.rename(j("keep", "f"), j("other", "f"))) == errno.EXDEV,
          "rename across directories refused (EXDEV)")
    # O_DIRECT opens work (the kernel's direct I/O path)
    fd = os.open(j("overwrite", "f"), os.O_RDONLY | os.O_DIRECT)
    buf = mmap.mmap(-1, 4096)
    n = os.preadv(fd, [buf], 4096)
    os.close(fd)
    check(n == 4096 and buf[904:1004] == b"X" * 100, "O_DIRECT read sees the latest bytes")
    st = fs.stats()
    check(st["dirty_files"] >= 5 and st["pending_dir_changes"] >= 5,
          "counters show dirty files and pending changes (%s)" % st)

    fs.cut()
    check(errno_of(lambda: read(j("keep", "f"))) == errno.EIO, "after cut: I/O refused with EIO")
    fs.remount()

    check(read(j("keep", "f")) == b"k" * 1000, "synced data and entry survive")
    check(read(j("nodirsync", "f")) is None, "a synced file whose directory was not synced is gone")
    check(read(j("nodatasync", "f")) == b"", "an entry synced without its data: empty file")
    check(read(j("append", "f")) == b"a" * 1000, "an unsynced append is dropped")
    check(read(j("overwrite", "f")) == b"o" * 8192, "an unsynced overwrite is undone")
    check(read(j("shrink", "f")) == b"S" * 8192, "an unsynced truncate is undone")
    check(read(j("falloc", "f")) == b"f" * 100, "an unsynced fallocate's size change is undone")
    check(read(j("ckpt", "f")) == b"old" and read(j("ckpt", "f.tmp")) is None,
          "rename without directory fsync: the old file is back, the new name gone")
    check(read(j("ckpt2", "f")) == b"new" and read(j("ckpt2", "f.tmp")) is None,
          "rename with directory fsync: kept")
    check(read(j("unlink", "f")) == b"u" * 10, "an unsynced unlink is undone, content and all")
    check(read(j("unlink2", "f")) is None, "a synced unlink stays")
    check(not os.path.exists(j("tree", "T")), "a new tree whose top entry was not synced is gone")
    check(read(j("tree2", "T", "0", "seg")) == b"s" * 4096, "a new tree synced all the way up stays")
    check(os.path.isdir(j("rmdir", "d")), "an unsynced rmdir is undone")
    check(sorted(os.listdir(m)) == sorted(cases), "its own files are not listed (%s)" % sorted(os.listdir(m)))


def eio(fs, m):
    p = os.path.join(m, "eio")
    write_file(p, b"e" * 100)
    fd = os.open(p, os.O_WRONLY)
    os.pwrite(fd, b"F" * 100, 0)
    fs.ctl("eio-next-fsync /eio")
    check(errno_of(lambda: os.fsync(fd)) == errno.EIO, "eio-next-fsync: fsync fails with EIO")
    check(errno_of(lambda: os.fsync(fd)) == 0, "the next fsync succeeds (nothing left to write)")
    os.close(fd)
    with open(os.path.join(fs.backing, "eio"), "rb") as f:
        check(f.read() == b"e" * 100, "the failed sync's data was dropped, not written")


def torn(fs, m):
    lengths = set()
    for seed in (1, 2, 3, 4, 5, 6):
        p = os.path.join(m, "torn%d" % seed)
        write_file(p, b"")
        fd = os.open(p, os.O_WRONLY)
        for i in range(64):
            os.write(fd, bytes([i + 1]) * 512)
        os.close(fd)
        fs.cut(torn_seed=seed)
        fs.remount()
        data = read(p)
        lengths.add(len(data))
        ok = len(data) % 512 == 0 and len(data) <= 64 * 512 and all(
            data[i * 512:(i + 1) * 512] == bytes([i + 1]) * 512 for i in range(len(data) // 512))
        check(ok, "cut-torn seed %d: a prefix of the writes in whole sectors (%d of 64)"
              % (seed, len(data) // 512))
    check(len(lengths) > 1, "cut-torn keeps different prefixes for different seeds (%s)" % sorted(lengths))


def main():
    why = pcfs.skip_reason()
    if why:
        print("SKIP: " + why)
        return SKIP
    tmp = tempfile.mkdtemp(prefix="mqd-pcfs-")
    fs = pcfs.PowerCutFS(os.path.join(tmp, "backing"), os.path.join(tmp, "mnt"))
    try:
        fs.mount()
        rules(fs, fs.mnt)
        eio(fs, fs.mnt)
        torn(fs, fs.mnt)
    finally:
        fs.unmount()
    if failures:
        print("FAIL: 20-powercutfs: %d checks failed; log: %s" % (len(failures), fs.log_path))
        return 1
    shutil.rmtree(tmp, ignore_errors=True)
    print("PASS: 20-powercutfs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
