/* mqd: return codes, shared typedefs and tiny helpers used by every subsystem. */
#ifndef MQD_H
#define MQD_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

/* Every function that can fail returns 0 or one of these (negative). */
enum {
    MQD_OK = 0,
    MQD_ENOMEM = -1,    /* allocation failed */
    MQD_EIO = -2,       /* I/O error (the partition may now be failed) */
    MQD_EINVAL = -3,    /* bad argument or bad input */
    MQD_ENOENT = -4,    /* no such thing */
    MQD_ECORRUPT = -5,  /* on-disk data failed validation */
    MQD_EEXIST = -6,    /* already exists */
    MQD_EAGAIN = -7,    /* try later (limit reached, nothing available yet) */
    MQD_ERANGE = -8,    /* offset/number outside the valid range */
    MQD_EFAILED = -9,   /* the object is in a failed state and refuses work */
    MQD_ETOOBIG = -10,  /* over a configured size limit */
    MQD_ESTATE = -11,   /* wrong state for the operation */
    MQD_EDB = -12,      /* SQLite error */
    MQD_ENOSPC = -13,   /* no space left on the data directory's file system (disk full) */
};

/* A static string naming a return code ("MQD_EIO: I/O error"). */
const char *mqd_strerror(int rc);
/* util/misc.c: of the n words in `cands`, the one closest to `word` by edit distance
 * (ASCII case-insensitive), or NULL when none is close (at most a third of it wrong, and
 * at most 2 when it is short): the "did you mean" of the config and of mqctl. */
const char *mqd_closest(const char *word, const char *const *cands, size_t n);

#define MQD_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define MQD_UNUSED(x) ((void)(x))

#endif
