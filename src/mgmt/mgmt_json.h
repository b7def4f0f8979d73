/* mgmt_json: AMQP values (pn_data_t) <-> jansson, shared by the `$management` node and
 * mqctl. Bounded: nesting deeper than MQD_MGMT_JSON_DEPTH is refused, so a hostile
 * request cannot recurse without limit. */
#ifndef MQD_MGMT_JSON_H
#define MQD_MGMT_JSON_H

#include <jansson.h>
#include <proton/codec.h>

#define MQD_MGMT_JSON_DEPTH 8

/* The value at d's current node as a new JSON value (caller owns it), or NULL for a type
 * with no JSON form (or too deep). Maps become objects (keys: string/symbol only,
 * others skipped), lists and arrays become arrays, timestamps integers (ms), binary a
 * string when it is UTF-8-clean enough to print, symbols strings, uuids/decimals null. */
json_t *mqd_mgmt_data_to_json(pn_data_t *d, int depth);

/* Decodes one encoded AMQP value (a described section is unwrapped to its value) into a
 * new JSON value; NULL when it does not decode. */
json_t *mqd_mgmt_decode_json(const char *bytes, size_t len);

/* Appends `v` to d: objects as maps with string keys, integers as long, reals as double,
 * strings as string, booleans, null, arrays as lists. 0 or -1 (too deep). */
int mqd_mgmt_json_to_data(pn_data_t *d, json_t *v, int depth);

#endif
