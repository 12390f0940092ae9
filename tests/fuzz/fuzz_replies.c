/*
 * tests/fuzz/fuzz_replies.c — libFuzzer target: arbitrary server replies
 * through the reply parser of every built-in query.
 *
 * Input: byte 0 picks a query from the test-side registry of kinds
 * (tests/kinds/kinds.h: every built-in query); the rest is fed to a hiredis reader
 * as if the server had sent it. A processor standing in for the handle
 * runs the query's real builder and then its real parser on that reply —
 * a broken or hostile server, not Redis semantics. Any crash, leak or
 * undefined behaviour is a finding.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/db_internal.h"
#include "tests/kinds/kinds.h"

typedef struct fake_server {
    wk_processor base;
    const uint8_t *data;
    size_t len;
} fake_server;

static wk_db fake_db; /* only its message buffer is used */

static int fake_process(wk_processor *self, wk_query *q)
{
    fake_server *f = (fake_server *)self;
    /* The builder's query must be well formed whatever the reply. */
    if (q->argc < 1 || !q->argv || !q->argvlen)
        abort();
    redisReader *reader = redisReaderCreateWithFunctions(&wk__reply_functions);
    if (!reader)
        return WK_ENOMEM;
    int rc = WK_EPROTO;
    void *reply = NULL;
    if (redisReaderFeed(reader, (const char *)f->data, f->len) == REDIS_OK &&
        redisReaderGetReply(reader, &reply) == REDIS_OK && reply) {
        rc = wk__parse_reply(&fake_db, q, reply, NULL);
        freeReplyObject(reply);
    }
    redisReaderFree(reader);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    fake_server f = {{fake_process, &fake_db, 0}, data + 1, size - 1};
    const wk_test_query *q = wk_test_query_at(data[0] % wk_test_nqueries());
    int rc = q->run(&f.base, "fuzz");
    /* Whatever came back, it is a status from the table. */
    if (rc > 0 || strcmp(wk_err_name(rc), "WK_E?") == 0)
        abort();
    return 0;
}
