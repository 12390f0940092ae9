/*
 * core/error.c — names and messages of the status codes, generated from the
 * one table in wakuwaku/common.h so the three can never disagree.
 */
#include <stddef.h>

#include <wakuwaku/common.h>

typedef struct status_text {
    int status;
    const char *name, *msg;
} status_text;

static const status_text statuses[] = {
    {WK_OK, "WK_OK", "success"},
#define WK__STATUS_ROW(name, value, msg) {WK_##name, "WK_" #name, msg},
    WK_STATUS_MAP(WK__STATUS_ROW)
#undef WK__STATUS_ROW
};

static const status_text *find(int status)
{
    for (size_t i = 0; i < sizeof(statuses) / sizeof(statuses[0]); i++)
        if (statuses[i].status == status)
            return &statuses[i];
    return NULL;
}

const char *wk_strerror(int status)
{
    const status_text *s = find(status);
    return s ? s->msg : "unknown status";
}

const char *wk_err_name(int status)
{
    const status_text *s = find(status);
    return s ? s->name : "WK_E?";
}
