/* core internals: the bodies of the structs core.h declares opaque (server, connection,
 * topic, partition, link state). Only src/core includes this (and core's unit tests);
 * everything else uses core.h's accessors. */
#ifndef MQD_CORE_INT_H
#define MQD_CORE_INT_H

#include "core/core.h"

struct mqd_part {
    mqd_topic_t *topic;
    uint32_t id;
    mqd_plog_t *log;
    mqd_pending_t *pend_head, *pend_tail; /* FIFO by offset */
    uint32_t pend_weak;                   /* of them with acks below all (part_commit.c) */
    bool failed;                          /* its log failed and the owner knows (partfail.c) */
    bool led;                             /* repl: this node leads it now (mqd_part_set_led) */
    uint32_t led_gen;                     /* bumped at each change of `led` */
    int64_t resume_at_ms;                 /* next automatic resume attempt */
    mqd_part_commit_t *commit;            /* its commit point (part_commit.c): use the accessors */
    struct {                              /* topic_count.c: offsets that are no message */
        uint64_t *off;                    /* ascending (owned) */
        size_t n, cap;
        size_t census_n;                  /* the first census_n came from the census */
        uint64_t census_at, census_end;   /* the census has yet to read [at, end) */
        uint64_t next;                    /* the offset the next append should get */
        bool lost;                        /* out of memory or a failed read: an estimate */
        bool loaded;                      /* the census saved by the last stop was looked at */
    } ctl;
};

struct mqd_topic {
    mqd_server_t *srv;
    char *name;
    uint32_t nparts;
    mqd_part_t **parts;        /* [nparts], each allocated alone: they never move */
    mqd_topic_conf_t conf;     /* effective settings (conf.name not owned) */
    bool temporary;            /* dynamic reply-to node: deleted when its link goes */
    uint64_t owner;            /* temporary: the mqd_conn_serial of the connection whose
                                  node it is (the only one that may read it) */
    mqd_dlist_t consumers;     /* mqd_lstate_t.tnode of consuming links (and browsers) */
    uint32_t ext_consumers;    /* 0-9-1 consumers (amqp091/): they are woken by ops.topic_wake */
    mqd_dlist_t groups;        /* mqd_group_t.node */
    uint32_t rr_part;          /* partition round robin for dispatch */
    struct mqd_topic *hnext;   /* hash chain */
    uint64_t msgs_in, bytes_in, msgs_out, bytes_out;
    uint64_t msgs_expired, msgs_dead, msgs_rejected, msgs_duplicate;
    struct mqd_dedup *dedup;   /* dedup.c: message-ids seen within dedup_window_ms */
    int64_t created_ms;
    char uid[40];              /* replicated: its registration's identity (repl/), or "" */
    struct json_t *overrides;  /* settings changed through management (owned), or NULL */
    mqd_dlist_t dnode;         /* in server->dispatch_q when queued */
    mqd_dlist_t lnode;         /* in server->dispatch_later when queued */
};

struct mqd_lstate {
    mqd_ls_kind_t kind;
    mqd_conn_t *conn;
    pn_link_t *link;
    mqd_topic_t *topic;      /* NULL for anonymous relay and temporary-node producers */
    char *tmp_name;          /* producer to a temporary node: its name (owned) */
    bool mgmt;               /* producer to $management (or $cbs) */
    bool cbs;                /* producer to $cbs: requests go to mqd_auth_cbs_handle */
    bool coord;              /* the transaction coordinator link */
    uint8_t acl_perm;        /* mqd_perm_t checked on the topic (or $management) at
                                attach, 0 = none (a reload checks it again:
                                mqd_auth_recheck) */
    uint32_t part;           /* producer: T/Partitions/N or the round robin's; consumer:
                                T/ConsumerGroups/G/Partitions/N */
    mqd_dlist_t tnode;       /* in topic->consumers */
    struct mqd_group *group; /* consumer: its group (group/) */
    mqd_dlist_t gnode;       /* in group->members */
    bool manual;             /* T/ConsumerGroups/G/Partitions/N: owns `part` only */
    bool local_only;         /* mqd:fwd-local-only on a replicated topic: reads only the
                                partitions this node leads (mqd_part_led) */
    bool has_epoch;
    int64_t epoch; /* com.microsoft:epoch */
    char name[96]; /* "peer/link-name" for management */
    void *repl;    /* MQD_LS_REPL: the replication layer's state of it */
    void *fwd;     /* MQD_LS_FWD: the forwarding layer's state of it (fwd/recv.c) */
    void *amqp;    /* amqp/'s state of it (mqd_alink_t, amqp/amqp_int.h: credit,
                      partial transfers, browse and selector positions...);
                      NULL for MQD_LS_REPL */
};

struct mqd_conn {
    mqd_server_t *srv;
    int fd;
    char peer[64];
    pn_connection_driver_t driver;
    struct event *ev_read, *ev_write, *ev_timer;
    mqd_dlist_t node;        /* in srv->conns */
    mqd_dlist_t dirty_node;  /* in srv->dirty when queued for a flush */
    uint32_t topics_created; /* topics it auto-created (max_topics_per_connection) */
    int refs;                /* pending sends hold references */
    bool closed;             /* driver finished; freeing deferred */
    bool want_write;
    uint8_t tls_hdr;         /* bytes of the AMQP TLS header matched (TLS listeners) */
    bool proto_known;        /* the first input was looked at for a 0-9-1 header (conn.c) */
    bool tls_rd_wants_wr;    /* SSL_read wants the socket writable (handshake, key update) */
    bool tls_dead;           /* a fatal TLS error: no close_notify at the end */
    struct ssl_st *ssl;      /* TLS listeners only (mqd_auth_conn_setup); freed by conn_free */
    size_t listener;         /* index into conf->listen */
    int64_t opened_ms;       /* wall clock at accept */
    uint64_t bytes_in, bytes_out; /* AMQP bytes (after TLS) into and out of its driver */
    char user[128];
    uint64_t serial;         /* unique in this process (from 1): names and owns the
                                connection's temporary nodes (amqp/reply.c) */
    /* The frame peek that tells the delivery path each transfer's message-format (owned).
       It is the on/off switch: set at accept where rx_feed sees plaintext (plain
       listeners; on TLS listeners Proton decrypts), NULL elsewhere. */
    mqd_fpeek_t *peek;
    uint64_t out_gen;        /* Proton's output produced (conn_write, tls_write): credit
                                granted before the last one has reached the peer */
    size_t rbuf_cap;         /* scratch for incoming transfers */
    uint8_t *rbuf;
    void *auth;              /* auth/: per-connection TLS/SASL state (mqd_auth_conn_t), owned
                                by the transport (freed with it); NULL before setup */
    mqd_budget_t budget;     /* budget.c: what it holds, against max_connection_memory */
    /* Outbound (client role, outconn.c): its owner, NULL once the owner let go or for an
       accepted connection; `client` stays true for the life of the struct. Not in
       srv->conns or n_conns; its events go to the owner, its links are the owner's. */
    struct mqd_outconn *out;
    bool client;
};

struct mqd_server {
    struct event_base *base;
    mqd_conf_t *conf;
    mqd_store_t *store;
    mqd_meta_t *meta;
    struct mqd_listener *listeners;
    size_t n_listeners;
    struct event *ev_wake;   /* flusher -> loop */
    int wake_pending;        /* atomic: set with ev_wake by the flusher, cleared by on_wake */
    struct event *ev_tick;   /* end-of-iteration: flush connections, commit the store */
    struct event *ev_later;  /* zero timeout: dispatch_later, after the loop polled I/O */
    struct event *ev_sig[4];
    struct mqd_timers *timers; /* timer.c: every subsystem's periodic work */
    struct event *ev_shutdown; /* shutdown.c: the end of shutdown_grace_ms */
    struct event *ev_handover; /* shutdown.c: the most a leader's handover may take */
    bool handover_wait;        /* shutdown.c: waiting for repl's handover before closing */
    void *auth;              /* auth/: TLS contexts, ACLs (owned by auth) */
    void *metrics;           /* metrics/: the HTTP endpoint (owned by metrics) */
    void *console;           /* console/: the web console (owned by console), or NULL */
    struct mqd_watermark *watermark; /* watermark.c: memory/disk limits for producers */
    /* counters for metrics/ (event-loop thread) */
    uint64_t conns_accepted, conns_refused;
    uint64_t msgs_rejected;
    uint64_t budget_bytes;   /* budget.c: charged to all connections, against max_memory */
    uint64_t budget_closes;  /* connections closed by their budget or max_memory */
    uint64_t budget_high;    /* most charged since the last heap trim (mqd_budget_tick) */
    unsigned budget_trims;   /* heap trims still due on the next periodic ticks */
    size_t conns_high;       /* most connections since the last heap trim (mqd_budget_tick) */
    mqd_hist_t h_append_stable; /* append -> stable (seconds) */
    struct mqd_txns *txns;   /* txn/: open transactions, committed set */
    mqd_dlist_t conns;
    mqd_dlist_t dirty;
    mqd_dlist_t dispatch_q;
    mqd_dlist_t dispatch_later; /* mqd_topic_t.lnode: a consumer used its turn's budget */
    mqd_dlist_t graveyard;   /* closed connections awaiting their last unref */
    mqd_dlist_t outconns;    /* outconn.c: connections mqd keeps open to peers */
    mqd_dlist_t builds;      /* topics being created a slice at a time (topic.c) */
    mqd_dlist_t drains;      /* budget.c: sockets of closed connections read until EOF */
    size_t n_conns;
    mqd_topic_t **topics;    /* hash table */
    size_t topics_cap, n_topics;
    int64_t topic_refused_ms;     /* last log line of a topic-limit refusal (topic_limit.c) */
    uint64_t topic_refused_quiet; /* refusals since, not logged */
    mqd_buf_t scratch;       /* annotate output */
    mqd_read_t browse_rd;    /* browsers' reads */
    mqd_buf_t mgmt_out;      /* management replies */
    mqd_pending_t *pend_free; /* free list of settle entries */
    size_t n_pend_free;
    bool stopping;
    bool tick_queued;
    bool persist_due;        /* the 1 s timer asks the tick to persist group state */
    size_t parts_failed;     /* partitions whose log failed (partfail.c) */
    uint64_t sends_failed;   /* sends rejected because their partition failed */
    uint64_t group_commit_failures; /* group offset writes to meta.db that failed (group/) */
    uint64_t redirects[MQD_REDIRECT_KINDS]; /* redirects amqp/ sent, by mqd_redirect_kind_t */
    uint64_t login_failures[MQD_LOGIN_MECHS]; /* refused logins by mechanism (auth/, console/) */
    int64_t started_ms;      /* wall clock at start */
    uint64_t tmp_seq;
    uint64_t conn_serial;    /* the last mqd_conn_t.serial given */
    char *conf_path;
    mqd_conf_hooks_t *conf_hooks; /* reload: the subsystems' check/apply hooks (conf_swap.c) */
    struct mqd_accept_guard *accept_guard; /* accept_guard.c: EMFILE on accept */
    uint64_t nofile;         /* RLIMIT_NOFILE's soft limit when made; 0: none (fdroom.c) */
    uint64_t fd_base;        /* descriptors mqd itself held once its listeners were open */
    struct mqd_census *census; /* topic_count.c: counting markers in logs opened at start */
    mqd_repl_hooks_t repl;   /* src/repl/'s hooks (above); all NULL on a single node */
    mqd_fwd_hooks_t fwd;     /* src/fwd/'s hooks; all NULL on a single node */
    mqd_core_ops_t ops;      /* the subsystems above core, as core calls them */
};

/* topic.c: the hash bucket of a topic name (topics_cap > 0) */
size_t mqd_topic_bucket(const mqd_server_t *s, const char *name);

#endif
