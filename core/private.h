/*
 * core/private.h — what core/ offers the other modules of the library
 * (collection/, …) without exposing hiredis. Not installed.
 */
#ifndef WK_CORE_PRIVATE_H
#define WK_CORE_PRIVATE_H

#include <wakuwaku/key.h>
#include <wakuwaku/query.h>

/* Record a detail message on the handle behind `p` and return `status`. */
int wk__processor_fail(wk_processor *p, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif /* WK_CORE_PRIVATE_H */
