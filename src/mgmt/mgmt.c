/* The management node: filled in by the operations work (see mgmt.h). */
#include "config.h"
#include "mgmt/mgmt.h"

int mqd_mgmt_handle(struct mqd_server *s, struct mqd_conn *c, const uint8_t *req, size_t len,
                    mqd_buf_t *out)
{
    MQD_UNUSED(s);
    MQD_UNUSED(c);
    MQD_UNUSED(req);
    MQD_UNUSED(len);
    MQD_UNUSED(out);
    return MQD_ENOENT;
}
