/* watermark: memory and disk watermarks (issue 6, limits). While the broker's resident
 * memory is above memory_high_watermark, or the file system holding data_dir has less
 * than disk_free_limit bytes free, producers get no new link credit; consumers keep
 * flowing, so memory drains and retention can free disk. Credit resumes once both clear.
 *
 * The state hangs off the server (`s->watermark`, owned by it between init and free).
 * The limits are read from s->conf at every check, so a SIGHUP reload applies them. */
#ifndef MQD_WATERMARK_H
#define MQD_WATERMARK_H

#include "mqd.h"

struct mqd_server;

/* Allocates s->watermark and takes a first measurement. 0 or MQD_ENOMEM. */
int mqd_watermark_init(struct mqd_server *s);
/* Frees s->watermark (NULL is fine) and sets it to NULL. */
void mqd_watermark_free(struct mqd_server *s);

/* True while a watermark is exceeded. Cheap: measures (/proc/self/statm, statvfs) at
 * most once per MQD_WATERMARK_INTERVAL_MS and returns the cached answer in between.
 * Logs once when it starts blocking and once when it clears. Event-loop thread only. */
bool mqd_watermark_blocked(struct mqd_server *s);
#define MQD_WATERMARK_INTERVAL_MS 100

/* The last measurement, for metrics and management: resident bytes and free bytes on
 * data_dir (UINT64_MAX when unknown). Either pointer may be NULL. */
void mqd_watermark_usage(struct mqd_server *s, uint64_t *rss, uint64_t *disk_free);

/* The disk budget (rules in watermark.c; docs/security.md, Limits). Event-loop thread.
 *
 * mqd_watermark_disk_take: may `bytes` more be stored (a producer's message, with
 * MQD_WATERMARK_REC_OVERHEAD)? true counts them against the free space measured; false
 * (the free space would fall below disk_free_limit) means refuse the message.
 * mqd_watermark_window: how many of `want` credit units a producer link holding `have`
 * may be granted now, if each may carry `msg_bytes` (0: unknown, the link has sent
 * nothing yet): 0 while a watermark is exceeded, fewer than `want` near
 * disk_free_limit (its share of the budget). *reserved is the link's part of the
 * budget (0 at first), replaced by (have + the answer) x msg_bytes. */
bool mqd_watermark_disk_take(struct mqd_server *s, uint64_t bytes);
/* A producer link starts (+1) or stops (-1, with its last *reserved) sharing the
 * credit budget. */
void mqd_watermark_producers(struct mqd_server *s, int delta, uint64_t reserved);
uint32_t mqd_watermark_window(struct mqd_server *s, uint32_t want, int have, uint64_t msg_bytes,
                              uint64_t *reserved);
/* Disk bytes a stored message costs besides its own: the record header (40) and its
 * share of the offset and time indexes, rounded up. */
#define MQD_WATERMARK_REC_OVERHEAD 64
/* A link with no credit near the limit gets one while this fits in its share of the
 * headroom, before it has sent a message (then: its largest message). */
#define MQD_WATERMARK_FIRST_BYTES (64u << 10)

#endif
