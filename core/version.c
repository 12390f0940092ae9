/* core/version.c — the version of the library actually linked. */
#include <wakuwaku/common.h>

const char *wk_version(void)
{
    return WK_VERSION_STRING;
}

int wk_version_number(void)
{
    return WK_VERSION_NUMBER;
}
