/*
 * mqd-bench: AMQP 1.0 load generator and latency meter for mqd (works against any
 * AMQP 1.0 broker, e.g. RabbitMQ's AMQP 1.0 plugin, for comparisons).
 *
 * One process, one thread, Qpid Proton proactor; --connections N x --links N links.
 * Modes:
 *   send  send --count messages to --address. Unless --presettled, a message counts
 *         as sent only once the broker settles it `accepted`; latency = send->accepted.
 *   recv  receive and accept --count messages from --address (or --source); the latency
 *         of messages stamped by a mqd-bench sender is from its stamp (wall clock: one host)
 *   both  senders and receivers at once; latency = send->receive, computed from the
 *         wall-clock timestamp carried in the message body (see BODY LAYOUT).
 *   txn   transactions on a `coordinator` link: each one is declare -> [--txn-msgs K
 *         transactional sends to --address, each settled accepted] -> discharge (commit);
 *         latency = declare->discharge accepted. With K > 0, msgs_per_s counts messages
 *         (txns_per_s the transactions). Prints "not supported by this broker yet" when
 *         the coordinator attach is refused.
 *
 * BODY LAYOUT (one AMQP data section of --size bytes, at least 24):
 *   bytes 0..7 magic "MQDBENCH", 8..15 run id, 16..23 send time (CLOCK_REALTIME ns,
 *   host byte order), then filler 'x'. A receiver in `both` mode counts only messages
 *   of its own run (others are accepted and counted as stale).
 *
 * Output: a human summary and exactly one machine-readable line
 *   RESULT mode=... msgs=... secs=... msgs_per_s=... mb_per_s=... p50_ms=... p99_ms=...
 *          p999_ms=... max_ms=... broker_cpu_pct=... [extra key=value fields]
 * ("na" where a figure does not apply). Latencies go to a fixed-size log-linear
 * histogram (~1.6 % resolution): no allocation per message.
 * Exit status: 0 complete, 1 error, 2 usage, 3 stopped early (--duration-cap/--idle),
 * 4 transactions not supported by the broker.
 */
#define _GNU_SOURCE
#include <proton/codec.h>
#include <proton/condition.h>
#include <proton/connection.h>
#include <proton/delivery.h>
#include <proton/disposition.h>
#include <proton/event.h>
#include <proton/link.h>
#include <proton/message.h>
#include <proton/proactor.h>
#include <proton/sasl.h>
#include <proton/session.h>
#include <proton/terminus.h>
#include <proton/transport.h>

#include <getopt.h>
#include <malloc.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define BENCH_MAGIC "MQDBENCH"
#define BODY_MIN 24
#define TICK_MS 250
#define CLOSE_GRACE_NS 5000000000ULL
#define TXN_DECLARE 0x31
#define TXN_DISCHARGE 0x32
#define TXN_DECLARED 0x33
#define TXN_STATE 0x34
#define OUTCOME_ACCEPTED 0x24

enum mode { M_SEND, M_RECV, M_BOTH, M_TXN };
static const char *const mode_names[] = { "send", "recv", "both", "txn" };

struct opts {
	enum mode mode;
	char host[256], port[16], user[128], pass[128];
	const char *address, *source, *offset_spec;
	uint64_t count;
	size_t size;
	unsigned window, conns, links, keys, txn_msgs;
	bool durable, presettled, quiet;
	double cap, idle, rate;
	long broker_pid;
	const char *lat_log;
};

/* ---- latency histogram: values in ns, 64 sub-buckets per power of two ---- */
#define HIST_N (128 + 58 * 64)
struct hist {
	uint64_t b[HIST_N];
	uint64_t n, max;
};

static unsigned hist_idx(uint64_t v)
{
	if (v < 128)
		return (unsigned)v;
	unsigned shift = (unsigned)(63 - __builtin_clzll(v)) - 6;
	unsigned idx = 128 + (shift - 1) * 64 + (unsigned)((v >> shift) - 64);
	return idx < HIST_N ? idx : HIST_N - 1;
}

static uint64_t hist_val(unsigned idx)
{
	if (idx < 128)
		return idx;
	unsigned shift = (idx - 128) / 64 + 1;
	uint64_t m = (idx - 128) % 64 + 64;
	return (m << shift) + ((1ULL << shift) >> 1);
}

static void hist_add(struct hist *h, uint64_t v)
{
	h->b[hist_idx(v)]++;
	h->n++;
	if (v > h->max)
		h->max = v;
}

static double hist_pct_ms(const struct hist *h, double p)
{
	uint64_t rank = (uint64_t)ceil(p * (double)h->n), cum = 0;
	if (rank < 1)
		rank = 1;
	for (unsigned i = 0; i < HIST_N; i++) {
		cum += h->b[i];
		if (cum >= rank) {
			uint64_t v = hist_val(i);
			return (double)(v < h->max ? v : h->max) / 1e6;
		}
	}
	return (double)h->max / 1e6;
}

/* ---- --latency-log: per-message samples, written out after the run ---- */
struct latrec {
	uint64_t t;   /* when the latency ended (CLOCK_MONOTONIC ns) */
	uint64_t lat; /* ns */
	uint8_t kind; /* 'a' send->accepted, 'r' send->receive */
};

/* ---- run state ---- */
struct bconn;
struct blink {
	struct bconn *bc;
	pn_link_t *l;
	bool sender, txn;
	unsigned unsettled;
	char *buf;
	size_t len, cap;
};

/* txn mode: one transaction at a time per connection */
struct btxn {
	struct blink *coord, *snd; /* the coordinator link; the sender (--txn-msgs > 0) */
	uint64_t t0;               /* when the declare was sent */
	uint64_t sent, acked;      /* messages of the open transaction */
	char id[64];               /* txn-id while declared, not yet discharged */
	size_t id_len;
	bool started;
};

struct bconn {
	pn_connection_t *c;
	struct blink *links;
	unsigned nlinks;
	bool closed;
	struct btxn tx;
};

static struct {
	struct opts o;
	pn_proactor_t *p;
	struct bconn *conns;
	unsigned open_conns, receivers_total, receivers_ready;
	unsigned char **tmpl;
	size_t *tmpl_len, *ts_off;
	uint64_t run_id;
	uint64_t sent, acked, failed, received, stale, credit_out;
	bool sending_open, stopping, finished, early, txn_refused;
	uint64_t t0, t_end, t_stop, t_last_rx, t_start_prog;
	long long cpu0, cpu1;
	double rus0;
	struct hist h;
	struct hist hack; /* `both`: send->accepted, next to send->receive in h */
	struct latrec *lat; /* --latency-log: one record per measured message */
	uint64_t nlat;
	char err[512];
	uint64_t txn_begun;     /* transactions declared */
	uint64_t txn_msgs_done; /* messages of committed transactions */
} G;

static uint64_t clock_ns(clockid_t id)
{
	struct timespec ts;
	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static uint64_t mono_ns(void) { return clock_ns(CLOCK_MONOTONIC); }
static uint64_t wall_ns(void) { return clock_ns(CLOCK_REALTIME); }

/* utime+stime of a process in clock ticks, -1 if unreadable */
static long long proc_cpu_ticks(long pid)
{
	char path[64], buf[1024];
	snprintf(path, sizeof path, "/proc/%ld/stat", pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = 0;
	char *s = strrchr(buf, ')');
	if (!s)
		return -1;
	unsigned long long ut = 0, st = 0;
	/* after ")": state(3) ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime(14) stime(15) */
	if (sscanf(s + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
		return -1;
	return (long long)(ut + st);
}

static double self_cpu_secs(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
	       (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

static void lat_note(char kind, uint64_t now, uint64_t lat)
{
	if (G.lat && G.nlat < 2 * G.o.count)
		G.lat[G.nlat++] = (struct latrec){ now, lat, (uint8_t)kind };
}

static void lat_dump(void)
{
	FILE *f = G.lat ? fopen(G.o.lat_log, "w") : NULL;
	if (!f) {
		if (G.lat)
			fprintf(stderr, "mqd-bench: cannot write %s\n", G.o.lat_log);
		return;
	}
	fprintf(f, "# kind t_ms lat_ms   (a = send->accepted, r = send->receive; t from the first send,"
		   " at CLOCK_MONOTONIC %.6f s)\n", (double)G.t0 / 1e9);
	for (uint64_t i = 0; i < G.nlat; i++)
		fprintf(f, "%c %.3f %.3f\n", G.lat[i].kind,
			G.lat[i].t > G.t0 ? (double)(G.lat[i].t - G.t0) / 1e6 : 0.0, (double)G.lat[i].lat / 1e6);
	fclose(f);
}

static void start_clock(void)
{
	if (G.t0)
		return;
	G.t0 = mono_ns();
	G.rus0 = self_cpu_secs();
	if (G.o.broker_pid > 0)
		G.cpu0 = proc_cpu_ticks(G.o.broker_pid);
}

static void set_err(const char *what, pn_condition_t *c)
{
	if (G.err[0] || !c || !pn_condition_is_set(c))
		return;
	snprintf(G.err, sizeof G.err, "%s: %s: %s", what, pn_condition_get_name(c),
		 pn_condition_get_description(c) ? pn_condition_get_description(c) : "");
}

/* Ask every connection to close (each closes itself in its own PN_CONNECTION_WAKE). */
static void begin_stop(bool early)
{
	if (G.stopping)
		return;
	G.stopping = true;
	G.early = early;
	G.t_stop = mono_ns();
	if (!G.t_end && !(G.o.mode == M_SEND && G.o.presettled && !early))
		G.t_end = G.t_stop;
	if (G.o.broker_pid > 0)
		G.cpu1 = proc_cpu_ticks(G.o.broker_pid);
	for (unsigned i = 0; i < G.o.conns; i++)
		if (G.conns[i].c && !G.conns[i].closed)
			pn_connection_wake(G.conns[i].c);
}

static void check_done(void)
{
	bool done = false;
	if (G.o.mode == M_SEND)
		done = G.o.presettled ? G.sent >= G.o.count : G.acked + G.failed >= G.o.count;
	else if (G.o.mode == M_RECV)
		done = G.received >= G.o.count;
	else if (G.o.mode == M_BOTH) {
		bool sends = G.o.presettled ? G.sent >= G.o.count : G.acked + G.failed >= G.o.count;
		done = sends && G.received + G.failed >= G.o.count;
	} else
		done = G.acked + G.failed >= G.o.count;
	if (done)
		begin_stop(false);
}

/* ---- message templates: one encoded message per partition key ---- */
static int build_template(unsigned key, char *body)
{
	pn_message_t *m = pn_message();
	pn_message_set_durable(m, G.o.durable);
	pn_message_set_inferred(m, true); /* binary body -> data section */
	if (G.o.keys) {
		char k[32];
		int kl = snprintf(k, sizeof k, "key-%u", key);
		pn_data_t *ma = pn_message_annotations(m);
		pn_data_put_map(ma);
		pn_data_enter(ma);
		pn_data_put_symbol(ma, pn_bytes(strlen("x-opt-partition-key"), "x-opt-partition-key"));
		pn_data_put_string(ma, pn_bytes((size_t)kl, k));
		pn_data_exit(ma);
	}
	pn_data_put_binary(pn_message_body(m), pn_bytes(G.o.size, body));
	size_t cap = G.o.size + 512, n = cap;
	char *buf = malloc(cap);
	int rc = buf ? pn_message_encode(m, buf, &n) : PN_OUT_OF_MEMORY;
	pn_message_free(m);
	char *at = rc == 0 ? memmem(buf, n, BENCH_MAGIC, 8) : NULL;
	if (!at) {
		fprintf(stderr, "mqd-bench: cannot encode message template (%d)\n", rc);
		free(buf);
		return -1;
	}
	G.tmpl[key] = (unsigned char *)buf;
	G.tmpl_len[key] = n;
	G.ts_off[key] = (size_t)(at - buf) + 16;
	return 0;
}

static int build_templates(void)
{
	unsigned nk = G.o.keys ? G.o.keys : 1;
	G.tmpl = calloc(nk, sizeof *G.tmpl);
	G.tmpl_len = calloc(nk, sizeof *G.tmpl_len);
	G.ts_off = calloc(nk, sizeof *G.ts_off);
	char *body = malloc(G.o.size);
	if (!G.tmpl || !G.tmpl_len || !G.ts_off || !body)
		return -1;
	memset(body, 'x', G.o.size);
	memcpy(body, BENCH_MAGIC, 8);
	memcpy(body + 8, &G.run_id, 8);
	memset(body + 16, 0, 8);
	for (unsigned k = 0; k < nk; k++)
		if (build_template(k, body) < 0) {
			free(body);
			return -1;
		}
	free(body);
	return 0;
}

/* Faults in the heap the run will use before the clock starts, and keeps it. Proton
 * allocates its deliveries, their buffers and the transport's buffers as a run starts
 * (~3.5 KB per message in flight: ~12 MB with --window 1000 both ways), and on this kind
 * of VM each first touch of a page is a trap of ~12 us: a fresh client
 * spent ~14 us per send for its first thousands of messages, fell behind the pace and
 * read no settlements or deliveries for 10-20 ms, which the first messages of every run
 * measured as latency (the broker had answered them in 3 ms). */
static void prefault_heap(void)
{
	enum { CHUNK = 1u << 20 };
	size_t want = (size_t)G.o.window * G.o.conns * G.o.links * 8192u + (8u << 20);
	if (want > (128u << 20))
		want = 128u << 20;
	size_t n = want / CHUNK;
	void **v = calloc(n, sizeof *v);
	if (!v)
		return;
	mallopt(M_MMAP_THRESHOLD, 2 * CHUNK); /* chunks from the heap, not mmap */
	mallopt(M_TRIM_THRESHOLD, (int)(want + (64u << 20))); /* and the heap kept on free */
	for (size_t i = 0; i < n; i++) {
		volatile char *p = v[i] = malloc(CHUNK);
		for (size_t off = 0; p && off < CHUNK; off += 4096)
			p[off] = 0;
	}
	for (size_t i = n; i-- > 0;)
		free(v[i]);
	free(v);
}

/* ---- sending ---- */
static void send_one(struct blink *bl)
{
	uint64_t seq = G.sent++;
	unsigned k = G.o.keys ? (unsigned)(seq % G.o.keys) : 0;
	unsigned char *t = G.tmpl[k];
	uint64_t wall = wall_ns(), tag[2] = { seq, mono_ns() };
	memcpy(t + G.ts_off[k], &wall, 8);
	pn_delivery_t *d = pn_delivery(bl->l, pn_dtag((const char *)tag, sizeof tag));
	pn_link_send(bl->l, (const char *)t, G.tmpl_len[k]);
	pn_link_advance(bl->l);
	if (G.o.mode == M_TXN) { /* transactional-state(txn-id): part of the open transaction */
		struct btxn *tx = &bl->bc->tx;
		pn_data_t *dd = pn_disposition_data(pn_delivery_local(d));
		pn_data_put_list(dd);
		pn_data_enter(dd);
		pn_data_put_binary(dd, pn_bytes(tx->id_len, tx->id));
		pn_data_exit(dd);
		pn_delivery_update(d, TXN_STATE);
		tx->sent++;
	}
	if (G.o.presettled)
		pn_delivery_settle(d);
	else
		bl->unsettled++;
}

/* --rate: at most this many sends per pump; the rest are sent by later pumps (every
 * settlement, flow and the 1 ms pacing tick pumps). A send is stamped when it is encoded,
 * but the proactor writes a connection's output only after the event batch: a pump that
 * fell behind the pace (a late tick, a batch of deliveries to handle first, a descheduled
 * client, the slow first sends of a run) encoded up to --window messages in one go, so the
 * first of them waited on the client for the last to be encoded (15 ms for the first
 * 1,000 of a run) and reached the broker as one 1 MB burst. A wake of the connection to
 * send the rest does not do: Proton's proactor serves wakes without polling the socket,
 * so a client that stays behind the pace never reads its settlements and deliveries. */
#define PACE_BURST 32

/* --rate: a send is due when the messages sent so far are behind rate x elapsed. */
static bool rate_ok(void)
{
	if (G.o.rate <= 0 || !G.t0)
		return true;
	double due = (double)(mono_ns() - G.t0) / 1e9 * G.o.rate + 1;
	return (double)G.sent < due;
}

/* Messages this link may still send: --count, or in txn mode what is left of the
 * transaction that is open (declared, not yet discharged). */
static bool more_to_send(const struct blink *bl)
{
	if (G.o.mode != M_TXN)
		return G.sent < G.o.count;
	const struct btxn *tx = &bl->bc->tx;
	return bl == tx->snd && tx->id_len && tx->sent < G.o.txn_msgs;
}

static void pump(struct blink *bl)
{
	if (!bl->sender || bl->txn || G.stopping || !G.sending_open)
		return;
	if (pn_link_state(bl->l) != (PN_LOCAL_ACTIVE | PN_REMOTE_ACTIVE))
		return;
	unsigned burst = 0;
	while (more_to_send(bl) && pn_link_credit(bl->l) > 0 &&
	       (G.o.presettled || bl->unsettled < G.o.window) && rate_ok()) {
		if (G.o.rate > 0 && burst++ == PACE_BURST)
			break; /* the rest at the next event or pacing tick (see PACE_BURST) */
		start_clock();
		send_one(bl);
	}
	if (G.o.presettled)
		check_done();
}

static const char *outcome_name(uint64_t st)
{
	switch (st) {
	case PN_ACCEPTED: return "accepted";
	case PN_REJECTED: return "rejected";
	case PN_RELEASED: return "released";
	case PN_MODIFIED: return "modified";
	case 0: return "settled-without-outcome";
	default: return "other";
	}
}

static void txn_settled(struct blink *bl, pn_delivery_t *d, uint64_t st);
static void txn_send(struct blink *bl, int code);

/* Whether a value anywhere in a data tree (depth first) satisfies hit, which may keep
 * what it found through arg (the tree's position is not kept). */
static bool find_value(pn_data_t *data, bool (*hit)(pn_data_t *, void *), void *arg)
{
	while (pn_data_next(data)) {
		pn_type_t t = pn_data_type(data);
		if (hit(data, arg))
			return true;
		if (t == PN_LIST || t == PN_DESCRIBED || t == PN_ARRAY || t == PN_MAP) {
			pn_data_enter(data);
			bool found = find_value(data, hit, arg);
			pn_data_exit(data);
			if (found)
				return true;
		}
	}
	return false;
}

static bool is_accepted_code(pn_data_t *d, void *arg)
{
	(void)arg;
	return pn_data_type(d) == PN_ULONG && pn_data_get_ulong(d) == OUTCOME_ACCEPTED;
}

/* the first binary (the txn-id of `declared`), kept in *(pn_bytes_t *)arg */
static bool is_binary(pn_data_t *d, void *arg)
{
	if (pn_data_type(d) != PN_BINARY)
		return false;
	*(pn_bytes_t *)arg = pn_data_get_binary(d);
	return true;
}

/* A transactional send settles with transactional-state(txn-id, outcome): accepted
 * counts like a plain accepted. */
static uint64_t send_outcome(pn_delivery_t *d, uint64_t st)
{
	if (st != TXN_STATE)
		return st;
	pn_data_t *dd = pn_disposition_data(pn_delivery_remote(d));
	pn_data_rewind(dd);
	return find_value(dd, is_accepted_code, NULL) ? PN_ACCEPTED : PN_REJECTED;
}

static void on_sender_delivery(struct blink *bl, pn_delivery_t *d)
{
	uint64_t st = pn_delivery_remote_state(d);
	if (!pn_delivery_settled(d) && (st == 0 || st == PN_RECEIVED))
		return;
	if (bl->txn) {
		txn_settled(bl, d, st);
		return;
	}
	st = send_outcome(d, st);
	if (G.o.mode == M_TXN) {
		pn_delivery_settle(d);
		if (bl->unsettled)
			bl->unsettled--;
		if (st != PN_ACCEPTED) {
			snprintf(G.err, sizeof G.err, "transactional send: outcome %s", outcome_name(st));
			G.failed++;
			begin_stop(true);
		} else if (++bl->bc->tx.acked == G.o.txn_msgs) {
			txn_send(bl->bc->tx.coord, TXN_DISCHARGE); /* every send of the transaction is in */
		} else {
			pump(bl);
		}
		return;
	}
	pn_delivery_tag_t tag = pn_delivery_tag(d);
	uint64_t tv[2] = { 0, 0 };
	if (tag.size == sizeof tv)
		memcpy(tv, tag.start, sizeof tv);
	if (st == PN_ACCEPTED) {
		G.acked++;
		uint64_t now = mono_ns();
		hist_add(G.o.mode == M_SEND ? &G.h : &G.hack, now - tv[1]);
		lat_note('a', now, now - tv[1]);
	} else {
		if (!G.failed)
			fprintf(stderr, "mqd-bench: first non-accepted outcome: %s%s%s\n", outcome_name(st),
				pn_condition_is_set(pn_disposition_condition(pn_delivery_remote(d))) ? " " : "",
				pn_condition_is_set(pn_disposition_condition(pn_delivery_remote(d)))
					? pn_condition_get_name(pn_disposition_condition(pn_delivery_remote(d)))
					: "");
		G.failed++;
	}
	pn_delivery_settle(d);
	if (bl->unsettled)
		bl->unsettled--;
	if (G.o.mode == M_SEND)
		G.t_end = mono_ns();
	check_done();
	pump(bl);
}

/* ---- receiving ---- */
static void top_up_credit(struct blink *bl)
{
	int cur = pn_link_credit(bl->l);
	if (G.stopping || cur > (int)G.o.window / 2)
		return;
	uint64_t want = G.o.window - (unsigned)cur;
	if (G.o.mode == M_RECV) {
		uint64_t have = G.received + G.credit_out;
		uint64_t left = G.o.count > have ? G.o.count - have : 0;
		if (want > left)
			want = left;
	}
	if (want) {
		pn_link_flow(bl->l, (int)want);
		G.credit_out += want;
	}
}

static void handle_message(const char *msg, size_t len, pn_delivery_t *d)
{
	uint64_t now_wall = wall_ns();
	const char *at = memmem(msg, len, BENCH_MAGIC, 8);
	uint64_t rid = 0, ts = 0;
	if (at && (size_t)(at - msg) + 24 <= len) {
		memcpy(&rid, at + 8, 8);
		memcpy(&ts, at + 16, 8);
	}
	if (G.o.mode == M_RECV) {
		if (G.received >= G.o.count) {
			pn_delivery_update(d, PN_RELEASED);
			pn_delivery_settle(d);
			return;
		}
		start_clock();
		G.received++;
		if (at) { /* a sender's stamp (any run: wall clock, this host): end-to-end latency */
			hist_add(&G.h, now_wall > ts ? now_wall - ts : 0);
			lat_note('r', mono_ns(), now_wall > ts ? now_wall - ts : 0);
		}
	} else if (at && rid == G.run_id) {
		G.received++;
		hist_add(&G.h, now_wall > ts ? now_wall - ts : 0);
		lat_note('r', mono_ns(), now_wall > ts ? now_wall - ts : 0);
	} else {
		G.stale++;
	}
	pn_delivery_update(d, PN_ACCEPTED);
	pn_delivery_settle(d);
}

static void on_receiver_delivery(struct blink *bl, pn_delivery_t *d)
{
	if (!pn_delivery_readable(d))
		return;
	size_t pend = pn_delivery_pending(d);
	if (bl->len + pend > bl->cap) {
		size_t nc = (bl->len + pend) * 2;
		char *nb = realloc(bl->buf, nc);
		if (!nb) {
			snprintf(G.err, sizeof G.err, "out of memory");
			begin_stop(true);
			return;
		}
		bl->buf = nb;
		bl->cap = nc;
	}
	ssize_t n = pn_link_recv(bl->l, bl->buf + bl->len, pend);
	if (n > 0)
		bl->len += (size_t)n;
	if (pn_delivery_partial(d))
		return;
	if (G.credit_out)
		G.credit_out--;
	G.t_last_rx = mono_ns();
	handle_message(bl->buf, bl->len, d);
	bl->len = 0;
	if (G.o.mode == M_RECV || G.o.mode == M_BOTH)
		G.t_end = G.t_last_rx;
	check_done();
	top_up_credit(bl);
}

/* ---- transactions (declare -> discharge(commit)) ---- */
static void txn_send(struct blink *bl, int code)
{
	pn_message_t *m = pn_message();
	pn_data_t *b = pn_message_body(m);
	pn_data_put_described(b);
	pn_data_enter(b);
	pn_data_put_ulong(b, (uint64_t)code);
	pn_data_put_list(b);
	pn_data_enter(b);
	if (code == TXN_DISCHARGE) {
		pn_data_put_binary(b, pn_bytes(bl->bc->tx.id_len, bl->bc->tx.id));
		pn_data_put_bool(b, false);
	}
	pn_data_exit(b);
	pn_data_exit(b);
	char buf[256];
	size_t n = sizeof buf;
	if (pn_message_encode(m, buf, &n) == 0) {
		uint64_t seq = G.sent++;
		pn_delivery(bl->l, pn_dtag((const char *)&seq, sizeof seq));
		pn_link_send(bl->l, buf, n);
		pn_link_advance(bl->l);
	}
	pn_message_free(m);
}

/* Declares this connection's next transaction, if any are left to run. */
static void txn_begin(struct blink *coord)
{
	struct btxn *tx = &coord->bc->tx;
	if (G.txn_begun >= G.o.count || G.failed || G.stopping)
		return;
	G.txn_begun++;
	tx->t0 = mono_ns();
	txn_send(coord, TXN_DECLARE);
}

static void txn_settled(struct blink *bl, pn_delivery_t *d, uint64_t st)
{
	struct btxn *tx = &bl->bc->tx;
	pn_disposition_t *rd = pn_delivery_remote(d);
	pn_bytes_t id = { 0, NULL };
	if (st == TXN_DECLARED) {
		pn_data_t *dd = pn_disposition_data(rd);
		pn_data_rewind(dd);
		if (find_value(dd, is_binary, &id) && id.size <= sizeof tx->id) {
			memcpy(tx->id, id.start, id.size);
			tx->id_len = id.size;
			pn_delivery_settle(d);
			tx->sent = tx->acked = 0;
			if (tx->snd)
				pump(tx->snd); /* the transaction's sends; the last one's settlement discharges */
			else
				txn_send(bl, TXN_DISCHARGE);
			return;
		}
	}
	if (st == PN_ACCEPTED && tx->id_len) { /* discharge done */
		G.acked++;
		G.txn_msgs_done += tx->acked;
		hist_add(&G.h, mono_ns() - tx->t0);
		G.t_end = mono_ns();
	} else {
		set_err("transaction", pn_disposition_condition(rd));
		if (!G.err[0])
			snprintf(G.err, sizeof G.err, "transaction: unexpected outcome %s", outcome_name(st));
		G.failed++;
	}
	pn_delivery_settle(d);
	tx->id_len = 0;
	if (G.acked + G.failed >= G.o.count || G.failed)
		begin_stop(G.failed > 0);
	else
		txn_begin(bl);
}

/* The coordinator or the sender is attached: the first declare once both are. */
static void txn_link_up(struct bconn *bc)
{
	struct btxn *tx = &bc->tx;
	bool up = pn_link_state(tx->coord->l) == (PN_LOCAL_ACTIVE | PN_REMOTE_ACTIVE) &&
		  pn_terminus_get_type(pn_link_remote_target(tx->coord->l)) == PN_COORDINATOR;
	if (tx->snd && pn_link_state(tx->snd->l) != (PN_LOCAL_ACTIVE | PN_REMOTE_ACTIVE))
		up = false;
	if (!up || tx->started)
		return; /* a refused coordinator: the broker's detach follows */
	tx->started = true;
	start_clock();
	txn_begin(tx->coord);
}

/* ---- connection / link setup ---- */
static void open_link(struct bconn *bc, pn_session_t *s, unsigned i, bool sender, bool txn)
{
	char name[96];
	snprintf(name, sizeof name, "mqd-bench-%" PRIx64 "-%s-%td-%u", G.run_id, txn ? "txn" : sender ? "snd" : "rcv",
		 bc - G.conns, i);
	struct blink *bl = &bc->links[bc->nlinks++];
	memset(bl, 0, sizeof *bl);
	bl->bc = bc;
	bl->sender = sender;
	bl->txn = txn;
	bl->l = sender ? pn_sender(s, name) : pn_receiver(s, name);
	pn_link_set_context(bl->l, bl);
	if (txn) {
		pn_terminus_set_type(pn_link_target(bl->l), PN_COORDINATOR);
		pn_data_t *caps = pn_terminus_capabilities(pn_link_target(bl->l));
		pn_data_put_symbol(caps, pn_bytes(strlen("amqp:local-transactions"), "amqp:local-transactions"));
		pn_link_set_snd_settle_mode(bl->l, PN_SND_UNSETTLED);
	} else if (sender) {
		pn_terminus_set_address(pn_link_target(bl->l), G.o.address);
		pn_link_set_snd_settle_mode(bl->l, G.o.presettled ? PN_SND_SETTLED : PN_SND_UNSETTLED);
	} else {
		pn_terminus_set_address(pn_link_source(bl->l), G.o.source);
		pn_link_set_rcv_settle_mode(bl->l, PN_RCV_FIRST);
		if (G.o.offset_spec) {
			pn_data_t *f = pn_terminus_filter(pn_link_source(bl->l));
			pn_data_put_map(f);
			pn_data_enter(f);
			pn_data_put_symbol(f, pn_bytes(strlen("rabbitmq:stream-offset-spec"), "rabbitmq:stream-offset-spec"));
			pn_data_put_string(f, pn_bytes(strlen(G.o.offset_spec), G.o.offset_spec));
			pn_data_exit(f);
		}
	}
	pn_link_open(bl->l);
}

static void on_connection_init(struct bconn *bc)
{
	pn_connection_t *c = bc->c;
	char cid[64];
	snprintf(cid, sizeof cid, "mqd-bench-%" PRIx64 "-%td", G.run_id, bc - G.conns);
	pn_connection_set_container(c, cid);
	pn_connection_set_hostname(c, G.o.host);
	pn_connection_open(c);
	pn_session_t *s = pn_session(c);
	pn_session_open(s);
	if (G.o.mode == M_TXN) {
		open_link(bc, s, 0, true, true);
		bc->tx.coord = &bc->links[0];
		if (G.o.txn_msgs) {
			open_link(bc, s, 0, true, false);
			bc->tx.snd = &bc->links[1];
		}
		return;
	}
	for (unsigned i = 0; i < G.o.links; i++) {
		if (G.o.mode == M_RECV || G.o.mode == M_BOTH)
			open_link(bc, s, i, false, false);
		if (G.o.mode == M_SEND || G.o.mode == M_BOTH)
			open_link(bc, s, i, true, false);
	}
}

static void pump_conn(struct bconn *bc)
{
	for (unsigned i = 0; i < bc->nlinks; i++)
		pump(&bc->links[i]);
}

static void on_link_remote_open(pn_link_t *l, struct blink *bl)
{
	if (G.o.mode == M_TXN) {
		txn_link_up(bl->bc);
		return;
	}
	if (bl->sender) {
		pump(bl);
		return;
	}
	top_up_credit(bl);
	if (++G.receivers_ready == G.receivers_total && !G.sending_open) {
		G.sending_open = true; /* `both`: send only once every receiver is attached */
		for (unsigned i = 0; i < G.o.conns; i++)
			if (G.conns[i].c && !G.conns[i].closed)
				pn_connection_wake(G.conns[i].c);
	}
	(void)l;
}

static void on_link_remote_close(pn_link_t *l, struct blink *bl)
{
	pn_condition_t *rc = pn_link_remote_condition(l);
	if (G.stopping && !(bl && bl->txn && !G.acked)) {
		pn_link_close(l);
		return;
	}
	if (bl && bl->txn) {
		G.txn_refused = true;
		set_err("coordinator attach refused", rc);
	} else {
		set_err(bl && bl->sender ? "sender link closed by broker" : "receiver link closed by broker", rc);
		if (!G.err[0])
			snprintf(G.err, sizeof G.err, "link closed by broker");
	}
	pn_link_close(l);
	begin_stop(true);
}

static void on_transport_closed(pn_event_t *e, struct bconn *bc)
{
	pn_transport_t *t = pn_event_transport(e);
	if (!G.stopping) {
		set_err("connection", pn_transport_condition(t));
		if (!G.err[0])
			snprintf(G.err, sizeof G.err, "connection closed unexpectedly");
		begin_stop(true);
	}
	if (bc && !bc->closed) {
		bc->closed = true;
		if (--G.open_conns == 0) {
			if (!G.t_end)
				G.t_end = mono_ns();
			G.finished = true;
		}
	}
}

static void on_tick(void)
{
	uint64_t now = mono_ns();
	double el = (double)(now - G.t_start_prog) / 1e9;
	if (G.stopping) {
		if (now - G.t_stop > CLOSE_GRACE_NS)
			G.finished = true;
	} else if (G.o.cap > 0 && el >= G.o.cap) {
		fprintf(stderr, "mqd-bench: --duration-cap %.1f s reached\n", G.o.cap);
		begin_stop(true);
	} else if (G.o.idle > 0 && G.t_last_rx && (double)(now - G.t_last_rx) / 1e9 >= G.o.idle) {
		fprintf(stderr, "mqd-bench: nothing received for %.1f s (--idle)\n", G.o.idle);
		begin_stop(true);
	}
	static uint64_t last_print;
	if (!G.o.quiet && now - last_print >= 1000000000ULL) {
		last_print = now;
		fprintf(stderr, "  t=%5.1fs sent=%" PRIu64 " accepted=%" PRIu64 " failed=%" PRIu64
				" received=%" PRIu64 "\n", el, G.sent, G.acked, G.failed, G.received);
	}
	if (G.o.rate > 0 && !G.stopping) /* paced sending: look again every millisecond */
		for (unsigned i = 0; i < G.o.conns; i++)
			if (G.conns[i].c && !G.conns[i].closed)
				pn_connection_wake(G.conns[i].c);
	if (!G.finished)
		pn_proactor_set_timeout(G.p, G.o.rate > 0 ? 1 : TICK_MS);
}

static struct bconn *event_conn(pn_event_t *e)
{
	pn_connection_t *c = pn_event_connection(e);
	return c ? (struct bconn *)pn_connection_get_context(c) : NULL;
}

static void handle(pn_event_t *e)
{
	struct bconn *bc = event_conn(e);
	pn_link_t *l = pn_event_link(e);
	struct blink *bl = l ? (struct blink *)pn_link_get_context(l) : NULL;
	switch (pn_event_type(e)) {
	case PN_CONNECTION_INIT: on_connection_init(bc); break;
	case PN_CONNECTION_WAKE:
		if (G.stopping && bc && !(pn_connection_state(bc->c) & PN_LOCAL_CLOSED))
			pn_connection_close(bc->c);
		else if (bc)
			pump_conn(bc);
		break;
	case PN_LINK_REMOTE_OPEN: if (bl) on_link_remote_open(l, bl); break;
	case PN_LINK_FLOW: if (bl && bl->sender) pump(bl); break;
	case PN_DELIVERY:
		if (bl && bl->sender)
			on_sender_delivery(bl, pn_event_delivery(e));
		else if (bl)
			on_receiver_delivery(bl, pn_event_delivery(e));
		break;
	case PN_LINK_REMOTE_CLOSE:
	case PN_LINK_REMOTE_DETACH: on_link_remote_close(l, bl); break;
	case PN_CONNECTION_REMOTE_CLOSE:
		if (!G.stopping)
			set_err("connection closed by broker", pn_connection_remote_condition(bc->c));
		begin_stop(true);
		if (!(pn_connection_state(bc->c) & PN_LOCAL_CLOSED))
			pn_connection_close(bc->c);
		break;
	case PN_TRANSPORT_CLOSED: on_transport_closed(e, bc); break;
	case PN_PROACTOR_TIMEOUT: on_tick(); break;
	case PN_PROACTOR_INACTIVE: G.finished = true; break;
	default: break;
	}
}

/* ---- options ---- */
static void usage(FILE *f)
{
	fprintf(f,
		"usage: mqd-bench MODE [options]   (MODE: send | recv | both | txn)\n"
		"  --url URL            amqp://[user:pass@]host[:port] (default amqp://127.0.0.1:5672;\n"
		"                       SASL ANONYMOUS, or PLAIN when a user is given)\n"
		"  --address T          target (and default source) address (default bench)\n"
		"  --source S           receivers' source address (default: --address)\n"
		"  --offset-spec SPEC   receivers send filter rabbitmq:stream-offset-spec=SPEC (first|last|next)\n"
		"  --count N            messages (txn: transactions) (default 100000)\n"
		"  --txn-msgs K         txn: K transactional sends to --address in each transaction (default 0)\n"
		"  --size BYTES         body size, >= %d (default 1024)\n"
		"  --window N           max unsettled sends in flight, and receiver credit, per link (default 1000)\n"
		"  --rate N             send at most N messages/s in total (paced; default: as fast as possible)\n"
		"  --durable            header durable=true\n"
		"  --presettled         send presettled (at-most-once); no send latency\n"
		"  --connections N      connections (default 1)\n"
		"  --links N            senders (and/or receivers) per connection (default 1)\n"
		"  --keys N             x-opt-partition-key cycling over N keys (default 0: none)\n"
		"  --duration-cap S     hard stop after S seconds (default 300)\n"
		"  --idle S             stop when nothing was received for S seconds (recv/both; default 0: off)\n"
		"  --broker-pid PID     report the broker's CPU seconds and %% over the run\n"
		"  --latency-log FILE   write every latency sample (kind, time, ms) to FILE after the run\n"
		"  --quiet              no progress lines on stderr\n",
		BODY_MIN);
}

static int parse_url(const char *url)
{
	const char *s = url;
	if (strncmp(s, "amqp://", 7) == 0)
		s += 7;
	else if (strstr(s, "://"))
		return -1;
	const char *at = strchr(s, '@');
	if (at) {
		const char *colon = memchr(s, ':', (size_t)(at - s));
		const char *uend = colon ? colon : at;
		snprintf(G.o.user, sizeof G.o.user, "%.*s", (int)(uend - s), s);
		if (colon)
			snprintf(G.o.pass, sizeof G.o.pass, "%.*s", (int)(at - colon - 1), colon + 1);
		s = at + 1;
	}
	size_t hl = strcspn(s, ":/");
	snprintf(G.o.host, sizeof G.o.host, "%.*s", (int)hl, s);
	if (s[hl] == ':')
		snprintf(G.o.port, sizeof G.o.port, "%.*s", (int)strcspn(s + hl + 1, "/"), s + hl + 1);
	else
		snprintf(G.o.port, sizeof G.o.port, "5672");
	return G.o.host[0] ? 0 : -1;
}

static int parse_mode(const char *m)
{
	for (unsigned i = 0; i < 4; i++)
		if (strcmp(m, mode_names[i]) == 0) {
			G.o.mode = (enum mode)i;
			return 0;
		}
	return -1;
}

static unsigned long long num_arg(const char *s, const char *name, unsigned long long min)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 10);
	if (*s == '-' || *end || v < min) {
		fprintf(stderr, "mqd-bench: bad value for --%s: %s\n", name, s);
		exit(2);
	}
	return v;
}

static int parse_args(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "url", 1, 0, 'u' },        { "address", 1, 0, 'a' }, { "source", 1, 0, 'S' },
		{ "count", 1, 0, 'n' },      { "size", 1, 0, 's' },    { "window", 1, 0, 'w' },      { "rate", 1, 0, 'R' },
		{ "durable", 0, 0, 'd' },    { "presettled", 0, 0, 'P' }, { "connections", 1, 0, 'c' },
		{ "links", 1, 0, 'l' },      { "keys", 1, 0, 'k' },    { "duration-cap", 1, 0, 'C' },
		{ "idle", 1, 0, 'i' },       { "broker-pid", 1, 0, 'b' }, { "offset-spec", 1, 0, 'o' },
		{ "quiet", 0, 0, 'q' },      { "help", 0, 0, 'h' },    { "latency-log", 1, 0, 'L' },
		{ "txn-msgs", 1, 0, 'T' },
		{ 0, 0, 0, 0 },
	};
	const char *url = "amqp://127.0.0.1:5672";
	G.o = (struct opts){ .address = "bench", .count = 100000, .size = 1024, .window = 1000,
			     .conns = 1, .links = 1, .cap = 300 };
	int ch;
	while ((ch = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (ch) {
		case 'u': url = optarg; break;
		case 'a': G.o.address = optarg; break;
		case 'S': G.o.source = optarg; break;
		case 'n': G.o.count = num_arg(optarg, "count", 1); break;
		case 's': G.o.size = num_arg(optarg, "size", BODY_MIN); break;
		case 'w': G.o.window = (unsigned)num_arg(optarg, "window", 1); break;
		case 'R': G.o.rate = (double)num_arg(optarg, "rate", 1); break;
		case 'd': G.o.durable = true; break;
		case 'P': G.o.presettled = true; break;
		case 'c': G.o.conns = (unsigned)num_arg(optarg, "connections", 1); break;
		case 'l': G.o.links = (unsigned)num_arg(optarg, "links", 1); break;
		case 'k': G.o.keys = (unsigned)num_arg(optarg, "keys", 0); break;
		case 'C': G.o.cap = atof(optarg); break;
		case 'i': G.o.idle = atof(optarg); break;
		case 'b': G.o.broker_pid = (long)num_arg(optarg, "broker-pid", 1); break;
		case 'o': G.o.offset_spec = optarg; break;
		case 'q': G.o.quiet = true; break;
		case 'L': G.o.lat_log = optarg; break;
		case 'T': G.o.txn_msgs = (unsigned)num_arg(optarg, "txn-msgs", 0); break;
		case 'h': usage(stdout); exit(0);
		default: usage(stderr); return -1;
		}
	}
	if (optind != argc - 1 || parse_mode(argv[optind]) < 0 || parse_url(url) < 0 ||
	    G.o.window > 1000000 || G.o.conns > 1000 || G.o.links > 1000 || G.o.keys > 1000000 ||
	    G.o.txn_msgs > 1000000) {
		usage(stderr);
		return -1;
	}
	if (!G.o.source)
		G.o.source = G.o.address;
	return 0;
}

/* ---- report ---- */
static void fmt_ms(char *b, size_t n, bool have, double v)
{
	if (have)
		snprintf(b, n, "%.3f", v);
	else
		snprintf(b, n, "na");
}

static void report(void)
{
	uint64_t end = G.t_end ? G.t_end : mono_ns();
	double secs = G.t0 && end > G.t0 ? (double)(end - G.t0) / 1e9 : 0;
	bool txn_msgs = G.o.mode == M_TXN && G.o.txn_msgs;
	uint64_t msgs = G.o.mode == M_RECV || G.o.mode == M_BOTH ? G.received
			: (G.o.mode == M_SEND && G.o.presettled) ? G.sent
			: txn_msgs ? G.txn_msgs_done : G.acked;
	double rate = secs > 0 ? (double)msgs / secs : 0;
	double mbps = G.o.mode == M_TXN && !txn_msgs ? 0 : rate * (double)G.o.size / 1e6;
	bool lat = G.h.n > 0;
	char p50[32], p99[32], p999[32], mx[32], bcpu[32], bsec[32];
	fmt_ms(p50, sizeof p50, lat, hist_pct_ms(&G.h, 0.50));
	fmt_ms(p99, sizeof p99, lat, hist_pct_ms(&G.h, 0.99));
	fmt_ms(p999, sizeof p999, lat, hist_pct_ms(&G.h, 0.999));
	fmt_ms(mx, sizeof mx, lat, (double)G.h.max / 1e6);
	bool have_cpu = G.o.broker_pid > 0 && G.cpu0 >= 0 && G.cpu1 >= G.cpu0 && secs > 0;
	double cs = have_cpu ? (double)(G.cpu1 - G.cpu0) / (double)sysconf(_SC_CLK_TCK) : 0;
	snprintf(bcpu, sizeof bcpu, have_cpu ? "%.1f" : "na", cs / (secs > 0 ? secs : 1) * 100);
	snprintf(bsec, sizeof bsec, have_cpu ? "%.2f" : "na", cs);
	double ccpu = secs > 0 ? (self_cpu_secs() - G.rus0) / secs * 100 : 0;
	const char *what = G.o.mode == M_SEND ? "send->accepted" : G.o.mode == M_BOTH ? "send->receive"
			   : G.o.mode == M_TXN ? "declare->discharge" : "sender stamp->receive";
	printf("mqd-bench %s: %" PRIu64 " %s in %.3f s (size %zu B, %s, %s, window %u, %ux%u links, keys %u)%s\n",
	       mode_names[G.o.mode], msgs, G.o.mode == M_TXN && !txn_msgs ? "txns" : "msgs", secs, G.o.size,
	       G.o.durable ? "durable" : "non-durable", G.o.presettled ? "presettled" : "unsettled",
	       G.o.window, G.o.conns, G.o.links, G.o.keys, G.early ? " [STOPPED EARLY]" : "");
	printf("  throughput: %.0f msg/s, %.2f MB/s (payload, 1 MB = 10^6 B)\n", rate, mbps);
	if (txn_msgs)
		printf("  transactions: %" PRIu64 " of %u messages each, %.0f txn/s\n", G.acked, G.o.txn_msgs,
		       secs > 0 ? (double)G.acked / secs : 0);
	printf("  latency %s: p50 %s ms, p99 %s ms, p99.9 %s ms, max %s ms (%" PRIu64 " samples)\n",
	       what, p50, p99, p999, mx, G.h.n);
	if (G.o.mode == M_BOTH && G.hack.n)
		printf("  latency send->accepted: p50 %.3f ms, p99 %.3f ms, p99.9 %.3f ms, max %.3f ms\n",
		       hist_pct_ms(&G.hack, 0.50), hist_pct_ms(&G.hack, 0.99), hist_pct_ms(&G.hack, 0.999),
		       (double)G.hack.max / 1e6);
	printf("  not accepted: %" PRIu64 ", stale (other runs): %" PRIu64 "\n", G.failed, G.stale);
	printf("  broker cpu: %s s (%s %%), mqd-bench cpu: %.1f %%\n", bsec, bcpu, ccpu);
	if (G.err[0])
		printf("  error: %s\n", G.err);
	printf("RESULT mode=%s msgs=%" PRIu64 " secs=%.3f msgs_per_s=%.1f mb_per_s=%.3f p50_ms=%s p99_ms=%s"
	       " p999_ms=%s max_ms=%s broker_cpu_pct=%s broker_cpu_s=%s client_cpu_pct=%.1f failed=%" PRIu64
	       " stale=%" PRIu64 " size=%zu durable=%d presettled=%d window=%u connections=%u links=%u keys=%u"
	       " complete=%d",
	       mode_names[G.o.mode], msgs, secs, rate, mbps, p50, p99, p999, mx, bcpu, bsec, ccpu, G.failed,
	       G.stale, G.o.size, G.o.durable, G.o.presettled, G.o.window, G.o.conns, G.o.links, G.o.keys,
	       !G.early && !G.err[0]);
	if (G.o.mode == M_BOTH && G.hack.n)
		printf(" ack_p50_ms=%.3f ack_p99_ms=%.3f ack_p999_ms=%.3f", hist_pct_ms(&G.hack, 0.50),
		       hist_pct_ms(&G.hack, 0.99), hist_pct_ms(&G.hack, 0.999));
	if (txn_msgs)
		printf(" txn_msgs=%u txns=%" PRIu64 " txns_per_s=%.1f", G.o.txn_msgs, G.acked,
		       secs > 0 ? (double)G.acked / secs : 0);
	printf("\n");
	fflush(stdout);
}

static void connect_all(void)
{
	char addr[PN_MAX_ADDR];
	pn_proactor_addr(addr, sizeof addr, G.o.host, G.o.port);
	G.conns = calloc(G.o.conns, sizeof *G.conns);
	unsigned per = G.o.mode == M_BOTH ? 2 * G.o.links : G.o.mode == M_TXN ? 2 : G.o.links;
	for (unsigned i = 0; i < G.o.conns; i++) {
		struct bconn *bc = &G.conns[i];
		bc->links = calloc(per, sizeof *bc->links);
		bc->c = pn_connection();
		pn_connection_set_context(bc->c, bc);
		pn_transport_t *t = pn_transport();
		pn_sasl_t *sasl = pn_sasl(t);
		if (G.o.user[0]) {
			pn_connection_set_user(bc->c, G.o.user);
			pn_connection_set_password(bc->c, G.o.pass);
			pn_sasl_set_allow_insecure_mechs(sasl, true);
			pn_sasl_allowed_mechs(sasl, "PLAIN");
		} else {
			pn_sasl_allowed_mechs(sasl, "ANONYMOUS");
		}
		G.open_conns++;
		pn_proactor_connect2(G.p, bc->c, t, addr);
	}
}

int main(int argc, char **argv)
{
	if (parse_args(argc, argv) < 0)
		return 2;
	G.run_id = wall_ns() ^ ((uint64_t)getpid() << 32);
	if ((G.o.mode != M_TXN || G.o.txn_msgs) && build_templates() < 0)
		return 1;
	G.receivers_total = (G.o.mode == M_RECV || G.o.mode == M_BOTH) ? G.o.conns * G.o.links : 0;
	G.sending_open = G.o.mode != M_BOTH;
	if (G.o.lat_log && G.o.mode != M_TXN && !(G.lat = calloc(2 * G.o.count, sizeof *G.lat))) {
		fprintf(stderr, "mqd-bench: --latency-log: out of memory\n");
		return 1;
	}
	if (G.lat) /* fault it in now, not one page per ~170 samples during the run */
		memset(G.lat, 0, 2 * G.o.count * sizeof *G.lat);
	prefault_heap();
	G.p = pn_proactor();
	G.t_start_prog = mono_ns();
	connect_all();
	/* paced: the 1 ms tick from the start. With the first tick at TICK_MS, a client whose
	 * settlements came back before its next send was due sent nothing until 250 ms, then
	 * the 2,500 messages it was behind in one burst (at 10k msgs/s, 5 % of the samples). */
	pn_proactor_set_timeout(G.p, G.o.rate > 0 ? 1 : TICK_MS);
	while (!G.finished) {
		pn_event_batch_t *b = pn_proactor_wait(G.p);
		pn_event_t *e;
		while ((e = pn_event_batch_next(b)))
			handle(e);
		pn_proactor_done(G.p, b);
	}
	if (G.o.broker_pid > 0 && G.o.mode == M_SEND && G.o.presettled)
		G.cpu1 = proc_cpu_ticks(G.o.broker_pid); /* the run ends when the broker has read it all */
	if (G.o.mode == M_TXN && G.txn_refused) {
		printf("txn: not supported by this broker yet (%s)\n", G.err[0] ? G.err : "coordinator attach refused");
		report();
		return 4;
	}
	report();
	lat_dump();
	pn_proactor_free(G.p);
	if (G.err[0] && !(G.o.mode == M_RECV && G.received >= G.o.count))
		return 1;
	return G.early ? 3 : 0;
}
