/*
 * collection/counter.c — Counter (wakuwaku/counter.h): INCRBY with an
 * optional TTL, and GET read as an integer.
 */
#include <wakuwaku/counter.h>

#include "collection/op.h"
#include "entity/kind.h"

static int check_params(const wk_entity *e, char *msg, size_t len)
{
    if (e->ttl_ms < 0)
        return wk__entity_fail(msg, len, "ttl_ms must be >= 0 (got %lld)", (long long)e->ttl_ms);
    return WK_OK;
}

WK__KIND(counter) = {WK_KIND_COUNTER, check_params};

static const wk_script incr_script = {
    "counter.incr", "local v = redis.call('INCRBY', KEYS[1], ARGV[1])\n"
                    "if tonumber(ARGV[2]) > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end\n"
                    "return v\n"};
static const wk_script get_script = {"counter.get",
                                     "return tonumber(redis.call('GET', KEYS[1]) or '0')\n"};

static const wk__op incr_op = {WK__OP_OF(counter, incr), .kind = WK_KIND_COUNTER,
                               .script = &incr_script, .parse = wk__parse_i64,
                               .out_name = "value", .out_size = sizeof(int64_t)};
static const wk__op get_op = {WK__OP_OF(counter, get), .kind = WK_KIND_COUNTER,
                              .flags = WK_QUERY_RETRY_SAFE, .script = &get_script,
                              .parse = wk__parse_i64, .out_name = "value",
                              .out_size = sizeof(int64_t)};

int wk_counter_incr(wk_processor *p, const wk_entity *counter, wk_name name, int64_t by,
                    int64_t *value)
{
    char by_s[24], ttl_s[24];
    const char *args[2] = {by_s, ttl_s};
    size_t lens[2] = {wk__fmt_i64(by_s, by), wk__fmt_i64(ttl_s, counter ? counter->ttl_ms : 0)};
    return wk__op_run(p, &incr_op, counter, name, args, lens, 2, value);
}

int wk_counter_get(wk_processor *p, const wk_entity *counter, wk_name name, int64_t *value)
{
    return wk__op_run(p, &get_op, counter, name, NULL, NULL, 0, value);
}
