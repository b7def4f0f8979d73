/* route: the address grammar of ARCHITECTURE §1 and the key -> partition hash. */
#ifndef MQD_ROUTE_H
#define MQD_ROUTE_H

#include "mqd.h"

#define MQD_NAME_MAX 255

typedef enum {
    MQD_ADDR_TOPIC = 0,           /* T                              */
    MQD_ADDR_PARTITION,           /* T/Partitions/N                 */
    MQD_ADDR_GROUP,               /* T/ConsumerGroups/G             */
    MQD_ADDR_GROUP_PARTITION,     /* T/ConsumerGroups/G/Partitions/N */
    MQD_ADDR_MANAGEMENT,          /* $management                    */
    MQD_ADDR_CBS,                 /* $cbs (claims-based security)   */
} mqd_addr_kind_t;

typedef struct mqd_addr {
    mqd_addr_kind_t kind;
    char topic[MQD_NAME_MAX + 1]; /* case-sensitive; "T/$DeadLetterQueue" is a topic of its own */
    char group[MQD_NAME_MAX + 1]; /* lower-cased (groups compare case-insensitively) */
    uint32_t partition;
} mqd_addr_t;

/* Parses an address (not NUL-terminated: len bytes). The fixed words are
 * case-insensitive. MQD_EINVAL for anything else (empty, bad characters, bad N, too long).
 * N is plain decimal digits (leading zeros tolerated) below 2^31. "$management" and "$cbs" (any
 * case) take no suffix, and no topic may have either name. "T/$DeadLetterQueue" (case-sensitive) is the topic name for the
 * dead-letter topic of T, and takes the same suffixes as any topic. *out is written only
 * on success. */
int mqd_addr_parse(const char *s, size_t len, mqd_addr_t *out);
/* A topic name: 1..255 of [A-Za-z0-9._~:@$-], not "." / ".."; "T/$DeadLetterQueue" allowed. */
bool mqd_topic_name_valid(const char *s, size_t len);

/* Kafka's murmur2 (seed 0x9747b28c), as its default partitioner uses. */
uint32_t mqd_murmur2(const void *data, size_t len);
/* (murmur2(key) & 0x7fffffff) % nparts: the partition Kafka picks for the same key.
 * nparts == 0 returns 0. */
uint32_t mqd_route_key_partition(const void *key, size_t len, uint32_t nparts);

/* The temporary node that holds mqd's replies to the `$management` or `$cbs` requests of
 * connection `conn` (its mqd_conn_serial) whose reply-to is addr[0..len) (the target, or
 * the link name, of the receiver that reads them): "$tmp.r.<conn>.<hash>". The connection
 * is in the name, so two connections that use the same reply address never share a node,
 * and a reply address that names a topic names no topic (docs/security.md, "Reply
 * nodes"). */
#define MQD_REPLY_NODE_PREFIX "$tmp.r."
void mqd_reply_node_name(uint64_t conn, const char *addr, size_t len, char *out, size_t outlen);
/* Is `name` such a node (only mqd writes into one)? */
bool mqd_reply_node_is(const char *name);

#endif
