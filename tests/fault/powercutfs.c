/* powercutfs: a pass-through FUSE file system that forgets, on command, everything a
 * power cut may forget under POSIX: a file's data and size since that file's last
 * fsync/fdatasync, and a directory's entries (creates, mkdirs, unlinks, rmdirs, renames)
 * since that directory's last fsync. mqd's crash tests put its data dir on it, SIGKILL
 * mqd, cut, remount and check that everything acknowledged is still there.
 *
 *   powercutfs BACKING MOUNTPOINT [-f] [-o OPT]   (runs single-threaded)
 *
 * Every operation is applied to BACKING at once (reads need no merging); what is not yet
 * durable is kept as undo information in memory:
 *   - per file (by backing inode): its durable size and the before-image of every block
 *     below that size written since the last sync, plus the order of those writes;
 *   - per directory change: enough to take it back (an unlinked or replaced file is moved
 *     to BACKING/.pcfs-trash, not removed, until its directory is synced).
 * A sync is bookkeeping only: the backing file system is never fsynced (the machine under
 * the test does not lose power).
 *
 * Commands, written to MOUNTPOINT/.powercut (one per write):
 *   cut                  undo every unsynced write and directory change, as a power loss
 *                        would, then refuse all I/O (EIO) until remounted
 *   cut-torn [SEED]      the same, but each file keeps a random prefix (in write order, in
 *                        512-byte sectors) of its unsynced writes: torn writes
 *   eio-next-fsync PATH  the next fsync/fdatasync of PATH's file fails with EIO and its
 *                        unsynced data is dropped (Linux after a write-back error)
 * Reading MOUNTPOINT/.powercut gives counters (dirty files, pending directory changes).
 *
 * Not modelled, so refused (never faked): hard links and symlinks (EPERM), renames across
 * directories or over a directory, RENAME_EXCHANGE (EXDEV / EINVAL), fallocate modes other
 * than 0, KEEP_SIZE, PUNCH_HOLE and ZERO_RANGE (EOPNOTSUPP), copy_file_range, xattrs.
 * Passed through and treated as durable at once: chmod, chown, utimens (mqd relies on
 * none of them after a crash). syncfs(2) never reaches a FUSE file system in Linux 6.x
 * through libfuse 3.14, so a store running flush_sync = syncfs is seen as not syncing at
 * all; sync_file_range(2) promises no durability and is not seen either. O_DIRECT opens
 * work (the kernel's FUSE direct I/O path; the backing file is opened without it). A
 * sector written twice since its sync keeps its last content in a torn cut.
 */
#define FUSE_USE_VERSION 31
#define _GNU_SOURCE
#include <fuse.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define BLK 4096
#define SECTOR 512
#define CTL_NAME ".powercut"
#define TRASH ".pcfs-trash"
#define NBUCKETS 4096
#define CTL_FH UINT64_MAX

typedef struct saved {
    uint64_t blk;
    uint32_t len; /* < BLK for the block holding the durable end */
    uint8_t *data;
} saved_t;

typedef struct wrec {
    uint64_t off, len;
} wrec_t;

/* A file with unsynced changes. fd reaches the inode whatever its names become. */
typedef struct node {
    struct node *next;
    ino_t ino;
    int fd;
    uint64_t dsize; /* size at the last sync */
    bool shrunk;    /* an unsynced truncate below dsize (a torn cut reverts it whole) */
    saved_t *sv;
    size_t nsv, capsv;
    wrec_t *wr;
    size_t nwr, capwr;
} node_t;

enum { NS_CREATE, NS_REMOVE, NS_RMDIR, NS_RENAME };

/* One unsynced directory change; paths are relative to BACKING, as they were right after
 * the change (undone newest first, so they still are when it is undone). */
typedef struct nsop {
    int kind;
    ino_t dir;   /* the directory whose fsync makes it durable */
    char *path;  /* created, removed, or the rename's new name */
    char *from;  /* NS_RENAME: the old name */
    char *trash; /* NS_REMOVE, NS_RENAME over a file: where that file waits */
    ino_t ino;   /* the object created/removed/renamed */
    mode_t mode; /* NS_RMDIR: to make it again */
} nsop_t;

static struct {
    int root; /* BACKING */
    bool dead;
    node_t *bucket[NBUCKETS];
    size_t ndirty;
    nsop_t *ops;
    size_t nops, capops;
    uint64_t trash_seq;
    bool eio_armed;
    ino_t eio_ino;
    uint64_t rng;
    uint64_t cuts, dropped_bytes, undone_ops;
} g;

static void warnx_(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("powercutfs: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static const char *rel(const char *path)
{
    while (*path == '/')
        path++;
    return *path ? path : ".";
}

static bool is_ctl(const char *path)
{
    return path && strcmp(path, "/" CTL_NAME) == 0;
}

static bool is_hidden(const char *path)
{
    return path && (strcmp(path, "/" TRASH) == 0 || strncmp(path, "/" TRASH "/", sizeof("/" TRASH "/") - 1) == 0);
}

static void *xgrow(void *p, size_t *cap, size_t n, size_t size)
{
    if (n < *cap)
        return p;
    size_t nc = *cap ? *cap * 2 : 16;
    void *np = realloc(p, nc * size);
    if (!np) {
        warnx_("out of memory");
        abort(); /* the model would be wrong from here on: stop loudly */
    }
    *cap = nc;
    return np;
}

static uint64_t rnd(void)
{
    g.rng ^= g.rng << 13;
    g.rng ^= g.rng >> 7;
    g.rng ^= g.rng << 17;
    return g.rng;
}

/* ---- files ---- */

static node_t **slot(ino_t ino)
{
    node_t **pp = &g.bucket[ino % NBUCKETS];
    while (*pp && (*pp)->ino != ino)
        pp = &(*pp)->next;
    return pp;
}

static void node_free(node_t *n)
{
    for (size_t i = 0; i < n->nsv; i++)
        free(n->sv[i].data);
    free(n->sv);
    free(n->wr);
    if (n->fd >= 0)
        close(n->fd);
    free(n);
}

static void node_drop(ino_t ino)
{
    node_t **pp = slot(ino);
    if (*pp) {
        node_t *n = *pp;
        *pp = n->next;
        node_free(n);
        g.ndirty--;
    }
}

/* The node of the file open as fd; made (durable size = now, or 0 for a file just
 * created) on its first change since a sync. */
static node_t *node_of(int fd, bool created)
{
    struct stat sb;
    if (fstat(fd, &sb) != 0)
        return NULL;
    node_t **pp = slot(sb.st_ino);
    if (*pp)
        return *pp;
    node_t *n = calloc(1, sizeof *n);
    if (!n)
        abort();
    char p[64];
    snprintf(p, sizeof p, "/proc/self/fd/%d", fd);
    n->fd = open(p, O_RDWR | O_CLOEXEC);
    if (n->fd < 0) {
        warnx_("cannot reopen inode %ju: %s", (uintmax_t)sb.st_ino, strerror(errno));
        free(n);
        return NULL;
    }
    n->ino = sb.st_ino;
    n->dsize = created ? 0 : (uint64_t)sb.st_size;
    *pp = n;
    g.ndirty++;
    return n;
}

static saved_t *saved_find(node_t *n, uint64_t blk, size_t *at)
{
    size_t lo = 0, hi = n->nsv;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (n->sv[mid].blk < blk)
            lo = mid + 1;
        else
            hi = mid;
    }
    *at = lo;
    return lo < n->nsv && n->sv[lo].blk == blk ? &n->sv[lo] : NULL;
}

/* Keeps the durable content of [off, off+len) below dsize before it is changed. */
static int save_range(node_t *n, uint64_t off, uint64_t len)
{
    if (len == 0 || off >= n->dsize)
        return 0;
    uint64_t end = off + len < n->dsize ? off + len : n->dsize;
    for (uint64_t b = off / BLK; b * BLK < end; b++) {
        size_t at;
        if (saved_find(n, b, &at))
            continue;
        uint64_t bl = n->dsize - b * BLK < BLK ? n->dsize - b * BLK : BLK;
        uint8_t *d = malloc(bl);
        if (!d)
            abort();
        ssize_t r = pread(n->fd, d, bl, (off_t)(b * BLK));
        if (r < 0) {
            free(d);
            return -errno;
        }
        if ((uint64_t)r < bl) /* the backing file is shorter than the durable size */
            memset(d + r, 0, bl - (uint64_t)r);
        n->sv = xgrow(n->sv, &n->capsv, n->nsv, sizeof *n->sv);
        memmove(&n->sv[at + 1], &n->sv[at], (n->nsv - at) * sizeof *n->sv);
        n->sv[at] = (saved_t){b, (uint32_t)bl, d};
        n->nsv++;
    }
    return 0;
}

static void note_write(node_t *n, uint64_t off, uint64_t len)
{
    n->wr = xgrow(n->wr, &n->capwr, n->nwr, sizeof *n->wr);
    n->wr[n->nwr++] = (wrec_t){off, len};
}

/* The durable content of [off, off+len): before-images below dsize, zeros past it. */
static void durable_bytes(node_t *n, uint64_t off, uint64_t len, uint8_t *out)
{
    memset(out, 0, len);
    for (uint64_t o = off; o < off + len;) {
        uint64_t b = o / BLK, in = o % BLK;
        uint64_t take = BLK - in < off + len - o ? BLK - in : off + len - o;
        size_t at;
        saved_t *s = saved_find(n, b, &at);
        if (s && in < s->len)
            memcpy(out + (o - off), s->data + in, (in + take <= s->len ? take : s->len - in));
        else if (!s && o < n->dsize) {
            /* never changed since the sync: the backing bytes are the durable ones */
            uint64_t l = n->dsize - o < take ? n->dsize - o : take;
            if (pread(n->fd, out + (o - off), l, (off_t)o) < 0)
                warnx_("read back inode %ju: %s", (uintmax_t)n->ino, strerror(errno));
        }
        o += take;
    }
}

/* Puts the file back as it was at its last sync. */
static void node_revert(node_t *n)
{
    struct stat sb;
    if (fstat(n->fd, &sb) == 0 && (uint64_t)sb.st_size > n->dsize)
        g.dropped_bytes += (uint64_t)sb.st_size - n->dsize;
    if (ftruncate(n->fd, (off_t)n->dsize) != 0)
        warnx_("truncate inode %ju: %s", (uintmax_t)n->ino, strerror(errno));
    for (size_t i = 0; i < n->nsv; i++) {
        saved_t *s = &n->sv[i];
        if (pwrite(n->fd, s->data, s->len, (off_t)(s->blk * BLK)) != (ssize_t)s->len)
            warnx_("restore inode %ju: %s", (uintmax_t)n->ino, strerror(errno));
        g.dropped_bytes += s->len;
    }
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* A torn cut: the first k sectors the file's unsynced writes touched (in write order)
 * reached the disk, the others did not. */
static void node_tear(node_t *n)
{
    if (n->shrunk || n->nwr == 0) {
        node_revert(n);
        return;
    }
    size_t total = 0;
    for (size_t i = 0; i < n->nwr; i++)
        total += (n->wr[i].off + n->wr[i].len + SECTOR - 1) / SECTOR - n->wr[i].off / SECTOR;
    uint64_t *kept = malloc((total + 1) * sizeof *kept), *all = malloc((total + 1) * sizeof *all);
    if (!kept || !all)
        abort();
    size_t k = (size_t)(rnd() % (total + 1)), nk = 0, na = 0;
    uint64_t newsize = n->dsize;
    for (size_t i = 0; i < n->nwr; i++) {
        uint64_t end = n->wr[i].off + n->wr[i].len;
        for (uint64_t s = n->wr[i].off / SECTOR; s * SECTOR < end; s++) {
            all[na++] = s;
            if (nk < k) {
                kept[nk++] = s;
                uint64_t e = (s + 1) * SECTOR < end ? (s + 1) * SECTOR : end;
                if (e > newsize)
                    newsize = e;
            }
        }
    }
    qsort(kept, nk, sizeof *kept, cmp_u64);
    qsort(all, na, sizeof *all, cmp_u64);
    uint8_t buf[SECTOR];
    for (size_t i = 0; i < na; i++) {
        if ((i > 0 && all[i] == all[i - 1]) || all[i] * SECTOR >= newsize)
            continue;
        if (bsearch(&all[i], kept, nk, sizeof *kept, cmp_u64))
            continue;
        uint64_t len = newsize - all[i] * SECTOR < SECTOR ? newsize - all[i] * SECTOR : SECTOR;
        durable_bytes(n, all[i] * SECTOR, len, buf);
        if (pwrite(n->fd, buf, len, (off_t)(all[i] * SECTOR)) != (ssize_t)len)
            warnx_("tear inode %ju: %s", (uintmax_t)n->ino, strerror(errno));
        g.dropped_bytes += len;
    }
    if (ftruncate(n->fd, (off_t)newsize) != 0)
        warnx_("truncate inode %ju: %s", (uintmax_t)n->ino, strerror(errno));
    free(kept);
    free(all);
}

/* ---- directory changes ---- */

static ino_t parent_ino(const char *path)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s", rel(path));
    char *sl = strrchr(p, '/');
    struct stat sb;
    if (sl)
        *sl = '\0';
    if (fstatat(g.root, sl ? p : ".", &sb, AT_SYMLINK_NOFOLLOW) != 0)
        return 0;
    return sb.st_ino;
}

static void op_add(nsop_t op)
{
    g.ops = xgrow(g.ops, &g.capops, g.nops, sizeof *g.ops);
    g.ops[g.nops++] = op;
}

static void op_free(nsop_t *o)
{
    free(o->path);
    free(o->from);
    free(o->trash);
}

static int rm_cb(const char *p, const struct stat *sb, int type, struct FTW *ftw)
{
    (void)sb;
    (void)type;
    (void)ftw;
    if (remove(p) != 0)
        warnx_("remove %s: %s", p, strerror(errno));
    return 0;
}

/* rm -rf of a path relative to BACKING (through /proc so that nftw sees the real one). */
static void rm_rf(const char *relpath)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "/proc/self/fd/%d/%s", g.root, relpath);
    char real[PATH_MAX];
    if (realpath(p, real) == NULL)
        return;
    nftw(real, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

static char *trash_name(void)
{
    char *t = malloc(64);
    if (!t)
        abort();
    snprintf(t, 64, TRASH "/%" PRIu64, g.trash_seq++);
    return t;
}

/* fsync of directory ino: its changes are durable; what waited in the trash for it goes. */
static void dir_synced(ino_t ino)
{
    size_t j = 0;
    for (size_t i = 0; i < g.nops; i++) {
        nsop_t *o = &g.ops[i];
        if (o->dir != ino) {
            g.ops[j++] = *o;
            continue;
        }
        if (o->trash) {
            struct stat sb;
            if (fstatat(g.root, o->trash, &sb, AT_SYMLINK_NOFOLLOW) == 0)
                node_drop(sb.st_ino);
            rm_rf(o->trash);
        }
        op_free(o);
    }
    g.nops = j;
}

static void op_undo(nsop_t *o)
{
    struct stat sb;
    switch (o->kind) {
    case NS_CREATE:
        if (fstatat(g.root, o->path, &sb, AT_SYMLINK_NOFOLLOW) == 0 && sb.st_ino == o->ino)
            rm_rf(o->path);
        else
            warnx_("cut: %s is no longer the created inode; left", o->path);
        break;
    case NS_REMOVE:
        if (renameat(g.root, o->trash, g.root, o->path) != 0)
            warnx_("cut: cannot restore %s: %s", o->path, strerror(errno));
        break;
    case NS_RMDIR:
        if (mkdirat(g.root, o->path, o->mode & 07777) != 0)
            warnx_("cut: cannot make %s again: %s", o->path, strerror(errno));
        break;
    case NS_RENAME:
        if (renameat(g.root, o->path, g.root, o->from) != 0)
            warnx_("cut: cannot rename %s back: %s", o->path, strerror(errno));
        if (o->trash && renameat(g.root, o->trash, g.root, o->path) != 0)
            warnx_("cut: cannot restore %s: %s", o->path, strerror(errno));
        break;
    }
    g.undone_ops++;
}

static void cut(bool torn, uint64_t seed)
{
    /* splitmix64 of the seed, so that small seeds give unrelated sequences */
    uint64_t z = seed + 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    g.rng = (z ^ (z >> 31)) | 1;
    for (size_t b = 0; b < NBUCKETS; b++)
        for (node_t *n = g.bucket[b]; n; n = n->next)
            torn ? node_tear(n) : node_revert(n);
    for (size_t i = g.nops; i-- > 0;)
        op_undo(&g.ops[i]);
    for (size_t i = 0; i < g.nops; i++)
        op_free(&g.ops[i]);
    g.nops = 0;
    for (size_t b = 0; b < NBUCKETS; b++)
        while (g.bucket[b]) {
            node_t *n = g.bucket[b];
            g.bucket[b] = n->next;
            node_free(n);
        }
    g.ndirty = 0;
    rm_rf(TRASH);
    g.dead = true;
    g.cuts++;
    warnx_("%s: undid %" PRIu64 " directory changes, %" PRIu64 " bytes; I/O refused until "
           "remounted", torn ? "cut-torn" : "cut", g.undone_ops, g.dropped_bytes);
}

/* ---- control file ---- */

static int ctl_write(const char *buf, size_t size)
{
    char cmd[PATH_MAX + 32];
    if (size >= sizeof cmd)
        return -EINVAL;
    memcpy(cmd, buf, size);
    cmd[size] = '\0';
    while (size > 0 && (cmd[size - 1] == '\n' || cmd[size - 1] == ' '))
        cmd[--size] = '\0';
    if (strcmp(cmd, "cut") == 0) {
        cut(false, 0);
    } else if (strncmp(cmd, "cut-torn", 8) == 0 && (cmd[8] == '\0' || cmd[8] == ' ')) {
        cut(true, cmd[8] ? strtoull(cmd + 9, NULL, 0) : 0);
    } else if (strncmp(cmd, "eio-next-fsync ", 15) == 0) {
        struct stat sb;
        if (fstatat(g.root, rel(cmd + 15), &sb, 0) != 0)
            return -errno;
        g.eio_armed = true;
        g.eio_ino = sb.st_ino;
    } else {
        warnx_("unknown command '%s' (cut, cut-torn [SEED], eio-next-fsync PATH)", cmd);
        return -EINVAL;
    }
    return 0;
}

/* Counters, then one line per pending directory change (newest last): what a cut would
 * undo, for a test that wants to say why something was lost. */
static int ctl_read(char *buf, size_t size, off_t off)
{
    static const char *const kinds[] = {"create", "remove", "rmdir", "rename"};
    char *s = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&s, &n);
    if (!f)
        return -ENOMEM;
    fprintf(f,
            "dirty_files %zu\npending_dir_changes %zu\ncuts %" PRIu64 "\nundone_dir_changes %" PRIu64
            "\ndropped_bytes %" PRIu64 "\n",
            g.ndirty, g.nops, g.cuts, g.undone_ops, g.dropped_bytes);
    for (size_t i = 0; i < g.nops; i++)
        fprintf(f, "pending %s %s%s%s\n", kinds[g.ops[i].kind], g.ops[i].from ? g.ops[i].from : "",
                g.ops[i].from ? " -> " : "", g.ops[i].path);
    fclose(f);
    int r = 0;
    if ((size_t)off < n) {
        r = (int)((n - (size_t)off) < size ? n - (size_t)off : size);
        memcpy(buf, s + off, (size_t)r);
    }
    free(s);
    return r;
}

/* ---- operations ---- */

#define ALIVE()             \
    do {                    \
        if (g.dead)         \
            return -EIO;    \
    } while (0)

static void *pc_init(struct fuse_conn_info *conn, struct fuse_config *cfg)
{
    (void)conn;
    cfg->use_ino = 1;
    cfg->nullpath_ok = 1;
    cfg->hard_remove = 1; /* no .fuse_hidden files: an open unlinked file is used by fh */
    cfg->entry_timeout = cfg->attr_timeout = cfg->negative_timeout = 0;
    return NULL;
}

static int pc_getattr(const char *path, struct stat *st, struct fuse_file_info *fi)
{
    if (is_ctl(path)) {
        memset(st, 0, sizeof *st);
        st->st_mode = S_IFREG | 0600;
        st->st_nlink = 1;
        st->st_size = 0;
        return 0;
    }
    if (g.dead && strcmp(path ? path : "", "/") != 0)
        return -EIO;
    if (is_hidden(path))
        return -ENOENT;
    int r = fi ? fstat((int)fi->fh, st) : fstatat(g.root, rel(path), st, AT_SYMLINK_NOFOLLOW);
    return r == 0 ? 0 : -errno;
}

static int pc_access(const char *path, int mask)
{
    ALIVE();
    if (is_ctl(path))
        return 0;
    if (is_hidden(path))
        return -ENOENT;
    return faccessat(g.root, rel(path), mask, 0) == 0 ? 0 : -errno;
}

static int pc_readlink(const char *path, char *buf, size_t size)
{
    ALIVE();
    ssize_t n = readlinkat(g.root, rel(path), buf, size - 1);
    if (n < 0)
        return -errno;
    buf[n] = '\0';
    return 0;
}

static int pc_opendir(const char *path, struct fuse_file_info *fi)
{
    ALIVE();
    if (is_hidden(path))
        return -ENOENT;
    int fd = openat(g.root, rel(path), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    fi->fh = (uint64_t)fd;
    return 0;
}

static int pc_readdir(const char *path, void *buf, fuse_fill_dir_t fill, off_t off,
                      struct fuse_file_info *fi, enum fuse_readdir_flags flags)
{
    (void)path;
    (void)off;
    (void)flags;
    ALIVE();
    int fd = dup((int)fi->fh);
    if (fd < 0)
        return -errno;
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return -errno;
    }
    rewinddir(d);
    struct stat ds, rs;
    bool top = fstat(fd, &ds) == 0 && fstat(g.root, &rs) == 0 && ds.st_ino == rs.st_ino &&
               ds.st_dev == rs.st_dev; /* path may be NULL (nullpath_ok) */
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (top && (strcmp(e->d_name, TRASH) == 0 || strcmp(e->d_name, CTL_NAME) == 0))
            continue;
        struct stat st = {.st_ino = e->d_ino, .st_mode = (mode_t)DTTOIF(e->d_type)};
        if (fill(buf, e->d_name, &st, 0, 0))
            break;
    }
    closedir(d);
    return 0;
}

static int pc_releasedir(const char *path, struct fuse_file_info *fi)
{
    (void)path;
    close((int)fi->fh);
    return 0;
}

static int pc_fsyncdir(const char *path, int datasync, struct fuse_file_info *fi)
{
    (void)path;
    (void)datasync;
    ALIVE();
    struct stat sb;
    if (fstat((int)fi->fh, &sb) != 0)
        return -errno;
    dir_synced(sb.st_ino);
    return 0;
}

static int pc_mkdir(const char *path, mode_t mode)
{
    ALIVE();
    if (is_hidden(path) || is_ctl(path))
        return -EPERM;
    ino_t dir = parent_ino(path);
    if (mkdirat(g.root, rel(path), mode) != 0)
        return -errno;
    struct stat sb;
    if (fstatat(g.root, rel(path), &sb, AT_SYMLINK_NOFOLLOW) != 0)
        return -errno;
    op_add((nsop_t){.kind = NS_CREATE, .dir = dir, .path = strdup(rel(path)), .ino = sb.st_ino});
    return 0;
}

/* Truncation to size of the file open as fd: its durable tail is kept first. */
static int truncate_fd(int fd, off_t size)
{
    node_t *n = node_of(fd, false);
    if (!n)
        return -EIO;
    if ((uint64_t)size < n->dsize) {
        int rc = save_range(n, (uint64_t)size, n->dsize - (uint64_t)size);
        if (rc != 0)
            return rc;
        n->shrunk = true;
    }
    return ftruncate(fd, size) == 0 ? 0 : -errno;
}

static int open_backing(const char *path, struct fuse_file_info *fi, mode_t mode, bool *created)
{
    int flags = fi->flags & ~(O_DIRECT | O_APPEND | O_TRUNC | O_NOFOLLOW);
    struct stat sb;
    bool existed = fstatat(g.root, rel(path), &sb, AT_SYMLINK_NOFOLLOW) == 0;
    int fd = openat(g.root, rel(path), flags | O_CLOEXEC | O_NOFOLLOW, mode);
    if (fd < 0)
        return -errno;
    *created = !existed;
    if (*created) {
        if (fstat(fd, &sb) != 0 || node_of(fd, true) == NULL) {
            close(fd);
            return -EIO;
        }
        op_add((nsop_t){.kind = NS_CREATE, .dir = parent_ino(path), .path = strdup(rel(path)),
                        .ino = sb.st_ino});
    } else if (fi->flags & O_TRUNC) {
        int rc = truncate_fd(fd, 0);
        if (rc != 0) {
            close(fd);
            return rc;
        }
    }
    fi->fh = (uint64_t)fd;
    return 0;
}

static int pc_create(const char *path, mode_t mode, struct fuse_file_info *fi)
{
    ALIVE();
    if (is_hidden(path) || is_ctl(path))
        return -EPERM;
    bool created;
    return open_backing(path, fi, mode, &created);
}

static int pc_open(const char *path, struct fuse_file_info *fi)
{
    if (is_ctl(path)) {
        fi->fh = CTL_FH;
        fi->direct_io = 1;
        return 0;
    }
    ALIVE();
    if (is_hidden(path))
        return -ENOENT;
    bool created;
    return open_backing(path, fi, 0, &created);
}

static int pc_read(const char *path, char *buf, size_t size, off_t off, struct fuse_file_info *fi)
{
    (void)path;
    if (fi->fh == CTL_FH)
        return ctl_read(buf, size, off);
    ALIVE();
    ssize_t n = pread((int)fi->fh, buf, size, off);
    return n < 0 ? -errno : (int)n;
}

static int pc_write(const char *path, const char *buf, size_t size, off_t off,
                    struct fuse_file_info *fi)
{
    (void)path;
    if (fi->fh == CTL_FH) {
        int rc = ctl_write(buf, size);
        return rc == 0 ? (int)size : rc;
    }
    ALIVE();
    node_t *n = node_of((int)fi->fh, false);
    if (!n)
        return -EIO;
    int rc = save_range(n, (uint64_t)off, size);
    if (rc != 0)
        return rc;
    note_write(n, (uint64_t)off, size);
    ssize_t w = pwrite((int)fi->fh, buf, size, off);
    return w < 0 ? -errno : (int)w;
}

static int pc_truncate(const char *path, off_t size, struct fuse_file_info *fi)
{
    if (is_ctl(path))
        return 0;
    ALIVE();
    if (fi)
        return truncate_fd((int)fi->fh, size);
    int fd = openat(g.root, rel(path), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return -errno;
    int rc = truncate_fd(fd, size);
    close(fd);
    return rc;
}

static int pc_fallocate(const char *path, int mode, off_t off, off_t len, struct fuse_file_info *fi)
{
    (void)path;
    ALIVE();
    if (!fi)
        return -EOPNOTSUPP;
    int content = FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE;
    if (mode & ~(FALLOC_FL_KEEP_SIZE | content))
        return -EOPNOTSUPP; /* collapse, insert, unshare: not modelled */
    if (mode & content) {
        node_t *n = node_of((int)fi->fh, false);
        if (!n)
            return -EIO;
        int rc = save_range(n, (uint64_t)off, (uint64_t)len);
        if (rc != 0)
            return rc;
        note_write(n, (uint64_t)off, (uint64_t)len);
    } else if (!(mode & FALLOC_FL_KEEP_SIZE) && node_of((int)fi->fh, false) == NULL) {
        return -EIO; /* a size change past the durable size: cut truncates it away */
    }
    return fallocate((int)fi->fh, mode, off, len) == 0 ? 0 : -errno;
}

static int pc_fsync(const char *path, int datasync, struct fuse_file_info *fi)
{
    (void)path;
    (void)datasync;
    if (fi->fh == CTL_FH)
        return 0;
    ALIVE();
    struct stat sb;
    if (fstat((int)fi->fh, &sb) != 0)
        return -errno;
    node_t **pp = slot(sb.st_ino);
    if (g.eio_armed && g.eio_ino == sb.st_ino) {
        g.eio_armed = false;
        if (*pp)
            node_revert(*pp); /* the dirty data is gone, as Linux marks those pages clean */
        node_drop(sb.st_ino);
        warnx_("eio-next-fsync: fsync of inode %ju failed with EIO", (uintmax_t)sb.st_ino);
        return -EIO;
    }
    node_drop(sb.st_ino); /* durable: nothing to undo any more */
    return 0;
}

static int pc_release(const char *path, struct fuse_file_info *fi)
{
    (void)path;
    if (fi->fh != CTL_FH)
        close((int)fi->fh);
    return 0;
}

static int pc_unlink(const char *path)
{
    ALIVE();
    if (is_hidden(path) || is_ctl(path))
        return -EPERM;
    struct stat sb;
    if (fstatat(g.root, rel(path), &sb, AT_SYMLINK_NOFOLLOW) != 0)
        return -errno;
    if (S_ISDIR(sb.st_mode))
        return -EISDIR;
    ino_t dir = parent_ino(path);
    char *t = trash_name();
    if (renameat(g.root, rel(path), g.root, t) != 0) {
        int e = errno;
        free(t);
        return -e;
    }
    op_add((nsop_t){.kind = NS_REMOVE, .dir = dir, .path = strdup(rel(path)), .trash = t,
                    .ino = sb.st_ino});
    return 0;
}

static int pc_rmdir(const char *path)
{
    ALIVE();
    if (is_hidden(path))
        return -EPERM;
    struct stat sb;
    if (fstatat(g.root, rel(path), &sb, AT_SYMLINK_NOFOLLOW) != 0)
        return -errno;
    ino_t dir = parent_ino(path);
    if (unlinkat(g.root, rel(path), AT_REMOVEDIR) != 0)
        return -errno;
    op_add((nsop_t){.kind = NS_RMDIR, .dir = dir, .path = strdup(rel(path)), .ino = sb.st_ino,
                    .mode = sb.st_mode});
    return 0;
}

static int pc_rename(const char *from, const char *to, unsigned int flags)
{
    ALIVE();
    if (is_hidden(from) || is_hidden(to) || is_ctl(from) || is_ctl(to))
        return -EPERM;
    if (flags & RENAME_EXCHANGE)
        return -EINVAL; /* not modelled */
    ino_t dir = parent_ino(from);
    if (dir == 0 || dir != parent_ino(to))
        return -EXDEV; /* across directories: not modelled */
    struct stat sb, tb;
    if (fstatat(g.root, rel(from), &sb, AT_SYMLINK_NOFOLLOW) != 0)
        return -errno;
    char *t = NULL;
    if (fstatat(g.root, rel(to), &tb, AT_SYMLINK_NOFOLLOW) == 0) {
        if (flags & RENAME_NOREPLACE)
            return -EEXIST;
        if (S_ISDIR(tb.st_mode))
            return -EXDEV; /* over a directory: not modelled */
        t = trash_name();
        if (renameat(g.root, rel(to), g.root, t) != 0) {
            int e = errno;
            free(t);
            return -e;
        }
    }
    if (renameat(g.root, rel(from), g.root, rel(to)) != 0) {
        int e = errno;
        if (t && renameat(g.root, t, g.root, rel(to)) != 0)
            warnx_("rename: cannot put %s back", rel(to));
        free(t);
        return -e;
    }
    op_add((nsop_t){.kind = NS_RENAME, .dir = dir, .path = strdup(rel(to)),
                    .from = strdup(rel(from)), .trash = t, .ino = sb.st_ino});
    return 0;
}

static int pc_refuse_link(const char *a, const char *b)
{
    (void)a;
    (void)b;
    return -EPERM; /* hard links and symlinks are not modelled */
}

static int pc_chmod(const char *path, mode_t mode, struct fuse_file_info *fi)
{
    ALIVE();
    int r = fi ? fchmod((int)fi->fh, mode) : fchmodat(g.root, rel(path), mode, 0);
    return r == 0 ? 0 : -errno;
}

static int pc_chown(const char *path, uid_t uid, gid_t gid, struct fuse_file_info *fi)
{
    ALIVE();
    int r = fi ? fchown((int)fi->fh, uid, gid)
               : fchownat(g.root, rel(path), uid, gid, AT_SYMLINK_NOFOLLOW);
    return r == 0 ? 0 : -errno;
}

static int pc_utimens(const char *path, const struct timespec tv[2], struct fuse_file_info *fi)
{
    if (is_ctl(path))
        return 0;
    ALIVE();
    int r = fi ? futimens((int)fi->fh, tv) : utimensat(g.root, rel(path), tv, AT_SYMLINK_NOFOLLOW);
    return r == 0 ? 0 : -errno;
}

static int pc_statfs(const char *path, struct statvfs *sv)
{
    (void)path;
    return fstatvfs(g.root, sv) == 0 ? 0 : -errno;
}

static off_t pc_lseek(const char *path, off_t off, int whence, struct fuse_file_info *fi)
{
    (void)path;
    ALIVE();
    off_t r = lseek((int)fi->fh, off, whence);
    return r < 0 ? -errno : r;
}

static ssize_t pc_copy_file_range(const char *a, struct fuse_file_info *fa, off_t oa, const char *b,
                                  struct fuse_file_info *fb, off_t ob, size_t len, int flags)
{
    (void)a, (void)fa, (void)oa, (void)b, (void)fb, (void)ob, (void)len, (void)flags;
    return -EOPNOTSUPP; /* the kernel falls back to read + write, which are modelled */
}

static void pc_destroy(void *priv)
{
    (void)priv;
    if (!g.dead) /* a clean unmount keeps everything: a removed file's wait is over */
        rm_rf(TRASH);
}

static const struct fuse_operations ops = {
    .init = pc_init,
    .destroy = pc_destroy,
    .getattr = pc_getattr,
    .access = pc_access,
    .readlink = pc_readlink,
    .opendir = pc_opendir,
    .readdir = pc_readdir,
    .releasedir = pc_releasedir,
    .fsyncdir = pc_fsyncdir,
    .mkdir = pc_mkdir,
    .create = pc_create,
    .open = pc_open,
    .read = pc_read,
    .write = pc_write,
    .truncate = pc_truncate,
    .fallocate = pc_fallocate,
    .fsync = pc_fsync,
    .release = pc_release,
    .unlink = pc_unlink,
    .rmdir = pc_rmdir,
    .rename = pc_rename,
    .link = pc_refuse_link,
    .symlink = pc_refuse_link,
    .chmod = pc_chmod,
    .chown = pc_chown,
    .utimens = pc_utimens,
    .statfs = pc_statfs,
    .lseek = pc_lseek,
    .copy_file_range = pc_copy_file_range,
};

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s BACKING MOUNTPOINT [-f] [-o OPT]...\n", argv[0]);
        return 2;
    }
    g.root = open(argv[1], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (g.root < 0) {
        fprintf(stderr, "powercutfs: %s: %s\n", argv[1], strerror(errno));
        return 1;
    }
    rm_rf(TRASH); /* left by a cut or a crash of ours: never part of the data */
    if (mkdirat(g.root, TRASH, 0700) != 0 && errno != EEXIST) {
        fprintf(stderr, "powercutfs: %s/" TRASH ": %s\n", argv[1], strerror(errno));
        return 1;
    }
    /* fuse_main gets: prog MOUNTPOINT [rest] -s (one thread: the model has no locks) */
    char **fa = calloc((size_t)argc + 2, sizeof *fa);
    if (!fa)
        return 1;
    int n = 0;
    fa[n++] = argv[0];
    for (int i = 2; i < argc; i++)
        fa[n++] = argv[i];
    fa[n++] = "-s";
    int rc = fuse_main(n, fa, &ops, NULL);
    free(fa);
    return rc;
}
