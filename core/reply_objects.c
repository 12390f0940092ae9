/*
 * core/reply_objects.c — how replies are built from the wire: hiredis's
 * reply objects, with limits.
 *
 * hiredis 0.14 allocates an array reply's element table as soon as it reads
 * the header, so a broken or hostile server sending "*233333333\r\n" makes
 * the client allocate ~1.8 GB from 12 bytes (found by
 * tests/fuzz/fuzz_replies.c). These functions build the same redisReply
 * objects hiredis does (freed by freeReplyObject(), so malloc/calloc/free
 * only) but refuse arrays longer than WK__REPLY_MAX_ELEMENTS; the reader
 * then fails with an out-of-memory error, which core/wire.c turns into
 * WK_EPROTO naming the count (wk__refused_elements), the connection is
 * dropped and the query fails instead of the process swapping or dying.
 */
#include <stdlib.h>
#include <string.h>

#include "core/db_internal.h"

/* The functions of this file live in their own section, so the allocation
 * test (tests/perf/test_allocations.c) can tell reply objects — what
 * hiredis would allocate anyway — from allocations of the library proper. */
#define REPLY_CODE __attribute__((section("wk_reply_code"), noinline, used))

REPLY_CODE static redisReply *new_reply(int type)
{
    redisReply *r = calloc(1, sizeof(*r));
    if (r)
        r->type = type;
    return r;
}

/* Hang `r` into its parent array, as hiredis does. */
REPLY_CODE static void *attach(const redisReadTask *task, redisReply *r)
{
    if (task->parent) {
        redisReply *parent = task->parent->obj;
        if (!parent || parent->type != REDIS_REPLY_ARRAY || task->idx < 0 ||
            (size_t)task->idx >= parent->elements) {
            freeReplyObject(r);
            return NULL;
        }
        parent->element[task->idx] = r;
    }
    return r;
}

REPLY_CODE static void *create_string(const redisReadTask *task, char *str, size_t len)
{
    if (task->type != REDIS_REPLY_STRING && task->type != REDIS_REPLY_STATUS &&
        task->type != REDIS_REPLY_ERROR)
        return NULL;
    redisReply *r = new_reply(task->type);
    if (!r)
        return NULL;
    r->str = malloc(len + 1);
    if (!r->str) {
        free(r);
        return NULL;
    }
    memcpy(r->str, str, len);
    r->str[len] = '\0';
    r->len = len;
    return attach(task, r);
}

_Thread_local long long wk__refused_elements;

REPLY_CODE static void *create_array(const redisReadTask *task, int elements)
{
    if (elements > WK__REPLY_MAX_ELEMENTS)
        wk__refused_elements = elements;
    if (elements < 0 || elements > WK__REPLY_MAX_ELEMENTS)
        return NULL;
    redisReply *r = new_reply(REDIS_REPLY_ARRAY);
    if (!r)
        return NULL;
    if (elements > 0) {
        r->element = calloc((size_t)elements, sizeof(redisReply *));
        if (!r->element) {
            free(r);
            return NULL;
        }
    }
    r->elements = (size_t)elements;
    return attach(task, r);
}

REPLY_CODE static void *create_integer(const redisReadTask *task, long long value)
{
    redisReply *r = new_reply(REDIS_REPLY_INTEGER);
    if (!r)
        return NULL;
    r->integer = value;
    return attach(task, r);
}

REPLY_CODE static void *create_nil(const redisReadTask *task)
{
    redisReply *r = new_reply(REDIS_REPLY_NIL);
    return r ? attach(task, r) : NULL;
}

REPLY_CODE static void free_object(void *reply)
{
    freeReplyObject(reply);
}

redisReplyObjectFunctions wk__reply_functions = {create_string, create_array, create_integer,
                                                 create_nil, free_object};
