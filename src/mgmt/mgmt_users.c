/* Read-only management of who may do what: com.mqd:user QUERY (the [user] sections: name,
 * groups and which credentials exist, never the credentials) and com.mqd:acl QUERY (the
 * [acl] rules in order, first match wins). As configured now (after the last reload). */
#include "config.h"
#include "mgmt/mgmt_int.h"
#include "core/core.h"

#include <string.h>

static int user_query(mqd_mgmt_req_t *r)
{
    const mqd_conf_t *conf = mqd_srv_conf(r->s);
    pn_data_put_list(r->out);
    pn_data_enter(r->out);
    for (size_t i = 0; i < conf->n_users; i++) {
        const mqd_user_conf_t *u = &conf->users[i];
        pn_data_put_map(r->out);
        pn_data_enter(r->out);
        mqd_mgmt_kv_str(r->out, "name", u->name);
        mqd_mgmt_kv_str(r->out, "groups", u->groups ? u->groups : "");
        mqd_mgmt_kv_bool(r->out, "password", u->password_hash != NULL);
        mqd_mgmt_kv_bool(r->out, "scram_sha256", u->scram_sha256 != NULL);
        mqd_mgmt_kv_str(r->out, "cert_cn", u->cert_cn);
        pn_data_exit(r->out);
    }
    pn_data_exit(r->out);
    return 200;
}

static int acl_query(mqd_mgmt_req_t *r)
{
    const mqd_conf_t *conf = mqd_srv_conf(r->s);
    pn_data_put_map(r->out);
    pn_data_enter(r->out);
    mqd_mgmt_kv_bool(r->out, "present", conf->acl_present);
    mqd_mgmt_kv_enter(r->out, "rules", true);
    for (size_t i = 0; i < conf->n_acl; i++) {
        const mqd_acl_rule_t *a = &conf->acl[i];
        const char *names[8];
        size_t n = mqd_conf_perm_names(a->perms, names, MQD_ARRAY_LEN(names));
        pn_data_put_map(r->out);
        pn_data_enter(r->out);
        mqd_mgmt_kv_str(r->out, "action", a->allow ? "allow" : "deny");
        mqd_mgmt_kv_str(r->out, "who", a->who);
        mqd_mgmt_kv_enter(r->out, "rights", true);
        for (size_t k = 0; k < n; k++)
            pn_data_put_string(r->out, pn_bytes(strlen(names[k]), names[k]));
        pn_data_exit(r->out);
        mqd_mgmt_kv_str(r->out, "pattern", a->pattern);
        pn_data_exit(r->out);
    }
    pn_data_exit(r->out);
    pn_data_exit(r->out);
    return 200;
}

const mqd_mgmt_op_t mqd_mgmt_user_ops[] = {
    {MQD_MGMT_T_USER, "QUERY", user_query, MQD_MGMT_NODE_READ},
    {MQD_MGMT_T_ACL, "QUERY", acl_query, MQD_MGMT_NODE_READ},
};
const size_t mqd_mgmt_n_user_ops = MQD_ARRAY_LEN(mqd_mgmt_user_ops);
