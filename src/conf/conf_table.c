/* The configuration table: one row per key, with type, bounds, default, field and help.
 * The parser, the sample etc/mqd.conf and the key list in mqd.conf(5) all come from
 * these rows, so adding a key here is the whole job (then regenerate the sample). */
#include "config.h"
#include "conf/conf_int.h"

#include <ctype.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define KiB (UINT64_C(1) << 10)
#define MiB (UINT64_C(1) << 20)
#define GiB (UINT64_C(1) << 30)
#define TiB (UINT64_C(1) << 40)
#define SEC UINT64_C(1000)
#define MIN (60 * SEC)
#define HOUR (60 * MIN)
#define DAY (24 * HOUR)

#define G_FIELD(f) offsetof(mqd_conf_t, f), sizeof(((mqd_conf_t *)0)->f)
#define T_FIELD(f) offsetof(mqd_topic_conf_t, f), sizeof(((mqd_topic_conf_t *)0)->f)
#define U_FIELD(f) offsetof(mqd_user_conf_t, f), sizeof(((mqd_user_conf_t *)0)->f)
#define K_FIELD(f) offsetof(mqd_sas_key_conf_t, f), sizeof(((mqd_sas_key_conf_t *)0)->f)

static const char *const level_names[] = {"error", "warn", "notice", "info", "debug", NULL};
static const char *const flush_names[] = {"sync", "async", NULL};
static const char *const flush_sync_names[] = {"fdatasync", "syncfs", NULL};
static const char *const retention_names[] = {"default", "consumed", NULL};
static const char *const reset_names[] = {"earliest", "latest", NULL};
static const char *const tls_version_names[] = {"1.2", "1.3", NULL};
static const char *const tls_verify_names[] = {"none", "optional", "required", NULL};
static const char *const cluster_names[] = {"none", "etcd", NULL};
static const char *const link_stealing_names[] = {"off", "connection", "container", NULL};
static const char *const acks_names[] = {"leader", "quorum", "all", NULL}; /* mqd_acks_t */
static const char *const sas_required_names[] = {"auto", "off", "on", NULL}; /* mqd_sas_required_t */
/* mqd_conn_redirect_t */
static const char *const conn_redirect_names[] = {"off", "idle", "always", NULL};

/* The log defaults repeat mqd_plog_config_default (store.h): conf does not link the
 * store library, and the sample and man page need them as text anyway. */
const mqd_conf_row_t mqd_conf_rows[] = {
    /* ---- server (global part only) ---- */
    {"listen", MQD_CT_LIST, MQD_CS_GLOBAL, 0, 0, "127.0.0.1:5672", NULL, "127.0.0.1:5672",
     G_FIELD(listen), NULL, mqd_conf_check_hostport,
     "Address for AMQP connections, HOST:PORT or [IPV6]:PORT (0.0.0.0 or [::] for every "
     "interface); amqps://HOST:PORT makes a TLS listener (tls_cert, tls_key), which takes "
     "both a TLS ClientHello and the AMQP TLS header (AMQP 2.1.0.0, answered with the same "
     "header; TLS follows). Repeat the key for more "
     "listeners; the first listen in a file replaces the built-in default, and --listen on "
     "the command line replaces the file's.",
     false},
    {"data_dir", MQD_CT_STRING, MQD_CS_GLOBAL, 0, 0, MQD_LOCALSTATEDIR "/lib/mqd",
     "LOCALSTATEDIR/lib/mqd", "/var/lib/mqd", G_FIELD(data_dir), NULL, mqd_conf_check_nonempty,
     "Directory holding meta.db and the partition logs (topics/T/N/). Needs a file system "
     "where fsync works.",
     false},
    {"log_level", MQD_CT_ENUM, MQD_CS_GLOBAL, 0, 0, "info", NULL, NULL, G_FIELD(log_level),
     level_names, NULL, "Least important kind of message written to the log. Reloadable (SIGHUP).",
     true},
    {"auto_create_topics", MQD_CT_BOOL, MQD_CS_GLOBAL, 0, 0, "on", NULL, NULL,
     G_FIELD(auto_create_topics), NULL, NULL,
     "Create a topic with default_partitions partitions when a link first names it.", false},
    {"max_topics", MQD_CT_UINT, MQD_CS_GLOBAL, 0, 100000000, "10000", NULL, NULL,
     G_FIELD(max_topics), NULL, NULL,
     "Topics the broker holds at once. At the limit a link or message that would create "
     "one (auto_create_topics, management CREATE: status 503) is refused with "
     "amqp:resource-limit-exceeded; existing topics work on, topics already on disk always "
     "load at start, and temporary reply nodes (dynamic receivers, management replies) "
     "count but are still created. 0: unlimited.",
     true},
    {"max_topics_per_connection", MQD_CT_UINT, MQD_CS_GLOBAL, 0, 100000000, "1000", NULL,
     NULL, G_FIELD(max_topics_per_connection), NULL, NULL,
     "Topics one connection may auto-create (attaching links or sending through the "
     "anonymous relay to new addresses) over its lifetime; past it those links and messages "
     "are refused with amqp:resource-limit-exceeded while existing topics stay usable. "
     "Temporary reply nodes do not count (they go with their link). 0: unlimited.",
     true},
    {"default_partitions", MQD_CT_UINT, MQD_CS_GLOBAL, 1, 65536, "1", NULL, NULL,
     G_FIELD(default_partitions), NULL, NULL,
     "Partitions of a topic created automatically or without an explicit count.", false},
    {"max_partitions_per_topic", MQD_CT_UINT, MQD_CS_GLOBAL, 1, 65536, "1024", NULL, NULL,
     G_FIELD(max_partitions_per_topic), NULL, NULL,
     "Most partitions one topic may have: each costs files, descriptors and start-up "
     "time. A management create or alter asking for more is refused at once (status 400 "
     "naming this key), as is an automatic create when default_partitions or the topic's "
     "partitions is above it. A management create of more than 16 opens them 20 ms at a "
     "time between other events and replies once all are open (an alter opens them at "
     "once: a few ms each on a busy disk). Topics that already have more keep them. "
     "Reloadable (SIGHUP).",
     true},
    {"max_message_size", MQD_CT_SIZE, MQD_CS_GLOBAL, 1 * KiB, 1 * GiB, "16MiB", NULL, NULL,
     G_FIELD(max_message_size), NULL, NULL,
     "Largest message accepted; stated as max-message-size on every attach.", false},
    {"max_frame_size", MQD_CT_SIZE, MQD_CS_GLOBAL, 512, 64 * MiB, "128KiB", NULL, NULL,
     G_FIELD(max_frame_size), NULL, NULL, "Largest AMQP frame offered in open (max-frame-size).",
     false},
    {"idle_timeout_ms", MQD_CT_DURATION, MQD_CS_GLOBAL, 0, DAY, "60s", NULL, NULL,
     G_FIELD(idle_timeout_ms), NULL, NULL,
     "Close a connection that sends nothing for this long (AMQP idle-time-out; the broker "
     "advertises half). 0 turns it off.",
     false},
    {"allow_anonymous", MQD_CT_BOOL, MQD_CS_GLOBAL, 0, 0, "on", NULL, "off",
     G_FIELD(allow_anonymous), NULL, NULL,
     "Accept clients that do not authenticate (SASL ANONYMOUS or no SASL layer). The built-in "
     "default is on for a loopback development broker; an installed broker turns it off and "
     "lists users in [user NAME] sections: `mqd-passwd alice >> /etc/mqd.conf` adds one.",
     false},
    {"allow_no_users", MQD_CT_BOOL, MQD_CS_GLOBAL, 0, 0, "off", NULL, NULL,
     G_FIELD(allow_no_users), NULL, NULL,
     "on: this file has no [user NAME] section on purpose. A file cut short (emptied, or "
     "cut before its users or its [acl]) still parses, as a config that lets every client "
     "in or none; so a config that drops every user while the previous one had some is "
     "refused, naming the file's last line: a reload keeps the running config, a start "
     "fails (the previous config is then the one of the last start or reload on "
     "data_dir). A config that drops every [acl] rule is refused the same way: to allow "
     "everything on purpose, write an [acl] section with the rule `allow * all *` (to deny "
     "everything, `deny * all *`). A broker that never had users or rules on its data_dir "
     "(a development or anonymous-only one) needs neither. Reloadable (SIGHUP).",
     true},
    {"max_connections", MQD_CT_UINT, MQD_CS_GLOBAL, 1, 1000000, "10000", NULL, NULL,
     G_FIELD(max_connections), NULL, NULL, "Connections accepted at once; more are refused.",
     false},
    {"link_stealing", MQD_CT_ENUM, MQD_CS_GLOBAL, 0, 0, "off", NULL, NULL,
     G_FIELD(link_stealing), link_stealing_names, NULL,
     "Whether a second link with the same name and role from the same container-id takes "
     "the first one over (amqp:link:stolen, AMQP 1.0 2.6.1). off: both stay attached. "
     "connection: on the same connection (another session). container: on any connection "
     "of that container-id too, as for a client with a fixed container-id that reconnects "
     "while its old connection still looks alive; not with Proton's Container, which names "
     "its links <container-id>-<address> on all its connections (two connections of one "
     "process sending to one address would steal each other's link). Each attach then "
     "scans the links of those connections: a client with tens of thousands of links "
     "makes attaching quadratic.",
     false},
    {"max_sessions", MQD_CT_UINT, MQD_CS_GLOBAL, 1, 65536, "64", NULL, NULL, G_FIELD(max_sessions),
     NULL, NULL, "Sessions per connection (AMQP channel-max + 1).", false},
    {"max_links_per_session", MQD_CT_UINT, MQD_CS_GLOBAL, 1, 1048576, "1024", NULL, NULL,
     G_FIELD(max_links_per_session), NULL, NULL, "Links per session (AMQP handle-max + 1).", false},
    {"link_credit", MQD_CT_UINT, MQD_CS_GLOBAL, 1, 1000000, "1000", NULL, NULL,
     G_FIELD(link_credit), NULL, NULL,
     "Credit granted to each sending client link; refilled as messages become durable. A "
     "transfer sent beyond the credit granted (AMQP 1.0 2.6.7) is not stored: the link is "
     "detached with amqp:link:transfer-limit-exceeded.",
     false},
    {"prefetch_bytes", MQD_CT_SIZE, MQD_CS_GLOBAL, 4 * KiB, 1 * GiB, "1MiB", NULL, NULL,
     G_FIELD(prefetch_bytes), NULL, NULL, "Most bytes read from a log for one consumer at a time.",
     false},
    {"flush_threads", MQD_CT_UINT, MQD_CS_GLOBAL, 1, 64, "4", NULL, NULL,
     G_FIELD(flush_threads), NULL, NULL,
     "Threads that write and fsync partition logs. Each partition belongs to one of them "
     "(round robin), so fdatasyncs of different partitions overlap on the disk; one "
     "partition's group commits stay in order on its thread.",
     false},
    {"flush_priority_boost", MQD_CT_UINT, MQD_CS_GLOBAL, 0, 19, "10", NULL, NULL,
     G_FIELD(flush_priority_boost), NULL, NULL,
     "Nice levels the flush threads run above the rest of mqd (0: none). A group commit's "
     "fdatasync ends with the flush thread waiting for a CPU; with the event loop and "
     "clients keeping the cores busy that wait lengthens every commit (at 100k msgs/s on "
     "2 cores the p99 fell by 1-4 ms, docs/performance.md). Raising a priority needs "
     "CAP_SYS_NICE or an RLIMIT_NICE that allows it (the systemd unit sets LimitNICE); "
     "without, mqd logs it once and runs the flush threads at its own priority.",
     false},
    {"flush_sync", MQD_CT_ENUM, MQD_CS_GLOBAL, 0, 0, "fdatasync", NULL, NULL, G_FIELD(flush_sync),
     flush_sync_names, NULL,
     "How a group commit is made durable. fdatasync: each partition's log file on its own. "
     "syncfs: one syncfs(2) of data_dir's file system covers every partition written "
     "before it (flushers share it), so many partitions written at once cost about one "
     "device flush instead of one each; use it when data_dir is a file system of its own, "
     "as it also syncs anything else dirty there. A failed syncfs falls back to the "
     "partition's fdatasync.",
     false},
    {"max_open_files", MQD_CT_UINT, MQD_CS_GLOBAL, 0, 100000000, "0", "auto", NULL,
     G_FIELD(max_open_files), NULL, NULL,
     "Partition segment files kept open at once. Past it the segments of the partitions "
     "used least recently are closed and reopened on their next append or read (a "
     "partition being written keeps its active segment open, so only more busy partitions "
     "than this go over it). 0: (RLIMIT_NOFILE - 64) / 2, at most 4096, at least 16, "
     "leaving the rest for connections and the broker's own files.",
     false},
    {"segment_prezero", MQD_CT_SIZE, MQD_CS_GLOBAL, 0, 1 * GiB, "0", "off", NULL,
     G_FIELD(segment_prezero), NULL, NULL,
     "Zeros written and synced ahead of the end of each flush=sync partition being written, "
     "by a thread of their own (cut at a roll and a clean close, and after a crash at "
     "start-up). A group commit then overwrites blocks instead of growing the file, so its "
     "fdatasync need not also write the file's new size and block map (a journal commit, "
     "or the inode). Measured here (docs/performance.md): a lower median latency at "
     "moderate rates, and a p99 no better, as the zeroing competes with the group "
     "commits; try 8MiB where that metadata write dominates the disk's sync time. Costs a "
     "second write of every byte and this much disk space for each of up to 256 "
     "partitions. 0 (off) turns it off.",
     false},
    {"heap_prefault", MQD_CT_SIZE, MQD_CS_GLOBAL, 0, 1 * GiB, "32MiB", NULL, NULL,
     G_FIELD(heap_prefault), NULL, NULL,
     "Heap that mqd touches at start and keeps, so that the first messages of a connection "
     "(and buffers that grow under load) do not pay a page fault for each new 4 KiB page; "
     "buffers up to 4 MiB then come from that heap and are reused instead of being mapped "
     "and unmapped. Costs this much resident memory from the start. 0 turns it off and "
     "leaves the C library's defaults.",
     false},
    {"metrics_listen", MQD_CT_STRING, MQD_CS_GLOBAL, 0, 0, "", "off", NULL, G_FIELD(metrics_listen),
     NULL, mqd_conf_check_hostport_or_empty,
     "HOST:PORT for the Prometheus text endpoint (/metrics). Empty turns it off.", false},
    {"console_listen", MQD_CT_STRING, MQD_CS_GLOBAL, 0, 0, "", "off", NULL, G_FIELD(console_listen),
     NULL, mqd_conf_check_hostport_or_empty,
     "HOST:PORT for the web console (/ui/) and its JSON API (/api/), plain HTTP. Login with "
     "the [user] credentials: SCRAM-SHA-256 from the page, or a password, which needs "
     "allow_plain_without_tls = on; the [acl] right monitor lets a user look, manage lets a "
     "user change. Empty turns it off: nothing listens (docs/console.md).", false},
    {"console_session_idle_ms", MQD_CT_DURATION, MQD_CS_GLOBAL, 10 * SEC, DAY, "30m", NULL, NULL,
     G_FIELD(console_session_idle_ms), NULL, NULL,
     "A web console session unused for this long is logged out.", true},
    {"console_max_connections", MQD_CT_UINT, MQD_CS_GLOBAL, 1, 100000, "128", NULL, NULL,
     G_FIELD(console_max_connections), NULL, NULL,
     "HTTP connections the web console holds at once; more are closed on accept. Like AMQP "
     "connections, they never take the descriptors kept for partition files (max_open_files), "
     "and they never hold more than a quarter of the descriptors connections may use, "
     "whatever this says: AMQP clients keep the rest.",
     true},
    {"console_max_connections_per_ip", MQD_CT_UINT, MQD_CS_GLOBAL, 0, 100000, "16", NULL, NULL,
     G_FIELD(console_max_connections_per_ip), NULL, NULL,
     "The same per source address, so that one address cannot take them all (a browser "
     "opens up to 6; raise it behind a reverse proxy, whose connections all come from one "
     "address). 0: unlimited.",
     true},
    {"console_header_timeout_ms", MQD_CT_DURATION, MQD_CS_GLOBAL, 100, HOUR, "10s", NULL, NULL,
     G_FIELD(console_header_timeout_ms), NULL, NULL,
     "A console connection must send a request's line and headers within this time of "
     "being accepted (or of the first byte of its next request on a kept-alive connection), "
     "however steadily bytes arrive; otherwise it is closed.",
     true},
    {"console_body_timeout_ms", MQD_CT_DURATION, MQD_CS_GLOBAL, 100, HOUR, "10s", NULL, NULL,
     G_FIELD(console_body_timeout_ms), NULL, NULL,
     "The same for the request's body, from the end of its headers.", true},

    /* ---- security: TLS, SASL policy, limits (reloadable: auth re-reads them on SIGHUP) ---- */
    {"tls_cert", MQD_CT_STRING, MQD_CS_GLOBAL, 0, 0, "", "none", NULL, G_FIELD(tls_cert), NULL,
     NULL,
     "PEM file with the server certificate (and its chain) for amqps:// listeners. Reloaded "
     "on SIGHUP: new connections use the new certificate, open ones keep theirs. In a "
     "cluster with replication_peer_verify it is also the certificate followers check "
     "this node by: its subject CN must be mqd-node-NODE_ID (checked at start and reload).",
     true},
    {"tls_key", MQD_CT_STRING, MQD_CS_GLOBAL, 0, 0, "", "none", NULL, G_FIELD(tls_key), NULL, NULL,
     "PEM file with the private key of tls_cert (unencrypted; keep it readable by mqd only).",
     true},
    {"tls_ca", MQD_CT_STRING, MQD_CS_GLOBAL, 0, 0, "", "none", NULL, G_FIELD(tls_ca), NULL, NULL,
     "PEM file of the CA certificates that client certificates must chain to. It replaces "
     "the system trust store; needed when tls_verify_client is optional or required.",
     true},
    {"tls_min_version", MQD_CT_ENUM, MQD_CS_GLOBAL, 0, 0, "1.2", NULL, NULL,
     G_FIELD(tls_min_version), tls_version_names, NULL,
     "Oldest TLS version accepted (1.2 accepts TLS 1.2 and 1.3).", true},
    {"tls_ciphers", MQD_CT_STRING, MQD_CS_GLOBAL, 0, 0, "", "OpenSSL's default", NULL,
     G_FIELD(tls_ciphers), NULL, NULL,
     "OpenSSL cipher list for TLS 1.2 (for example ECDHE+AESGCM). Empty keeps OpenSSL's "
     "default.",
     true},
    {"tls_verify_client", MQD_CT_ENUM, MQD_CS_GLOBAL, 0, 0, "none", NULL, NULL,
     G_FIELD(tls_verify_client), tls_verify_names, NULL,
     "none: TLS clients are not asked for a certificate. required: every TLS client presents "
     "a certificate that chains to tls_ca (then SASL EXTERNAL logs in as the user whose "
     "cert_cn, or name, is the certificate's subject CN). optional: clients are asked for "
     "one; a client without a certificate connects (and logs in with another mechanism), a "
     "certificate that does not chain to tls_ca or has expired fails the handshake.",
     true},
    {"allow_plain_without_tls", MQD_CT_BOOL, MQD_CS_GLOBAL, 0, 0, "on", NULL, "off",
     G_FIELD(allow_plain_without_tls), NULL, NULL,
     "Offer SASL PLAIN (a password in clear) on connections without TLS. The built-in "
     "default is on for a loopback development broker; the installed config turns it off, "
     "leaving SCRAM-SHA-256 on plain listeners and PLAIN on amqps:// ones.",
     true},
    {"max_connections_per_user", MQD_CT_UINT, MQD_CS_GLOBAL, 0, 1000000, "0", NULL, NULL,
     G_FIELD(max_connections_per_user), NULL, NULL,
     "Connections one authenticated user may hold at once; more fail SASL. 0: unlimited.",
     true},
    {"max_connections_per_ip", MQD_CT_UINT, MQD_CS_GLOBAL, 0, 1000000, "0", NULL, NULL,
     G_FIELD(max_connections_per_ip), NULL, NULL,
     "Connections from one source address at once; more are closed on accept. 0: unlimited.",
     true},
    {"max_handshakes_per_ip", MQD_CT_UINT, MQD_CS_GLOBAL, 0, 1000000, "64", NULL, NULL,
     G_FIELD(max_handshakes_per_ip), NULL, NULL,
     "Connections from one source address that have not finished their handshake (TLS, "
     "SASL and the AMQP open) at once; more are closed on accept, so that one address "
     "cannot hold every descriptor with logins it never finishes. 0: unlimited.",
     true},
    {"handshake_fd_percent", MQD_CT_UINT, MQD_CS_GLOBAL, 1, 100, "50", NULL, NULL,
     G_FIELD(handshake_fd_percent), NULL, NULL,
     "Connections that have not finished their handshake may hold at most this percentage "
     "of the descriptors connections may use (RLIMIT_NOFILE less what is kept for "
     "partition files, a spare of 32 and mqd's own); the rest stays for connections that "
     "logged in. At the limit a new connection closes the oldest unfinished handshake of "
     "the address that has the most, so a client from another address still gets in while "
     "many addresses stall theirs. 100: no reserve. Ignored without a descriptor limit.",
     true},
    {"handshake_timeout_ms", MQD_CT_DURATION, MQD_CS_GLOBAL, 100, HOUR, "10s", NULL, NULL,
     G_FIELD(handshake_timeout_ms), NULL, NULL,
     "Close a connection on a plain listener that has not completed SASL and AMQP open "
     "within this time.",
     true},
    {"shutdown_grace_ms", MQD_CT_DURATION, MQD_CS_GLOBAL, 0, 10 * MIN, "2s", NULL, NULL,
     G_FIELD(shutdown_grace_ms), NULL, NULL,
     "On SIGTERM or SIGINT every client connection is closed with amqp:connection:forced "
     "(\"mqd is shutting down\"); mqd stops when every client has answered the close, or "
     "after this long. Sends already appended are made durable either way; those not yet "
     "settled stay unsettled (the client resends them). A second signal stops at once; 0 "
     "stops without waiting (the close may not reach the clients).",
     true},
    {"tls_handshake_timeout_ms", MQD_CT_DURATION, MQD_CS_GLOBAL, 100, HOUR, "5s", NULL, NULL,
     G_FIELD(tls_handshake_timeout_ms), NULL, NULL,
     "The same for amqps:// listeners (TLS, SASL and open).", true},
    {"auth_threads", MQD_CT_UINT, MQD_CS_GLOBAL, 1, 16, "1", NULL, NULL,
     G_FIELD(auth_threads), NULL, NULL,
     "Threads that check SASL PLAIN passwords (PBKDF2), off the event loop, so that a "
     "login costs other connections nothing. More logins than threads wait in a queue "
     "(auth_queue_max).",
     false},
    {"auth_queue_max", MQD_CT_UINT, MQD_CS_GLOBAL, 1, 100000, "32", NULL, NULL,
     G_FIELD(auth_queue_max), NULL, NULL,
     "PLAIN logins waiting for or in a password check, all peers together. A login "
     "beyond it fails at once with the SASL outcome sys-temp (the client may retry).",
     true},
    {"auth_queue_per_ip", MQD_CT_UINT, MQD_CS_GLOBAL, 1, 100000, "8", NULL, NULL,
     G_FIELD(auth_queue_per_ip), NULL, NULL,
     "The same, per source address: one address cannot fill the whole queue.",
     true},
        {"txn_timeout_ms", MQD_CT_DURATION, MQD_CS_GLOBAL, 0, DAY, "60s", NULL, NULL,
     G_FIELD(txn_timeout_ms), NULL, NULL,
     "An AMQP transaction still open this long after its declare is rolled back: its sends "
     "are discarded (read-committed readers of its partitions, held at its first record, "
     "move on), its acks released; a later transactional send or discharge naming it is "
     "rejected with amqp:transaction:timeout. 0 turns it off: an idle transaction then "
     "holds those readers back until its connection closes (Kafka's transaction.timeout.ms "
     "is 60 s too).",
     true},
    {"max_unsettled_per_link", MQD_CT_UINT, MQD_CS_GLOBAL, 0, 1048576, "10000", NULL, NULL,
     G_FIELD(max_unsettled_per_link), NULL, NULL,
     "Deliveries a receiving link may hold unsettled; mqd sends no more until some are "
     "settled, whatever credit the link grants. 0: unlimited.",
     true},
    {"memory_high_watermark", MQD_CT_SIZE, MQD_CS_GLOBAL, 0, 1 * TiB, "0", "off", NULL,
     G_FIELD(memory_high_watermark), NULL, NULL,
     "While the broker's resident memory is above this, sending links get no new credit "
     "(consumers keep flowing); credit comes back once it is below. 0 turns it off.",
     true},
    {"max_connection_memory", MQD_CT_SIZE, MQD_CS_GLOBAL, 0, 1 * TiB, "64MiB", NULL, NULL,
     G_FIELD(max_connection_memory), NULL, NULL,
     "Memory one connection may hold: its sessions and links (a fixed charge each), the "
     "buffers of deliveries still arriving in several transfers, and output its peer has "
     "not read. Past it the connection is closed with amqp:resource-limit-exceeded (its "
     "close frame gets 10 s to leave). Keep it above max_message_size times the senders "
     "that may be mid-way through a large message on one connection. 0 turns it off.",
     true},
    {"max_memory", MQD_CT_SIZE, MQD_CS_GLOBAL, 0, 1 * TiB, "1GiB", NULL, NULL,
     G_FIELD(max_memory), NULL, NULL,
     "The same charges summed over all connections. While the sum is above it, new "
     "connections are refused at accept, new links are refused with "
     "amqp:resource-limit-exceeded, and a connection whose partial deliveries or unread "
     "output grow is closed with it. 0 turns it off.",
     true},
    {"disk_free_limit", MQD_CT_SIZE, MQD_CS_GLOBAL, 0, 1 * TiB, "64MiB", NULL, NULL,
     G_FIELD(disk_free_limit), NULL, NULL,
     "While the file system holding data_dir has less free space than this, sending links "
     "get no new credit; credit comes back once there is more. Credit already granted "
     "cannot carry the disk past it: near the limit a link gets credit only while its "
     "credit times its largest message fits in its share of half the free space above the "
     "limit (shared by the producer links open), and a message that would take the free "
     "space below the limit is refused "
     "(amqp:resource-limit-exceeded). $management and the transaction coordinator keep a "
     "window of 8 at the limit, so mqctl can still delete topics. 0 turns it off.",
     true},
    {"partition_resume_ms", MQD_CT_DURATION, MQD_CS_GLOBAL, 0, DAY, "5s", NULL, NULL,
     G_FIELD(partition_resume_ms), NULL, NULL,
     "A partition that failed because the disk was full (a write or fdatasync returned "
     "ENOSPC) refuses sends, and every send it had not made durable was rejected with "
     "amqp:resource-limit-exceeded. This often, once the free space is above "
     "disk_free_limit + max_message_size, mqd truncates it to its last durable record, writes and syncs a "
     "probe block, and resumes it if that worked. The same for a partition failed by a "
     "transient lack of resources (EMFILE, ENFILE, ENOMEM: no descriptor for a segment or "
     "index file at a roll), once a descriptor can be had; its sends were rejected with "
     "amqp:resource-limit-exceeded too. 0: only `mqctl topic resume` does. "
     "Partitions failed by other I/O errors (EIO above all) always wait for mqctl.",
     true},

    /* ---- topics: global part = defaults for every topic, [topic NAME] overrides ---- */
    {"partitions", MQD_CT_UINT, MQD_CS_TOPIC, 1, 65536, NULL, "default_partitions", NULL,
     T_FIELD(partitions), NULL, NULL,
     "Partitions of this topic (sections only). A topic's partition count can grow, never "
     "shrink.",
     false},
    {"flush", MQD_CT_ENUM, MQD_CS_BOTH, 0, 0, "sync", NULL, NULL, T_FIELD(log.flush), flush_names,
     NULL,
     "sync: a message is accepted once fdatasync'd (group commit). async: accepted once "
     "written to the page cache and fsync'd every flush_interval_ms; a power failure or "
     "kernel crash may lose up to that much acknowledged data, a crash of mqd loses none.",
     false},
    {"flush_interval_ms", MQD_CT_DURATION, MQD_CS_BOTH, 1, HOUR, "1s", NULL, NULL,
     T_FIELD(log.flush_interval_ms), NULL, NULL, "flush = async: fsync at least this often.",
     false},
    {"flush_messages", MQD_CT_UINT, MQD_CS_BOTH, 0, 1000000000, "0", NULL, NULL,
     T_FIELD(log.flush_messages), NULL, NULL,
     "flush = async: also fsync after this many messages. 0 turns it off.", false},
    {"segment_bytes", MQD_CT_SIZE, MQD_CS_BOTH, 4 * KiB, 2 * GiB, "1GiB", NULL, NULL,
     T_FIELD(log.segment_bytes), NULL, NULL, "Start a new segment file at this size.", false},
    {"segment_ms", MQD_CT_DURATION, MQD_CS_BOTH, 0, 3650 * DAY, "7d", NULL, NULL,
     T_FIELD(log.segment_ms), NULL, NULL,
     "Start a new segment when the active one is older than this. 0 turns it off.", false},
    {"retention_bytes", MQD_CT_SIZE, MQD_CS_BOTH, 0, UINT64_C(1) << 60, "0", NULL, NULL,
     T_FIELD(log.retention_bytes), NULL, NULL,
     "Delete the oldest segments while a partition is bigger than this. 0 turns it off.", false},
    {"retention_ms", MQD_CT_DURATION, MQD_CS_BOTH, 0, 36500 * DAY, "0", NULL, NULL,
     T_FIELD(log.retention_ms), NULL, NULL,
     "Delete segments whose newest message is older than this. 0 turns it off.", false},
    {"retention", MQD_CT_ENUM, MQD_CS_BOTH, 0, 0, "default", NULL, NULL,
     T_FIELD(retention_consumed), retention_names, NULL,
     "default: only retention_bytes/retention_ms delete data, whatever consumer groups have "
     "read (a group behind resumes at the new start). consumed: also delete segments every "
     "consumer group has consumed (queue-like); with no group yet nothing goes. An open "
     "transaction's records stay in either mode until it is decided.",
     false},
    {"index_interval_bytes", MQD_CT_SIZE, MQD_CS_BOTH, 64, 16 * MiB, "4KiB", NULL, NULL,
     T_FIELD(log.index_interval_bytes), NULL, NULL,
     "One offset-index entry per this many log bytes (smaller: faster seeks, bigger index).",
     false},
    {"auto_offset_reset", MQD_CT_ENUM, MQD_CS_BOTH, 0, 0, "earliest", NULL, NULL,
     T_FIELD(auto_offset_reset), reset_names, NULL,
     "Where a consumer group with no committed offset starts.", false},
    {"max_delivery_count", MQD_CT_UINT, MQD_CS_BOTH, 0, 1000000, "0", NULL, NULL,
     T_FIELD(max_delivery_count), NULL, NULL,
     "Deliveries of a message (counted by modified with delivery-failed) before it is dead "
     "lettered or dropped. 0: unlimited.",
     false},
    {"dead_letter", MQD_CT_BOOL, MQD_CS_BOTH, 0, 0, "off", NULL, NULL, T_FIELD(dead_letter), NULL,
     NULL, "Send rejected and over-delivered messages to the topic T/$DeadLetterQueue.", false},
    {"dedup_window_ms", MQD_CT_DURATION, MQD_CS_BOTH, 0, 7 * DAY, "0", NULL, NULL,
     T_FIELD(dedup_window_ms), NULL, NULL,
     "Accept without storing a message whose message-id the topic stored within this "
     "window (a producer's retry after a lost disposition is not stored twice). After a "
     "restart the window is rebuilt from the logs before mqd serves clients, so start-up "
     "reads the records of one window. 0 turns it off.",
     false},

    /* ---- replication (issue 19; src/repl/): cluster = etcd only ---- */
    {"replication_factor", MQD_CT_UINT, MQD_CS_BOTH, 1, 16, "1", NULL, NULL,
     T_FIELD(replication_factor), NULL, NULL,
     "Copies of each partition of the topic in a cluster (cluster = etcd). Every topic of "
     "a cluster is registered in etcd: with 1 its partitions are on the node that created "
     "it (the only replica and leader), with more the controller places the copies on "
     "distinct racks where possible. Fixed when the topic is created; a topic created "
     "without it (no management setting, no [topic] section, not in the global part) gets "
     "default_replication_factor.",
     false},
    {"acks", MQD_CT_ENUM, MQD_CS_BOTH, 0, 0, "all", NULL, NULL, T_FIELD(acks), acks_names, NULL,
     "A replicated send is accepted once: leader: the leader's log holds it (its flush "
     "policy); quorum: a majority of the replicas do; all: every in-sync replica does, and "
     "at least min_insync_replicas of them (else it is rejected). A sender link's property "
     "mqd:acks overrides it.",
     false},
    {"min_insync_replicas", MQD_CT_UINT, MQD_CS_BOTH, 0, 16, "0", "min(2, replication_factor)",
     NULL, T_FIELD(min_insync_replicas), NULL, NULL,
     "acks = all: a send is rejected while fewer replicas than this are in sync (0: "
     "min(2, replication_factor)), and the high watermark does not advance.",
     false},
    {"unclean_leader_election", MQD_CT_BOOL, MQD_CS_BOTH, 0, 0, "off", NULL, NULL,
     T_FIELD(unclean_leader_election), NULL, NULL,
     "Allow a replica outside the in-sync set to become leader when no in-sync replica is "
     "alive (acknowledged data may be lost; the in-sync set restarts with that replica). "
     "Off: such a partition stays offline until an in-sync replica returns.",
     false},
    {"replica_lag_ms", MQD_CT_DURATION, MQD_CS_GLOBAL, 100, 10 * MIN, "10s", NULL, NULL,
     G_FIELD(replica_lag_ms), NULL, NULL,
     "A follower that has not caught up with its leader's log end for this long leaves the "
     "in-sync set (the leader writes the partition's etcd key); it rejoins once caught up.",
     false},
    {"default_replication_factor", MQD_CT_UINT, MQD_CS_GLOBAL, 1, 16, "1", NULL, NULL,
     G_FIELD(default_replication_factor), NULL, NULL,
     "replication_factor of a topic created in a cluster without one: by a link that names "
     "a new address (auto_create_topics) or by management without the setting (Kafka's "
     "default.replication.factor). A value above the live nodes waits for them, as any "
     "placement does. Reloadable (SIGHUP).",
     true},
    {"fast_failover", MQD_CT_BOOL, MQD_CS_GLOBAL, 0, 0, "on", NULL, NULL,
     G_FIELD(fast_failover), NULL, NULL,
     "On: a node whose process died is replaced without waiting for its etcd lease. When "
     "a connection to it ends, its port refuses a new TCP connection and the controller's "
     "own connect is refused too (a paused or cut-off process still completes the "
     "handshake, or answers nothing), its lease is revoked and its partitions fail over "
     "at once. Off: only the lease's expiry tells the cluster. Reloadable (SIGHUP).",
     true},
    {"auto_leader_rebalance", MQD_CT_BOOL, MQD_CS_GLOBAL, 0, 0, "on", NULL, NULL,
     G_FIELD(auto_leader_rebalance), NULL, NULL,
     "On: every leader_rebalance_interval_ms each leader looks at the nodes whose share of "
     "their preferred partitions (the first replica as placed) led by another node is above "
     "leader_imbalance_percent, and hands such a partition it leads back to its preferred "
     "replica: only to a live in-sync replica that has been up for one interval, after "
     "pausing its sends until that replica holds every record (epoch + 1, as mqctl cluster "
     "elect). Off: leaders stay where failover put them. Reloadable (SIGHUP).",
     true},
    {"leader_rebalance_interval_ms", MQD_CT_DURATION, MQD_CS_GLOBAL, 500, DAY, "5m", NULL, NULL,
     G_FIELD(leader_rebalance_interval_ms), NULL, NULL,
     "How often a leader checks for partitions to hand back to their preferred replica "
     "(auto_leader_rebalance); also how long that replica's node must have been up. "
     "Reloadable (SIGHUP).",
     true},
    {"leader_imbalance_percent", MQD_CT_UINT, MQD_CS_GLOBAL, 0, 100, "10", NULL, NULL,
     G_FIELD(leader_imbalance_percent), NULL, NULL,
     "auto_leader_rebalance moves a node's preferred partitions back to it only while more "
     "than this percentage of them is led by other nodes (0: any one). Reloadable (SIGHUP).",
     true},
    {"hw_checkpoint_interval_ms", MQD_CT_DURATION, MQD_CS_GLOBAL, 100, MIN, "1s", NULL, NULL,
     G_FIELD(hw_checkpoint_interval_ms), NULL, NULL,
     "How often each node writes the high watermarks of its replicas, when one changed, to "
     "data_dir/replication-offset-checkpoint (also at a clean stop). A node that leads after "
     "its restart before any follower reported starts from it, so consumers see what was "
     "committed up to the last checkpoint. Reloadable (SIGHUP).",
     true},
    {"connection_redirect", MQD_CT_ENUM, MQD_CS_GLOBAL, 0, 0, "off", NULL, NULL,
     G_FIELD(connection_redirect), conn_redirect_names, NULL,
     "Client connections this node sends to another node with amqp:connection:redirect (the "
     "close frame's info: hostname, network-host, port), when a link of theirs "
     "first names a topic ($management, $cbs, dynamic nodes and the transaction "
     "coordinator are still served here, and node connections never go). off: none. idle: "
     "while this node leads no partition (it holds only followers, has just joined, or "
     "handed its partitions over on a clean stop). always: all of them (a node being "
     "drained, or kept for management). The target is a live node: the leader of the "
     "partition the link names (for a whole topic: of its first partition led elsewhere), "
     "else the next live "
     "node that leads partitions; with no other live node the connection is served here. "
     "Needs cluster = etcd. Reloadable (SIGHUP).",
     true},

    {"replication_user", MQD_CT_STRING, MQD_CS_GLOBAL, 0, 0, "", "none", NULL,
     G_FIELD(replication_user), NULL, NULL,
     "User (a [user NAME] section on every node) that followers log in as (SASL PLAIN) on "
     "their fetch connections; a leader then refuses $repl/... links from any other login "
     "(a certificate login of a node included). Unset: followers log in by certificate "
     "(SASL EXTERNAL) with replication_peer_verify, else anonymously (the leader needs "
     "allow_anonymous), and fetch links are only checked for naming a replica node id (and, "
     "with replication_peer_verify, for a client certificate that names it). Restart-only.",
     false},
    {"replication_password", MQD_CT_STRING, MQD_CS_GLOBAL, 0, 0, "", "none", NULL,
     G_FIELD(replication_password), NULL, NULL,
     "Password of replication_user. Sent with SASL PLAIN over the fetch connection: in clear "
     "unless replication_tls is on. Restart-only.",
     false},
    {"replication_tls", MQD_CT_BOOL, MQD_CS_GLOBAL, 0, 0, "off", NULL, NULL,
     G_FIELD(replication_tls), NULL, NULL,
     "On: followers fetch from their leader over TLS (amqps:// to the leader's "
     "replication_address), verify its certificate against replication_ca_file with the "
     "address's host as the name, then log in (replication_user with SASL PLAIN inside TLS; "
     "without it SASL EXTERNAL with replication_peer_verify, else ANONYMOUS); a "
     "leader refuses $repl/... links that arrive on a connection without TLS "
     "(amqp:unauthorized-access). Needs an amqps:// listener (tls_cert, tls_key) on every "
     "node. Restart-only.",
     false},
    {"replication_ca_file", MQD_CT_STRING, MQD_CS_GLOBAL, 0, 0, "", "none", NULL,
     G_FIELD(replication_ca_file), NULL, NULL,
     "PEM file of the CA(s) that verify a leader's certificate when replication_tls is on; "
     "unset: the system trust store. With replication_peer_verify, also the CA(s) the "
     "followers' client certificates must chain to. Restart-only.",
     false},
    {"replication_cert", MQD_CT_STRING, MQD_CS_GLOBAL, 0, 0, "", "none", NULL,
     G_FIELD(replication_cert), NULL, NULL,
     "PEM file with the client certificate (and its chain) this node presents on its fetch "
     "connections when replication_tls is on; its leaders check it with "
     "replication_peer_verify. Its subject CN must be mqd-node-NODE_ID (for example "
     "CN=mqd-node-3 for node_id 3). Unset: tls_cert, so one certificate per node can serve "
     "both ends: the host names in its subjectAltName, the node id in its CN. "
     "Restart-only.",
     false},
    {"replication_key", MQD_CT_STRING, MQD_CS_GLOBAL, 0, 0, "", "none", NULL,
     G_FIELD(replication_key), NULL, NULL,
     "PEM file with the private key of replication_cert (unencrypted); needed when "
     "replication_cert is set. Unset: tls_key. Restart-only.",
     false},
    {"replication_peer_verify", MQD_CT_BOOL, MQD_CS_GLOBAL, 0, 0, "off", NULL, NULL,
     G_FIELD(replication_peer_verify), NULL, NULL,
     "On (mutual TLS between nodes; needs replication_tls and replication_ca_file): the "
     "amqps:// listeners ask TLS clients for a certificate, and a $repl/... fetch link is "
     "accepted only on a connection whose client certificate verified against "
     "replication_ca_file and whose subject CN is mqd-node-ID for the node id the attach "
     "claims (mqd:node-id); anything else is refused with amqp:unauthorized-access naming "
     "the rule that failed. A client that presents a certificate chaining to neither tls_ca "
     "nor replication_ca_file fails the handshake; clients without one are unaffected. "
     "replication_user, when set, is checked as well; unset, followers log in by certificate "
     "alone (SASL EXTERNAL), and such a node connection may carry $repl/... fetch links and "
     "nothing else. Followers also check that the leader's server certificate (its "
     "tls_cert) names the leader etcd names (CN mqd-node-LEADER_ID), and refuse and retry "
     "otherwise. A node with it on refuses to start when its own replication_cert or "
     "tls_cert does not name its node_id (and a reload, for tls_cert). Restart-only.",
     false},
    {"replication_address", MQD_CT_STRING, MQD_CS_GLOBAL, 0, 0, "", "none", NULL,
     G_FIELD(replication_address), NULL, mqd_conf_check_hostport_or_empty,
     "HOST:PORT of this node's TLS listener that other nodes fetch from (replication_tls); "
     "unset: the first amqps:// listen address. It is "
     "registered in etcd next to advertised_address (nodes that register none are fetched "
     "from at advertised_address). Its host is the name a follower verifies the certificate "
     "for. Restart-only.",
     false},

    /* ---- cluster (issue 19; src/cluster/): restart-only ---- */
    {"cluster", MQD_CT_ENUM, MQD_CS_GLOBAL, 0, 0, "none", NULL, NULL, G_FIELD(cluster),
     cluster_names, NULL,
     "none: a single node, no coordination service. etcd: the node registers in etcd "
     "(etcd_endpoints) under a lease of lease_ttl_ms as /cluster_name/nodes/node_id and "
     "campaigns for /cluster_name/controller; needs node_id.",
     false},
    {"etcd_endpoints", MQD_CT_STRING, MQD_CS_GLOBAL, 0, 0, "", "none", NULL,
     G_FIELD(etcd_endpoints), NULL, mqd_conf_check_etcd_endpoints,
     "etcd v3 JSON gateway addresses, http://HOST:PORT[,http://HOST:PORT...]; on a connection "
     "error the node moves to the next one.",
     false},
    {"cluster_name", MQD_CT_STRING, MQD_CS_GLOBAL, 0, 0, "mqd", NULL, NULL,
     G_FIELD(cluster_name), NULL, mqd_conf_check_cluster_name,
     "Prefix of this cluster's etcd keys (/NAME/...): clusters sharing an etcd need "
     "different names.",
     false},
    {"node_id", MQD_CT_UINT, MQD_CS_GLOBAL, 1, 2147483647, NULL, "none", NULL, G_FIELD(node_id),
     NULL, NULL,
     "This node's id in the cluster, a positive integer unique among its nodes; required "
     "with cluster = etcd.",
     false},
    {"advertised_address", MQD_CT_STRING, MQD_CS_GLOBAL, 0, 0, "", "the first listen address",
     NULL, G_FIELD(advertised_address), NULL, mqd_conf_check_hostport_or_empty,
     "HOST:PORT other nodes and redirected clients use to reach this node's AMQP listener.",
     false},
    {"rack", MQD_CT_STRING, MQD_CS_GLOBAL, 0, 0, "", "none", NULL, G_FIELD(rack), NULL, NULL,
     "Failure domain of this node (rack, zone): replicas of a partition go to different "
     "racks where possible.",
     false},
    {"lease_ttl_ms", MQD_CT_DURATION, MQD_CS_GLOBAL, 2 * SEC, 60 * SEC, "3000", NULL, NULL,
     G_FIELD(lease_ttl_ms), NULL, NULL,
     "TTL of the node's etcd lease (rounded up to whole seconds; kept alive every third of "
     "it). A node that stops answering for this long loses its registration and the "
     "controller role; etcd may take up to about twice it after its own leader changes.",
     false},

    /* ---- users ---- */
    {"password_hash", MQD_CT_STRING, MQD_CS_USER, 0, 0, NULL, "none", NULL, U_FIELD(password_hash),
     NULL, mqd_conf_check_password_hash,
     "The user's password (SASL PLAIN) as pbkdf2-sha256$ITERATIONS$SALT$HASH, made by "
     "mqd-passwd. Users "
     "are reloadable (SIGHUP).",
     true},
    {"scram_sha256", MQD_CT_STRING, MQD_CS_USER, 0, 0, NULL, "none", NULL, U_FIELD(scram_sha256),
     NULL, mqd_conf_check_scram,
     "SASL SCRAM-SHA-256 credentials as ITERATIONS$SALT$STOREDKEY$SERVERKEY (never the "
     "password), made by mqd-passwd --scram.",
     true},
    {"cert_cn", MQD_CT_STRING, MQD_CS_USER, 0, 0, NULL, "the user name", NULL, U_FIELD(cert_cn),
     NULL, NULL,
     "SASL EXTERNAL over TLS: a client certificate whose subject CN is this value logs in as "
     "this user. Without it, a certificate whose CN equals the user name does.",
     true},
    {"groups", MQD_CT_STRING, MQD_CS_USER, 0, 0, NULL, "none", NULL, U_FIELD(groups), NULL, NULL,
     "Comma-separated groups of this user, named in [acl] rules as @GROUP.", true},

    /* ---- SAS tokens ($cbs, Event Hubs clients; docs/security.md) ---- */
    {"sas_required", MQD_CT_ENUM, MQD_CS_GLOBAL, 0, 0, "auto", NULL, NULL, G_FIELD(sas_required),
     sas_required_names, NULL,
     "on: a link to a topic (and a $management request) needs a SAS token, sent with "
     "put-token to $cbs, whose audience covers the topic and whose key has the right for "
     "the link (send, listen, manage); when it expires the link is detached with "
     "amqp:unauthorized-access unless a newer put-token renewed it. off: links need no "
     "token, and put-token accepts any well-formed unexpired token of an unknown key name "
     "(status 202, the Event Hubs emulator's way); tokens of a configured key are always "
     "verified. auto: as off on loopback-only listeners; with any other listener, links "
     "need no token but unknown key names are refused (401). An explicit off on a "
     "non-loopback listener is logged as a warning. SASL users and the [acl] apply as well.",
     false},
    {"key", MQD_CT_STRING, MQD_CS_SASKEY, 0, 0, NULL, "none", NULL, K_FIELD(key), NULL,
     mqd_conf_check_nonempty,
     "[sas_key NAME]: the shared access key (SharedAccessKey; NAME is SharedAccessKeyName) "
     "that signs tokens with HMAC-SHA256; mqd-passwd --sas NAME prints a new section. "
     "Restart to change.",
     false},
    {"rights", MQD_CT_STRING, MQD_CS_SASKEY, 0, 0, NULL, "none", NULL, K_FIELD(rights), NULL,
     mqd_conf_check_sas_rights,
     "[sas_key NAME]: comma-separated send, listen, manage (manage includes the other two).",
     false},
    {"scope", MQD_CT_STRING, MQD_CS_SASKEY, 0, 0, NULL, "*", NULL, K_FIELD(scope), NULL,
     mqd_conf_check_nonempty,
     "[sas_key NAME]: the one hub (topic) its tokens may name, or * for every hub; a token "
     "for an audience outside it is refused (401).",
     false},
};

const size_t mqd_conf_nrows = MQD_ARRAY_LEN(mqd_conf_rows);

const mqd_conf_row_t *mqd_conf_row_find(const char *name)
{
    for (size_t i = 0; i < mqd_conf_nrows; i++)
        if (strcmp(mqd_conf_rows[i].name, name) == 0)
            return &mqd_conf_rows[i];
    return NULL;
}

const char *mqd_conf_row_suggest(const char *name)
{
    const char **names = malloc(mqd_conf_nrows * sizeof *names);
    if (!names)
        return NULL;
    for (size_t i = 0; i < mqd_conf_nrows; i++)
        names[i] = mqd_conf_rows[i].name;
    const char *best = mqd_closest(name, names, mqd_conf_nrows);
    free(names);
    return best;
}

/* ---- number parsing ---- */

typedef struct unit {
    const char *suffix;
    uint64_t mult;
} unit_t;

static const unit_t size_units[] = {
    {"", 1},      {"b", 1},    {"k", KiB},   {"kb", KiB},  {"kib", KiB},
    {"m", MiB},   {"mb", MiB}, {"mib", MiB}, {"g", GiB},   {"gb", GiB},
    {"gib", GiB}, {"t", TiB},  {"tb", TiB},  {"tib", TiB}, {NULL, 0},
};

static const unit_t duration_units[] = {
    {"", 1}, {"ms", 1}, {"s", SEC}, {"m", MIN}, {"h", HOUR}, {"d", DAY}, {NULL, 0},
};

/* Parses digits then an optional unit from `units`; rejects signs, blanks, overflow. */
static bool parse_number(const char *s, const unit_t *units, uint64_t *out)
{
    uint64_t v = 0;
    const char *p = s;
    if (!isdigit((unsigned char)*p))
        return false;
    for (; isdigit((unsigned char)*p); p++) {
        if (v > (UINT64_MAX - (uint64_t)(*p - '0')) / 10)
            return false;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    while (*p == ' ' || *p == '\t')
        p++;
    for (const unit_t *u = units; u->suffix != NULL; u++) {
        if (strcasecmp(p, u->suffix) == 0) {
            if (u->mult != 0 && v > UINT64_MAX / u->mult)
                return false;
            *out = v * u->mult;
            return true;
        }
    }
    return false;
}

static bool parse_bool(const char *s, bool *out)
{
    static const char *const yes[] = {"on", "yes", "true", "1"};
    static const char *const no[] = {"off", "no", "false", "0"};
    for (size_t i = 0; i < MQD_ARRAY_LEN(yes); i++) {
        if (strcasecmp(s, yes[i]) == 0 || strcasecmp(s, no[i]) == 0) {
            *out = strcasecmp(s, yes[i]) == 0;
            return true;
        }
    }
    return false;
}

void mqd_conf_row_fmt(const mqd_conf_row_t *r, uint64_t v, char *buf, size_t len)
{
    static const unit_t sizes[] = {{"TiB", TiB}, {"GiB", GiB}, {"MiB", MiB}, {"KiB", KiB}};
    static const unit_t times[] = {{"d", DAY}, {"h", HOUR}, {"m", MIN}, {"s", SEC}};
    const unit_t *u = r->type == MQD_CT_SIZE ? sizes : r->type == MQD_CT_DURATION ? times : NULL;
    for (size_t i = 0; u != NULL && v != 0 && i < 4; i++) {
        if (v % u[i].mult == 0) {
            snprintf(buf, len, "%" PRIu64 "%s", v / u[i].mult, u[i].suffix);
            return;
        }
    }
    snprintf(buf, len, "%" PRIu64 "%s", v, r->type == MQD_CT_DURATION && v ? "ms" : "");
}

/* "a, b or c" from an enum's names. */
static void join_names(const char *const *names, const char *sep_mid, const char *last_sep,
                       char *buf, size_t len)
{
    size_t n = 0, used = 0;
    while (names[n] != NULL)
        n++;
    buf[0] = '\0';
    for (size_t i = 0; i < n && used < len; i++) {
        const char *sep = i == 0 ? "" : i + 1 == n ? last_sep : sep_mid;
        int w = snprintf(buf + used, len - used, "%s%s", sep, names[i]);
        used += w > 0 ? (size_t)w : 0;
    }
}

void mqd_conf_row_describe(const mqd_conf_row_t *r, char *buf, size_t len)
{
    char lo[32], hi[32];
    mqd_conf_row_fmt(r, r->min, lo, sizeof lo);
    mqd_conf_row_fmt(r, r->max, hi, sizeof hi);
    switch (r->type) {
    case MQD_CT_BOOL: snprintf(buf, len, "on | off"); break;
    case MQD_CT_UINT: snprintf(buf, len, "integer %s..%s", lo, hi); break;
    case MQD_CT_SIZE: snprintf(buf, len, "size %s..%s", lo, hi); break;
    case MQD_CT_DURATION: snprintf(buf, len, "duration %s..%s", lo, hi); break;
    case MQD_CT_ENUM: join_names(r->names, " | ", " | ", buf, len); break;
    case MQD_CT_STRING: snprintf(buf, len, "string"); break;
    case MQD_CT_LIST: snprintf(buf, len, "[amqps://]HOST:PORT, repeatable"); break;
    }
}

const char *mqd_conf_row_default_doc(const mqd_conf_row_t *r)
{
    if (r->def_doc != NULL)
        return r->def_doc;
    return r->def != NULL ? r->def : "none";
}

/* ---- storing values ---- */

static void store_uint(const mqd_conf_row_t *r, void *base, uint64_t v)
{
    char *f = (char *)base + r->off;
    if (r->width == sizeof(uint64_t)) {
        memcpy(f, &v, sizeof v); /* int64_t fields: v <= max < 2^63 */
    } else if (r->width == sizeof(uint32_t)) {
        uint32_t w = (uint32_t)v;
        memcpy(f, &w, sizeof w);
    } else {
        bool b = v != 0;
        memcpy(f, &b, sizeof b);
    }
}

static int apply_number(const mqd_conf_row_t *r, void *base, const char *val, char *why,
                        size_t whylen)
{
    static const char *const expect[] = {
        [MQD_CT_UINT] = "a whole number",
        [MQD_CT_SIZE] = "a size like 4096, 64KiB, 16MiB or 1GiB",
        [MQD_CT_DURATION] = "a duration like 500ms, 30s, 5m, 2h or 7d",
    };
    uint64_t v = 0;
    const unit_t none[] = {{"", 1}, {NULL, 0}};
    const unit_t *units = r->type == MQD_CT_SIZE       ? size_units
                          : r->type == MQD_CT_DURATION ? duration_units
                                                       : none;
    if (!parse_number(val, units, &v)) {
        snprintf(why, whylen, "expected %s, got '%s'", expect[r->type], val);
        return MQD_EINVAL;
    }
    if (v < r->min || v > r->max) {
        char lo[32], hi[32];
        mqd_conf_row_fmt(r, r->min, lo, sizeof lo);
        mqd_conf_row_fmt(r, r->max, hi, sizeof hi);
        snprintf(why, whylen, "'%s' is out of range %s..%s", val, lo, hi);
        return MQD_EINVAL;
    }
    store_uint(r, base, v);
    return 0;
}

static int apply_enum(const mqd_conf_row_t *r, void *base, const char *val, char *why,
                      size_t whylen)
{
    for (size_t i = 0; r->names[i] != NULL; i++) {
        if (strcasecmp(val, r->names[i]) == 0) {
            if (r->width == sizeof(bool))
                store_uint(r, base, i);
            else {
                int e = (int)i; /* enum fields are int-sized */
                memcpy((char *)base + r->off, &e, sizeof e);
            }
            return 0;
        }
    }
    char list[128];
    join_names(r->names, ", ", " or ", list, sizeof list);
    snprintf(why, whylen, "expected %s, got '%s'", list, val);
    return MQD_EINVAL;
}

static int apply_string(const mqd_conf_row_t *r, void *base, const char *val, char *why,
                        size_t whylen)
{
    char *copy = NULL;
    if (r->check != NULL && r->check(val, why, whylen) != 0)
        return MQD_EINVAL;
    if (val[0] != '\0' && (copy = strdup(val)) == NULL)
        return MQD_ENOMEM; /* empty string = unset (NULL) */
    char **f = (char **)((char *)base + r->off);
    if (r->type == MQD_CT_STRING) {
        free(*f);
        *f = copy;
        return 0;
    }
    /* a list: char ** followed by its size_t count (listen, n_listen) */
    size_t *n = (size_t *)((char *)base + r->off + sizeof(char **));
    char **grown = realloc(*(char ***)f, (*n + 1) * sizeof(char *));
    if (grown == NULL || copy == NULL) {
        free(copy);
        if (grown != NULL)
            *(char ***)f = grown;
        return MQD_ENOMEM;
    }
    grown[(*n)++] = copy;
    *(char ***)f = grown;
    return 0;
}

int mqd_conf_row_apply(const mqd_conf_row_t *r, void *base, const char *val, char *why,
                       size_t whylen)
{
    bool b;
    switch (r->type) {
    case MQD_CT_BOOL:
        if (!parse_bool(val, &b)) {
            snprintf(why, whylen, "expected on or off (or yes/no, true/false, 1/0), got '%s'", val);
            return MQD_EINVAL;
        }
        store_uint(r, base, b);
        return 0;
    case MQD_CT_UINT:
    case MQD_CT_SIZE:
    case MQD_CT_DURATION: return apply_number(r, base, val, why, whylen);
    case MQD_CT_ENUM: return apply_enum(r, base, val, why, whylen);
    case MQD_CT_STRING:
    case MQD_CT_LIST: return apply_string(r, base, val, why, whylen);
    }
    return MQD_EINVAL;
}

void mqd_conf_row_free_fields(mqd_conf_scope_t scope, void *base)
{
    for (size_t i = 0; i < mqd_conf_nrows; i++) {
        const mqd_conf_row_t *r = &mqd_conf_rows[i];
        if (r->scope != scope)
            continue;
        char **f = (char **)((char *)base + r->off);
        if (r->type == MQD_CT_STRING) {
            free(*f);
            *f = NULL;
        } else if (r->type == MQD_CT_LIST) {
            size_t *n = (size_t *)((char *)base + r->off + sizeof(char **));
            char **v = *(char ***)f;
            for (size_t j = 0; j < *n; j++)
                free(v[j]);
            free(v);
            *(char ***)f = NULL;
            *n = 0;
        }
    }
}
