/* A group's assignment with local-only members (mqd:fwd-local-only, issue 33; group.c's
 * rebalance): each node assigns only the partitions it leads (mqd_part_led), exclusively,
 * among its local-only links, ordered by a hash of their name and the node's id, so the
 * members' legs on three leaders get spread partitions; a group without local-only
 * members keeps join order. Three servers without sockets play the three leaders. */
#include "config.h"
#include "group/group.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "../server_fixture.h"

#define NPARTS 6

typedef struct node {
    char dir[64];
    mqd_server_t *s;
    mqd_topic_t *t;
    mqd_group_t *g;
} node_t;

static void rmtree(const char *dir)
{
    char cmd[sizeof ((node_t *)0)->dir + 16];
    snprintf(cmd, sizeof cmd, "rm -rf '%.63s'", dir);
    assert_int_equal(system(cmd), 0);
}

static void node_open(node_t *n, uint32_t id)
{
    char kv[32];
    snprintf(n->dir, sizeof n->dir, "/tmp/mqd-test-spread-%d-%u", (int)getpid(), id);
    rmtree(n->dir);
    snprintf(kv, sizeof kv, "node_id=%u", id);
    const char *kvs[] = {kv, NULL};
    n->s = fx_server_open(n->dir, kvs);
    assert_int_equal(mqd_topic_get(n->s, "t", true, NPARTS, &n->t), 0);
    assert_int_equal(mqd_group_get(n->t, "g", &n->g), 0);
}

static void node_close(node_t *n)
{
    fx_server_close(n->s);
    rmtree(n->dir);
}

static mqd_lstate_t *leg(node_t *n, const char *name, bool local_only)
{
    mqd_lstate_t *ls = mqd_ls_alloc(MQD_LS_CONSUMER, NULL, NULL);
    assert_non_null(ls);
    mqd_ls_set_name(ls, name);
    mqd_ls_set_local_only(ls, local_only);
    assert_int_equal(mqd_group_join(n->g, ls), 0);
    return ls;
}

static void leg_gone(node_t *n, mqd_lstate_t *ls)
{
    mqd_group_leave(n->g, ls);
    mqd_ls_dealloc(ls);
}

/* Node `id` leads partition p when p % 3 + 1 == id. */
static void lead_share(node_t *n, uint32_t id)
{
    for (uint32_t p = 0; p < NPARTS; p++)
        if (p % 3 + 1 == id) {
            mqd_part_set_led(mqd_topic_part(n->t, p), true);
            mqd_groups_lead_moved(n->t, p);
        }
}

typedef struct owners {
    const char *name[NPARTS];
} owners_t;

static int owner_cb(const mqd_group_part_info_t *pi, void *arg)
{
    owners_t *o = arg;
    o->name[pi->partition] = pi->owner;
    return 0;
}

static owners_t owners(node_t *n)
{
    owners_t o;
    memset(&o, 0, sizeof o);
    assert_int_equal(mqd_group_describe(n->t, "g", owner_cb, &o), 0);
    return o;
}

/* Three leaders, three members with a leg on each: every led partition has one owner,
 * on its leader only; each member gets a partition overall. */
static void test_spread_over_leaders(void **state)
{
    static const char *const names[] = {"mqd-fwd-1/m1", "mqd-fwd-2/m2", "mqd-fwd-3/m3"};
    node_t n[3];
    mqd_lstate_t *ls[3][3];
    int per_member[3] = {0, 0, 0};
    for (uint32_t i = 0; i < 3; i++) {
        node_open(&n[i], i + 1);
        for (int m = 0; m < 3; m++)
            ls[i][m] = leg(&n[i], names[m], true);
        owners_t before = owners(&n[i]);
        for (uint32_t p = 0; p < NPARTS; p++)
            assert_null(before.name[p]); /* nothing led yet: nothing assigned */
        lead_share(&n[i], i + 1);
        owners_t o = owners(&n[i]);
        const char *seen = NULL;
        for (uint32_t p = 0; p < NPARTS; p++) {
            if (p % 3 != i) {
                assert_null(o.name[p]);
                continue;
            }
            assert_non_null(o.name[p]);
            if (seen) /* a node's two partitions go to two members */
                assert_string_not_equal(seen, o.name[p]);
            seen = o.name[p];
            for (int m = 0; m < 3; m++)
                per_member[m] += strcmp(o.name[p], names[m]) == 0;
        }
    }
    for (int m = 0; m < 3; m++)
        assert_true(per_member[m] >= 1);
    assert_int_equal(per_member[0] + per_member[1] + per_member[2], NPARTS);
    for (uint32_t i = 0; i < 3; i++) {
        for (int m = 0; m < 3; m++)
            leg_gone(&n[i], ls[i][m]);
        node_close(&n[i]);
    }
    (void)state;
}

/* A leg leaves: the partitions led here go to the other leg; the lead of one of them
 * leaves this node: it is nobody's here, the other stays where it was. */
static void test_leave_and_lead_lost(void **state)
{
    node_t n;
    node_open(&n, 1);
    mqd_lstate_t *a = leg(&n, "x/a", true), *b = leg(&n, "x/b", true);
    lead_share(&n, 1); /* partitions 0 and 3 */
    owners_t o = owners(&n);
    assert_string_not_equal(o.name[0], o.name[3]);
    leg_gone(&n, a);
    o = owners(&n);
    assert_string_equal(o.name[0], "x/b");
    assert_string_equal(o.name[3], "x/b");
    mqd_part_set_led(mqd_topic_part(n.t, 3), false);
    mqd_groups_lead_moved(n.t, 3);
    o = owners(&n);
    assert_string_equal(o.name[0], "x/b");
    assert_null(o.name[3]);
    leg_gone(&n, b);
    node_close(&n);
    (void)state;
}

/* No local-only member: join order over every partition, led or not, as on one node. */
static void test_plain_members_join_order(void **state)
{
    node_t n;
    node_open(&n, 2);
    mqd_lstate_t *a = leg(&n, "x/zz", false), *b = leg(&n, "x/aa", false);
    owners_t o = owners(&n);
    for (uint32_t p = 0; p < NPARTS; p++)
        assert_string_equal(o.name[p], p % 2 ? "x/aa" : "x/zz");
    leg_gone(&n, a);
    leg_gone(&n, b);
    node_close(&n);
    (void)state;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spread_over_leaders),
        cmocka_unit_test(test_leave_and_lead_lost),
        cmocka_unit_test(test_plain_members_join_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
