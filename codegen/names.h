/*
 * codegen/names.h — every decision about C identifiers in one place:
 * which schema identifiers are valid, which are reserved words and how
 * they are escaped, and the table of generated global names that finds
 * collisions between them.
 *
 * The rules (codegen/SCHEMA.md repeats them for users):
 *   - an identifier is [A-Za-z][A-Za-z0-9_]* — anything else is REFUSED
 *     (a leading '_' too: `_X` and `__x` are reserved in C);
 *   - identifiers that become standalone C names (body field members,
 *     name parameters) are ESCAPED when they are C keywords or names the
 *     generated code's headers define (bool, NULL, errno, …): a trailing
 *     '_' is added ("default" → "default_"); the JSON key keeps the
 *     schema's spelling;
 *   - every other identifier is only ever used after the service prefix
 *     ("billing_default_try"), where a keyword is harmless.
 */
#ifndef WK_CODEGEN_NAMES_H
#define WK_CODEGEN_NAMES_H

#include "schema.h"

/* Whether s (len bytes) is a valid schema identifier. */
bool ident_valid(const char *s, size_t len);

/* Whether s is a C keyword or a name reserved by the generated code's
 * headers, i.e. must be escaped when used as a standalone C name. */
bool ident_reserved(const char *s);

/* The C spelling of an identifier used as a standalone name. */
const char *ident_escape(pool *pl, const char *s);

/* Whether `param` (or "<param>_len") would clash with a fixed parameter of
 * the generated accessors (token, body, state, …). */
bool param_clashes(const char *param);

/* s in upper case (for macros). */
char *ident_upper(pool *pl, const char *s);

/* The table of generated global names. */
typedef struct name_table name_table;

name_table *names_new(pool *pl);

/*
 * names_claim — record that the construct at `path` (reported at `pos`)
 * generates the global C name `name`. When another construct already
 * generates it, reports the collision to `d` (naming both) and returns
 * false.
 */
bool names_claim(name_table *t, diag *d, const char *name, const char *path, cg_json_pos pos,
                 const char *what);

#endif /* WK_CODEGEN_NAMES_H */
