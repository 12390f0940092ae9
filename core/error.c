/*
 * core/error.c — names and messages of the status codes, generated from the
 * one table in wakuwaku/common.h so the three can never disagree.
 */
#include <wakuwaku/common.h>

const char *wk_strerror(int status)
{
    switch (status) {
    case WK_OK:
        return "success";
#define WK__STATUS_MSG(name, value, msg) \
    case WK_##name:                      \
        return msg;
        WK_STATUS_MAP(WK__STATUS_MSG)
#undef WK__STATUS_MSG
    }
    return "unknown status";
}

const char *wk_err_name(int status)
{
    switch (status) {
    case WK_OK:
        return "WK_OK";
#define WK__STATUS_NAME(name, value, msg) \
    case WK_##name:                       \
        return "WK_" #name;
        WK_STATUS_MAP(WK__STATUS_NAME)
#undef WK__STATUS_NAME
    }
    return "WK_E?";
}
