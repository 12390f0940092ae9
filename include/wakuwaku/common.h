/*
 * wakuwaku/common.h — definitions every public header shares: the export
 * macro, the status codes and their names, and the library version.
 *
 * Status codes follow one rule: 0 (WK_OK) is success, every failure is a
 * distinct negative value from the table below. "Lock not acquired", "cache
 * miss" and "rate limited" are outcomes reported through OUT parameters,
 * never status codes. WK_ENOTREPLICATED is not one of them: a lease was
 * taken but could not be made as safe as the handle asked (lease_replicas),
 * so it was given back — a failure of the topology, not contention.
 */
#ifndef WAKUWAKU_COMMON_H
#define WAKUWAKU_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <wakuwaku/version.h>

#ifndef WK_API
#define WK_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The status table: XX(NAME, value, message). It yields the enum below,
 * wk_strerror() and wk_err_name(); keep values stable once released.
 */
#define WK_STATUS_MAP(XX)                                                     \
    XX(EDENIED, -1, "denied by capability")                                   \
    XX(EIO, -2, "connection I/O error")                                       \
    XX(ETIMEDOUT, -3, "timed out waiting for the server")                     \
    XX(EREDIS, -4, "Redis replied with an error")                             \
    XX(ECORRUPT, -5, "stored data is corrupted or of an unexpected shape")    \
    XX(EINVAL, -6, "invalid argument")                                        \
    XX(ENOMEM, -7, "out of memory")                                           \
    XX(EPROTO, -8, "unexpected reply from the server")                        \
    XX(EAUTH, -9, "authentication with the server failed")                    \
    XX(EUNKNOWN, -10, "outcome unknown: the write was sent and its reply never came")      \
    XX(ENOTREPLICATED, -11, "too few replicas acknowledged the lease; it was released")

typedef enum wk_status {
    WK_OK = 0,
#define WK__STATUS_ENUM(name, value, msg) WK_##name = (value),
    WK_STATUS_MAP(WK__STATUS_ENUM)
#undef WK__STATUS_ENUM
} wk_status;

/*
 * wk_strerror — a static English description of a status code.
 * Never NULL; unknown codes give "unknown status". Thread-safe.
 */
WK_API const char *wk_strerror(int status);

/*
 * wk_err_name — the code's symbolic name ("WK_EDENIED"); "WK_OK" for 0 and
 * "WK_E?" for unknown codes. Static string, never NULL. Thread-safe.
 */
WK_API const char *wk_err_name(int status);

/* wk_version — the library's version string, e.g. "0.1.0". Static. */
WK_API const char *wk_version(void);

/* wk_version_number — WK_VERSION_NUMBER of the library actually linked. */
WK_API int wk_version_number(void);

#ifdef __cplusplus
}
#endif

#endif /* WAKUWAKU_COMMON_H */
