/*
 * base/base.h — the bottom of the library: small helpers every module may
 * use (entity/, capability/, core/, collection/) and that use nothing of
 * the library themselves, so no module has to call up into core to print
 * a key or grow an array. Not installed.
 */
#ifndef WK_BASE_H
#define WK_BASE_H

#include <stdarg.h>
#include <stddef.h>

/* Format into the caller's error buffer `err` (`len` bytes; NULL or 0:
 * nothing is written) and return `status`, so a failure is one line:
 *     return wk__errbuf_set(err, errlen, WK_EINVAL, "cron: %s", why); */
int wk__errbuf_set(char *err, size_t len, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
int wk__errbuf_vset(char *err, size_t len, int status, const char *fmt, va_list ap)
    __attribute__((format(printf, 4, 0)));

/* `len` bytes of a key rendered printable into dst (non-printable bytes
 * as \xNN, long keys cut with "..."), for messages. `cap` ≥ 16. */
void wk__render_key(char *dst, size_t cap, const void *key, size_t len);

/* Grow the array *arr (elements of `size` bytes, *cap of them) to hold at
 * least `need`, doubling from 16: WK_OK, or WK_ENOMEM with *arr and *cap
 * unchanged. Elements move: no pointer into the array survives a call
 * that grows it. */
int wk__grow_array(void *arr, size_t *cap, size_t need, size_t size);

/* The same, doubling from `first` (≥ 1) elements (a buffer's usual size), so
 * steady use stops reallocating; a doubling that would overflow stops at
 * `need`. */
int wk__grow_array_from(void *arr, size_t *cap, size_t need, size_t size, size_t first);

/* The name of an enum value, from a table indexed by the enum (designated
 * initializers: {[WK_READ] = "READ", ...}), or "?" for a value the table
 * does not name. Static strings. Also compiled into wk-codegen. */
const char *wk__enum_name(const char *const *names, size_t count, int value);
#define WK__ENUM_NAME(names, value)                                                                \
    wk__enum_name((names), sizeof(names) / sizeof((names)[0]), (int)(value))

#endif /* WK_BASE_H */
