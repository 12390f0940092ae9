/*
 * base/base.c — the bottom helpers (base/base.h): error buffers, printable
 * keys, growing arrays, enum names.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <wakuwaku/common.h>

#include "base/base.h"

int wk__errbuf_vset(char *err, size_t len, int status, const char *fmt, va_list ap)
{
    if (err && len)
        vsnprintf(err, len, fmt, ap);
    return status;
}

int wk__errbuf_set(char *err, size_t len, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    wk__errbuf_vset(err, len, status, fmt, ap);
    va_end(ap);
    return status;
}

void wk__render_key(char *dst, size_t cap, const void *key, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *src = key;
    size_t o = 0;
    for (size_t k = 0; k < len; k++) {
        /* Room for one escaped byte, "..." and the NUL. */
        if (o + 4 + 3 + 1 > cap) {
            memcpy(dst + o, "...", 3);
            o += 3;
            break;
        }
        unsigned char c = src[k];
        if (c >= 0x20 && c < 0x7f && c != '\\' && c != '"') {
            dst[o++] = (char)c;
        } else {
            dst[o++] = '\\';
            dst[o++] = 'x';
            dst[o++] = hex[c >> 4];
            dst[o++] = hex[c & 15];
        }
    }
    dst[o] = '\0';
}

int wk__grow_array(void *arr, size_t *cap, size_t need, size_t size)
{
    return wk__grow_array_from(arr, cap, need, size, 16);
}

int wk__grow_array_from(void *arr, size_t *cap, size_t need, size_t size, size_t first)
{
    if (need <= *cap)
        return WK_OK;
    if (need > SIZE_MAX / size)
        return WK_ENOMEM;
    size_t n = *cap ? *cap : first;
    while (n < need)
        n = n > SIZE_MAX / size / 2 ? need : n * 2;
    void *p = realloc(*(void **)arr, n * size);
    if (!p)
        return WK_ENOMEM;
    *(void **)arr = p;
    *cap = n;
    return WK_OK;
}

const char *wk__enum_name(const char *const *names, size_t count, int value)
{
    if (value < 0 || (size_t)value >= count || !names[value])
        return "?";
    return names[value];
}
