/*
 * core/url.c — parsing redis://, rediss:// and unix:// URLs.
 *
 *   redis://[[user]:password@]host[:port][/db]
 *   rediss://…    the same, over TLS (url->tls; default port 6379 too)
 *   unix:///absolute/path[?db=N]
 *   redis-sentinel://[[user]:password@]h1[:p1][,h2[:p2]…]/service[/db]
 *                 the sentinels to ask (default port 26379), the service
 *                 (its primary's name), the db; the userinfo is the data
 *                 nodes' (sentinel credentials are options of the handle)
 *
 * User and password are percent-decoded, so a password may contain '@',
 * ':' or '/'. Error messages never quote the password.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <wakuwaku/db.h>

#include "core/db_internal.h"

static int url_fail(char *err, size_t errlen, const char *msg)
{
    if (err && errlen)
        snprintf(err, errlen, "invalid Redis URL: %s", msg);
    return WK_EINVAL;
}

static int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Percent-decode s[0..n) into a new string; NULL on bad escapes (*bad set)
 * or out of memory. */
static char *decode(const char *s, size_t n, bool *bad)
{
    char *out = malloc(n + 1), *o = out;
    if (!out)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '%') {
            if (n - i < 3 || hex_value(s[i + 1]) < 0 || hex_value(s[i + 2]) < 0) {
                free(out);
                *bad = true;
                return NULL;
            }
            char c = (char)(hex_value(s[i + 1]) * 16 + hex_value(s[i + 2]));
            if (c == '\0') {
                free(out);
                *bad = true;
                return NULL;
            }
            *o++ = c;
            i += 2;
        } else {
            *o++ = s[i];
        }
    }
    *o = '\0';
    return out;
}

static bool parse_int(const char *s, size_t n, long min, long max, long *out)
{
    if (n == 0 || n > 10)
        return false;
    long v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (s[i] - '0');
    }
    if (v < min || v > max)
        return false;
    *out = v;
    return true;
}

static void free_nodes(wk_url_node *nodes, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(nodes[i].host);
    free(nodes);
}

void wk_url_free(wk_url *url)
{
    if (!url)
        return;
    free_nodes(url->sentinels, url->nsentinels);
    free_nodes(url->seeds, url->nseeds);
    free(url->service);
    free(url->host);
    free(url->path);
    free(url->username);
    if (url->password) {
        /* Do not leave the secret in freed memory. */
        memset(url->password, 0, strlen(url->password));
        free(url->password);
    }
    memset(url, 0, sizeof(*url));
}

static int parse_unix(wk_url *url, const char *rest, char *err, size_t errlen)
{
    const char *q = strchr(rest, '?');
    size_t path_len = q ? (size_t)(q - rest) : strlen(rest);
    if (path_len == 0 || rest[0] != '/')
        return url_fail(err, errlen, "unix:// needs an absolute path (unix:///path)");
    if (q) {
        long db;
        if (strncmp(q, "?db=", 4) != 0 || !parse_int(q + 4, strlen(q + 4), 0, 1L << 30, &db))
            return url_fail(err, errlen, "the only unix:// query is ?db=N");
        url->database = (int)db;
    }
    url->path = strndup(rest, path_len);
    return url->path ? WK_OK : WK_ENOMEM;
}

static int parse_userinfo(wk_url *url, const char *s, size_t n, char *err, size_t errlen)
{
    const char *colon = memchr(s, ':', n);
    bool bad = false;
    if (!colon) {
        /* "redis://secret@host": a bare password, as redis-cli reads it. */
        url->password = decode(s, n, &bad);
    } else {
        size_t ulen = (size_t)(colon - s);
        if (ulen) {
            url->username = decode(s, ulen, &bad);
            if (!url->username)
                return bad ? url_fail(err, errlen, "bad %-escape in the user name") : WK_ENOMEM;
        }
        url->password = decode(colon + 1, n - ulen - 1, &bad);
    }
    if (!url->password)
        return bad ? url_fail(err, errlen, "bad %-escape in the password") : WK_ENOMEM;
    return WK_OK;
}

/* The userinfo of a redis:// or redis-sentinel:// URL (up to the last '@'
 * before `end`), if any; *host is where the host part starts. */
static int parse_at(wk_url *url, const char *rest, const char *end, const char **host, char *err,
                    size_t errlen)
{
    const char *at = NULL;
    for (const char *p = rest; p < end; p++) {
        if (*p == '@')
            at = p;
    }
    *host = rest;
    if (!at)
        return WK_OK;
    *host = at + 1;
    return parse_userinfo(url, rest, (size_t)(at - rest), err, errlen);
}

/* "host[:port]" or "[v6][:port]" in [host, end): where the host name
 * ends (after a '[': the name starts at host + 1) and the port. */
static int parse_host_port(const char *host, const char *end, long default_port,
                           const char **name_end, long *port, char *err, size_t errlen)
{
    const char *host_end, *port_start = NULL;
    if (*host == '[') {
        host_end = memchr(host, ']', (size_t)(end - host));
        if (!host_end)
            return url_fail(err, errlen, "unterminated [IPv6] host");
        if (host_end + 1 < end) {
            if (host_end[1] != ':')
                return url_fail(err, errlen, "junk after ]");
            port_start = host_end + 2;
        }
        host++;
    } else {
        host_end = memchr(host, ':', (size_t)(end - host));
        if (host_end)
            port_start = host_end + 1;
        else
            host_end = end;
    }
    if (host_end == host)
        return url_fail(err, errlen, "missing host");
    *port = default_port;
    if (port_start && !parse_int(port_start, (size_t)(end - port_start), 1, 65535, port))
        return url_fail(err, errlen, "port must be 1..65535");
    *name_end = host_end;
    return WK_OK;
}

/* What comes before the path: *end is where the path starts, *host where
 * the host part does (after the userinfo, which is parsed into url). */
static int parse_authority(wk_url *url, const char *rest, const char *scheme, const char **end,
                           const char **host, char *err, size_t errlen)
{
    *end = rest + strcspn(rest, "/?#");
    if (**end == '?' || **end == '#') {
        char msg[80];
        snprintf(msg, sizeof(msg), "query strings are not supported in %s URLs", scheme);
        return url_fail(err, errlen, msg);
    }
    /* The userinfo ends at the last '@' before the path. */
    return parse_at(url, rest, *end, host, err, errlen);
}

/* "h1[:p1],h2[:p2]…" in [host, end) into a new array *nodes of *count. */
static int parse_nodes(const char *host, const char *end, long default_port, wk_url_node **nodes,
                       size_t *count, char *err, size_t errlen)
{
    size_t n = 1;
    for (const char *p = host; p < end; p++)
        n += *p == ',';
    *nodes = calloc(n, sizeof(**nodes));
    if (!*nodes)
        return WK_ENOMEM;
    while (*count < n) {
        const char *item_end = memchr(host, ',', (size_t)(end - host));
        if (!item_end)
            item_end = end;
        const char *host_end;
        long port;
        int rc = parse_host_port(host, item_end, default_port, &host_end, &port, err, errlen);
        if (rc)
            return rc;
        const char *h = *host == '[' ? host + 1 : host;
        wk_url_node *node = &(*nodes)[(*count)++];
        node->port = (int)port;
        if (!(node->host = strndup(h, (size_t)(host_end - h))))
            return WK_ENOMEM;
        host = item_end + 1;
    }
    return WK_OK;
}

static int parse_tcp(wk_url *url, const char *rest, char *err, size_t errlen)
{
    const char *end, *host;
    int rc = parse_authority(url, rest, "redis://", &end, &host, err, errlen);
    if (rc)
        return rc;
    if (*end == '/' && end[1]) {
        long db;
        if (!parse_int(end + 1, strlen(end + 1), 0, 1L << 30, &db))
            return url_fail(err, errlen, "database must be a number (/0)");
        url->database = (int)db;
    }
    if (memchr(host, ',', (size_t)(end - host))) {
        /* Several hosts: a cluster's seeds; host and port are the first. */
        rc = parse_nodes(host, end, 6379, &url->seeds, &url->nseeds, err, errlen);
        if (rc)
            return rc;
        url->port = url->seeds[0].port;
        url->host = strdup(url->seeds[0].host);
        return url->host ? WK_OK : WK_ENOMEM;
    }
    const char *host_end;
    long port;
    rc = parse_host_port(host, end, 6379, &host_end, &port, err, errlen);
    if (rc)
        return rc;
    if (*host == '[')
        host++;
    url->port = (int)port;
    url->host = strndup(host, (size_t)(host_end - host));
    return url->host ? WK_OK : WK_ENOMEM;
}

/* "h1[:p1],h2[:p2]…/service[/db]" after the userinfo. */
static int parse_sentinel(wk_url *url, const char *rest, char *err, size_t errlen)
{
    const char *end, *host;
    int rc = parse_authority(url, rest, "redis-sentinel://", &end, &host, err, errlen);
    if (rc)
        return rc;
    rc = parse_nodes(host, end, 26379, &url->sentinels, &url->nsentinels, err, errlen);
    if (rc)
        return rc;
    if (*end != '/' || end[1] == '\0' || end[1] == '/')
        return url_fail(err, errlen, "redis-sentinel:// needs a service name (…/service[/db])");
    const char *service = end + 1, *slash = strchr(service, '/');
    if (strpbrk(service, "?#"))
        return url_fail(err, errlen, "query strings are not supported in redis-sentinel:// URLs");
    size_t service_len = slash ? (size_t)(slash - service) : strlen(service);
    if (slash && slash[1]) {
        long db;
        if (!parse_int(slash + 1, strlen(slash + 1), 0, 1L << 30, &db))
            return url_fail(err, errlen, "database must be a number (/service/0)");
        url->database = (int)db;
    }
    bool bad = false;
    url->service = decode(service, service_len, &bad);
    if (!url->service)
        return bad ? url_fail(err, errlen, "bad %-escape in the service name") : WK_ENOMEM;
    /* host and port start as the first sentinel's; a connection puts its
     * primary's there. */
    url->port = url->sentinels[0].port;
    url->host = strdup(url->sentinels[0].host);
    return url->host ? WK_OK : WK_ENOMEM;
}

int wk_url_parse(wk_url *url, const char *text, char *err, size_t errlen)
{
    if (!url)
        return WK_EINVAL;
    memset(url, 0, sizeof(*url));
    if (err && errlen)
        err[0] = '\0';
    if (!text)
        text = "redis://127.0.0.1:6379";
    int rc;
    if (strncmp(text, "unix://", 7) == 0)
        rc = parse_unix(url, text + 7, err, errlen);
    else if (strncmp(text, "redis://", 8) == 0)
        rc = parse_tcp(url, text + 8, err, errlen);
    else if (strncmp(text, "rediss://", 9) == 0) {
        url->tls = true;
        rc = parse_tcp(url, text + 9, err, errlen);
    } else if (strncmp(text, "redis-sentinel://", 17) == 0)
        rc = parse_sentinel(url, text + 17, err, errlen);
    else
        rc = url_fail(err, errlen,
                      "scheme must be redis://, rediss://, unix:// or redis-sentinel://");
    if (rc)
        wk_url_free(url);
    return rc;
}

/* A copy of `n` nodes into *dst (NULL when n is 0); *count says how many
 * were copied, also on failure (free with free_nodes). */
static int copy_nodes(wk_url_node **dst, size_t *count, const wk_url_node *src, size_t n)
{
    *dst = NULL;
    *count = 0;
    if (!n)
        return WK_OK;
    if (!(*dst = calloc(n, sizeof(**dst))))
        return WK_ENOMEM;
    for (; *count < n; (*count)++) {
        (*dst)[*count].port = src[*count].port;
        if (!((*dst)[*count].host = strdup(src[*count].host)))
            return WK_ENOMEM;
    }
    return WK_OK;
}

int wk__url_copy(wk_url *dst, const wk_url *src)
{
    *dst = *src;
    dst->host = dst->path = dst->username = dst->password = dst->service = NULL;
    dst->sentinels = dst->seeds = NULL;
    dst->nsentinels = dst->nseeds = 0;
    if ((src->host && !(dst->host = strdup(src->host))) ||
        (src->path && !(dst->path = strdup(src->path))) ||
        (src->username && !(dst->username = strdup(src->username))) ||
        (src->password && !(dst->password = strdup(src->password))) ||
        (src->service && !(dst->service = strdup(src->service))) ||
        copy_nodes(&dst->sentinels, &dst->nsentinels, src->sentinels, src->nsentinels) ||
        copy_nodes(&dst->seeds, &dst->nseeds, src->seeds, src->nseeds)) {
        wk_url_free(dst);
        return WK_ENOMEM;
    }
    return WK_OK;
}
