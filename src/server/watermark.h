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

#endif
