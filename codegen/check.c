/*
 * codegen/check.c — the check stage: walk the JSON tree of a schema, build
 * the model (schema.h) and report every problem, each with its JSON path
 * and line:column. Nothing stops at the first error: a value that is wrong
 * is reported and skipped, and the checks that depend on it are skipped
 * too, so each mistake is reported once.
 *
 * Rules (one bad-schema test each, tests/codegen/bad/):
 *   - JSON types of every value; required keys; unknown keys (with a
 *     "did you mean" when a known key is close); duplicate keys;
 *   - identifiers valid, keywords escaped (names.h); no duplicate ids;
 *     no two constructs generating the same C name;
 *   - kinds, name types, field types known; records exist;
 *   - TTL and period > 0; capacity and rate > 0 and finite, and exactly
 *     representable by the limiter (collection/token_bucket_units.h);
 *   - namespaces without ':', '{' or '}' (they would alias other
 *     namespaces' keys), and no two entities of one kind in one namespace
 *     (they would share keys);
 *   - no record containing itself by value;
 *   - grants name existing entities.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <wakuwaku/entity.h>

#include "names.h"
#include "schema.h"

typedef struct ctx {
    pool *pl;
    diag *d;
    name_table *names;
    schema *s;
} ctx;

/* ------------------------------------------------------------------------
 * Paths and JSON helpers
 * ---------------------------------------------------------------------- */

static const char *path_key(ctx *c, const char *parent, const char *key)
{
    if (ident_valid(key, strlen(key)))
        return pool_printf(c->pl, "%s.%s", parent, key);
    /* a key that is not an identifier: $.grants["my key"] */
    char *q = pool_alloc(c->pl, strlen(key) * 4 + 1);
    char *o = q;
    for (const char *k = key; *k; k++) {
        unsigned char ch = (unsigned char)*k;
        if (ch == '"' || ch == '\\') {
            *o++ = '\\';
            *o++ = (char)ch;
        } else if (ch < 0x20) {
            o += sprintf(o, "\\x%02x", ch);
        } else {
            *o++ = (char)ch;
        }
    }
    *o = '\0';
    return pool_printf(c->pl, "%s[\"%s\"]", parent, q);
}

static const char *path_index(ctx *c, const char *parent, size_t i)
{
    return pool_printf(c->pl, "%s[%zu]", parent, i);
}

/* The first member called `key`, or NULL. */
static const cg_json_member *member(const cg_json_value *obj, const char *key)
{
    for (size_t i = 0; i < obj->count; i++) {
        if (strcmp(obj->members[i].key, key) == 0 && strlen(key) == obj->members[i].key_len)
            return &obj->members[i];
    }
    return NULL;
}

static size_t edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 32 || lb > 32)
        return 99;
    size_t row[33];
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag_prev = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diag_prev + (a[i - 1] != b[j - 1]);
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag_prev = up;
        }
    }
    return row[lb];
}

/* The closest of `words` (NULL-terminated) to `w`, if close enough. */
static const char *suggest(const char *w, const char *const *words)
{
    const char *best = NULL;
    size_t best_d = 3;
    for (size_t i = 0; words[i]; i++) {
        size_t dist = edit_distance(w, words[i]);
        /* "string" for "str": one is the start of the other */
        size_t lw = strlen(w), lv = strlen(words[i]);
        if (dist >= best_d && lw >= 2 && lv >= 2 &&
            strncmp(w, words[i], lw < lv ? lw : lv) == 0)
            dist = best_d - 1;
        if (dist < best_d) {
            best_d = dist;
            best = words[i];
        }
    }
    return best;
}

static const char *join(ctx *c, const char *const *words)
{
    size_t n = 0;
    for (size_t i = 0; words[i]; i++)
        n += strlen(words[i]) + 2;
    char *s = pool_alloc(c->pl, n + 1);
    for (size_t i = 0; words[i]; i++) {
        if (i)
            strcat(s, ", ");
        strcat(s, words[i]);
    }
    return s;
}

/*
 * Checks that `v` is an object, that it holds no key twice, no key outside
 * `allowed` and every key of `required`. `misplaced` (may be NULL) lists
 * keys valid elsewhere (other kinds) with the explanation to give.
 * Returns false when v is not an object.
 */
typedef struct misplaced_key {
    const char *key;
    const char *why;
} misplaced_key;

static bool check_object(ctx *c, const cg_json_value *v, const char *path, const char *what,
                         const char *const *allowed, const char *const *required,
                         const misplaced_key *misplaced)
{
    if (v->type != CG_JSON_T_OBJECT) {
        diag_error(c->d, v->pos, path, "%s must be an object, not %s", what,
                   cg_json_type_name(v->type));
        return false;
    }
    for (size_t i = 0; i < v->count; i++) {
        const cg_json_member *m = &v->members[i];
        const char *kpath = path_key(c, path, m->key);
        for (size_t j = 0; j < i; j++) {
            if (v->members[j].key_len == m->key_len &&
                memcmp(v->members[j].key, m->key, m->key_len) == 0) {
                diag_error(c->d, m->pos, kpath, "duplicate key \"%s\" (first at line %d:%d)",
                           m->key, v->members[j].pos.line, v->members[j].pos.col);
                break;
            }
        }
        bool known = false;
        for (size_t j = 0; allowed[j]; j++)
            known = known || (strcmp(allowed[j], m->key) == 0 && strlen(m->key) == m->key_len);
        if (known)
            continue;
        const char *why = NULL;
        for (size_t j = 0; misplaced && misplaced[j].key; j++) {
            if (strcmp(misplaced[j].key, m->key) == 0)
                why = misplaced[j].why;
        }
        if (why) {
            diag_error(c->d, m->pos, kpath, "unknown key \"%s\": %s", m->key, why);
            continue;
        }
        const char *close = suggest(m->key, allowed);
        if (close)
            diag_error(c->d, m->pos, kpath, "unknown key \"%s\" in %s; did you mean \"%s\"?",
                       m->key, what, close);
        else
            diag_error(c->d, m->pos, kpath, "unknown key \"%s\" in %s (known keys: %s)", m->key,
                       what, join(c, allowed));
    }
    for (size_t j = 0; required && required[j]; j++) {
        if (!member(v, required[j]))
            diag_error(c->d, v->pos, path, "missing required key \"%s\" in %s", required[j],
                       what);
    }
    return true;
}

/* A string value, or NULL after reporting. NUL bytes are refused. */
static const char *get_string(ctx *c, const cg_json_value *v, const char *path, const char *what)
{
    if (v->type != CG_JSON_T_STRING) {
        diag_error(c->d, v->pos, path, "%s must be a string, not %s", what,
                   cg_json_type_name(v->type));
        return NULL;
    }
    if (strlen(v->str) != v->str_len) {
        diag_error(c->d, v->pos, path, "%s must not contain a NUL character", what);
        return NULL;
    }
    return v->str;
}

/* An identifier, or NULL after reporting. */
static const char *get_ident(ctx *c, const cg_json_value *v, const char *path, const char *what)
{
    const char *s = get_string(c, v, path, what);
    if (!s)
        return NULL;
    if (!ident_valid(s, v->str_len)) {
        diag_error(c->d, v->pos, path,
                   "invalid identifier \"%s\" for %s: use letters, digits and '_', starting "
                   "with a letter (refused, not escaped)",
                   s, what);
        return NULL;
    }
    return s;
}

/* An optional "description": a string, or NULL. */
static const char *get_description(ctx *c, const cg_json_value *obj, const char *path)
{
    const cg_json_member *m = member(obj, "description");
    if (!m)
        return NULL;
    return get_string(c, m->value, path_key(c, path, "description"), "description");
}

static bool get_bool(ctx *c, const cg_json_value *obj, const char *path, const char *key)
{
    const cg_json_member *m = member(obj, key);
    if (!m)
        return false;
    if (m->value->type != CG_JSON_T_BOOL) {
        diag_error(c->d, m->value->pos, path_key(c, path, key), "%s must be true or false, not %s",
                   key, cg_json_type_name(m->value->type));
        return false;
    }
    return m->value->boolean;
}

/*
 * A duration: "250ms", "30s", "5m", "1h", or a whole number of
 * milliseconds. Reports and returns false when it is malformed or ≤ 0.
 */
#define DURATION_MAX (INT64_C(1) << 53)

static bool get_duration(ctx *c, const cg_json_value *v, const char *path, const char *what,
                         int64_t *out)
{
    int64_t ms;
    if (v->type == CG_JSON_T_NUMBER) {
        if (!v->is_int) {
            if (floor(v->num) == v->num && fabs(v->num) >= 9.2e18) {
                diag_error(c->d, v->pos, path, "%s %s ms is too large", what, v->num_text);
                return false;
            }
            diag_error(c->d, v->pos, path,
                       "%s %s: a number of milliseconds must be a whole number", what,
                       v->num_text);
            return false;
        }
        if (v->int_val <= 0) {
            diag_error(c->d, v->pos, path, "%s must be > 0 (got %s)", what, v->num_text);
            return false;
        }
        ms = v->int_val;
    } else if (v->type == CG_JSON_T_STRING) {
        const char *s = v->str;
        const char *p = s;
        bool neg = false;
        if (*p == '-') {
            neg = true;
            p++;
        }
        if (*p < '0' || *p > '9')
            goto malformed;
        int64_t n = 0;
        for (; *p >= '0' && *p <= '9'; p++) {
            if (n > DURATION_MAX)
                break;
            n = n * 10 + (*p - '0');
        }
        while (*p >= '0' && *p <= '9')
            p++;
        int64_t unit;
        if (strcmp(p, "ms") == 0)
            unit = 1;
        else if (strcmp(p, "s") == 0)
            unit = 1000;
        else if (strcmp(p, "m") == 0)
            unit = 60000;
        else if (strcmp(p, "h") == 0)
            unit = 3600000;
        else
            goto malformed;
        if (neg || n == 0) {
            diag_error(c->d, v->pos, path, "%s must be > 0 (got \"%s\")", what, s);
            return false;
        }
        if (n > DURATION_MAX / unit) {
            diag_error(c->d, v->pos, path, "%s \"%s\" is too large", what, s);
            return false;
        }
        ms = n * unit;
    } else {
        diag_error(c->d, v->pos, path,
                   "%s must be a duration string (\"250ms\", \"30s\", \"5m\", \"1h\") or a "
                   "number of milliseconds, not %s",
                   what, cg_json_type_name(v->type));
        return false;
    }
    if (ms > DURATION_MAX) {
        diag_error(c->d, v->pos, path, "%s is too large", what);
        return false;
    }
    *out = ms;
    return true;
malformed:
    diag_error(c->d, v->pos, path,
               "invalid %s \"%s\": write a whole number with a unit, ms, s, m or h (\"250ms\", "
               "\"30s\", \"5m\"), or a number of milliseconds",
               what, v->str);
    return false;
}

/* A number > 0, finite; `text` gets its shortest exact C spelling. */
static bool get_positive(ctx *c, const cg_json_value *v, const char *path, const char *what,
                         double *out, const char **text)
{
    if (v->type != CG_JSON_T_NUMBER) {
        diag_error(c->d, v->pos, path, "%s must be a number, not %s", what,
                   cg_json_type_name(v->type));
        return false;
    }
    if (!isfinite(v->num)) {
        diag_error(c->d, v->pos, path, "%s %s is not a finite number", what, v->num_text);
        return false;
    }
    if (v->num <= 0) {
        diag_error(c->d, v->pos, path, "%s must be > 0 (got %s)", what, v->num_text);
        return false;
    }
    char buf[64];
    if (v->num == floor(v->num) && v->num < 1e15) {
        snprintf(buf, sizeof(buf), "%.1f", v->num); /* "20.0" */
    } else {
        /* the shortest spelling that reads back exactly */
        for (int prec = 1; prec <= 17; prec++) {
            snprintf(buf, sizeof(buf), "%.*g", prec, v->num);
            if (strtod(buf, NULL) == v->num)
                break;
        }
        if (!strpbrk(buf, ".e"))
            strcat(buf, ".0");
    }
    *out = v->num;
    *text = pool_strdup(c->pl, buf);
    return true;
}

/* ------------------------------------------------------------------------
 * Records
 * ---------------------------------------------------------------------- */

static const char *const scalar_types[] = {"bool",   "i32",    "i64",   "u32", "u64",
                                           "f64",    "string", "bytes", NULL};

/* scalar_types[] is in field_type order (FT_BOOL … FT_BYTES). */
const char *field_type_name(const field *f)
{
    return f->type == FT_RECORD ? f->rec->id : scalar_types[f->type];
}

static const char *const record_keys[] = {"id", "fields", "description", NULL};
static const char *const record_required[] = {"id", "fields", NULL};
static const char *const field_keys[] = {"name", "type", "optional", "array", "description", NULL};
static const char *const field_required[] = {"name", "type", NULL};

static void parse_record(ctx *c, const cg_json_value *v, const char *path, record *r)
{
    r->pos = v->pos;
    if (!check_object(c, v, path, "a record", record_keys, record_required, NULL))
        return;
    const cg_json_member *m = member(v, "id");
    r->id_pos = r->pos;
    if (m) {
        r->id_pos = m->value->pos;
        r->id = get_ident(c, m->value, path_key(c, path, "id"), "a record id");
        for (size_t i = 0; r->id && scalar_types[i]; i++) {
            if (strcmp(r->id, scalar_types[i]) == 0) {
                diag_error(c->d, m->value->pos, path_key(c, path, "id"),
                           "record id \"%s\" is a built-in type name; choose another", r->id);
                r->id = NULL;
            }
        }
    }
    r->description = get_description(c, v, path);
    m = member(v, "fields");
    if (!m)
        return;
    const char *fpath = path_key(c, path, "fields");
    const cg_json_value *fv = m->value;
    if (fv->type != CG_JSON_T_ARRAY) {
        diag_error(c->d, fv->pos, fpath, "fields must be an array, not %s",
                   cg_json_type_name(fv->type));
        return;
    }
    if (fv->count == 0) {
        diag_error(c->d, fv->pos, fpath, "a record needs at least one field");
        return;
    }
    r->fields = pool_alloc(c->pl, fv->count * sizeof(field));
    r->nfields = fv->count;
    for (size_t i = 0; i < fv->count; i++) {
        const cg_json_value *f = fv->items[i];
        const char *p = path_index(c, fpath, i);
        field *fd = &r->fields[i];
        if (!check_object(c, f, p, "a field", field_keys, field_required, NULL))
            continue;
        fd->name_pos = fd->type_pos = f->pos;
        const cg_json_member *n = member(f, "name");
        if (n) {
            fd->name_pos = n->value->pos;
            fd->name = get_ident(c, n->value, path_key(c, p, "name"), "a field name");
        }
        const cg_json_member *t = member(f, "type");
        if (t) {
            fd->type_pos = t->value->pos;
            fd->type_name = get_string(c, t->value, path_key(c, p, "type"), "a field type");
        }
        fd->optional = get_bool(c, f, p, "optional");
        fd->array = get_bool(c, f, p, "array");
        fd->description = get_description(c, f, p);
    }
}

/* Resolves field types and names members; reports duplicates. */
static void resolve_record(ctx *c, record *r, size_t ri)
{
    const char *rpath = path_index(c, "$.records", ri);
    for (size_t i = 0; i < r->nfields; i++) {
        field *fd = &r->fields[i];
        const char *p = path_index(c, path_key(c, rpath, "fields"), i);
        if (fd->type_name) {
            static const field_type scalar_ft[] = {FT_BOOL, FT_I32, FT_I64,    FT_U32,
                                                   FT_U64,  FT_F64, FT_STRING, FT_BYTES};
            bool found = false;
            for (size_t k = 0; scalar_types[k]; k++) {
                if (strcmp(fd->type_name, scalar_types[k]) == 0) {
                    fd->type = scalar_ft[k];
                    found = true;
                }
            }
            for (size_t k = 0; !found && k < c->s->nrecords; k++) {
                if (c->s->records[k].id && strcmp(c->s->records[k].id, fd->type_name) == 0) {
                    fd->type = FT_RECORD;
                    fd->rec = &c->s->records[k];
                    found = true;
                }
            }
            if (!found) {
                /* candidates: built-in types and record ids */
                const char **cands = pool_alloc(c->pl, (c->s->nrecords + 10) * sizeof(char *));
                size_t nc = 0;
                for (size_t k = 0; scalar_types[k]; k++)
                    cands[nc++] = scalar_types[k];
                for (size_t k = 0; k < c->s->nrecords; k++) {
                    if (c->s->records[k].id)
                        cands[nc++] = c->s->records[k].id;
                }
                const char *close = suggest(fd->type_name, cands);
                diag_error(c->d, fd->type_pos, path_key(c, p, "type"),
                           "unknown type \"%s\"%s%s%s (types: bool, i32, i64, u32, u64, f64, "
                           "string, bytes, or the id of a record)",
                           fd->type_name, close ? "; did you mean \"" : "", close ? close : "",
                           close ? "\"?" : "");
                fd->type_name = NULL;
            }
        }
        if (!fd->name)
            continue;
        fd->member = ident_escape(c->pl, fd->name);
        if (fd->array)
            fd->len_member = pool_printf(c->pl, "%s_len", fd->member);
        if (fd->optional)
            fd->has_member = pool_printf(c->pl, "has_%s", fd->member);
    }
    /* Member names must be unique within the struct: names, "<x>_len",
     * "has_<x>", and escaped keywords ("default" vs "default_"). */
    for (size_t i = 0; i < r->nfields; i++) {
        field *fi = &r->fields[i];
        if (!fi->name)
            continue;
        const char *mine[3] = {fi->member, fi->len_member, fi->has_member};
        for (size_t j = 0; j < i; j++) {
            field *fj = &r->fields[j];
            if (!fj->name)
                continue;
            const char *theirs[3] = {fj->member, fj->len_member, fj->has_member};
            bool clash = false;
            for (int a = 0; a < 3 && !clash; a++) {
                for (int b = 0; b < 3 && !clash; b++) {
                    if (mine[a] && theirs[b] && strcmp(mine[a], theirs[b]) == 0) {
                        const char *p = path_index(c, path_key(c, rpath, "fields"), i);
                        if (strcmp(fi->name, fj->name) == 0)
                            diag_error(c->d, fi->name_pos, path_key(c, p, "name"),
                                       "duplicate field name \"%s\" (also fields[%zu])",
                                       fi->name, j);
                        else
                            diag_error(c->d, fi->name_pos, path_key(c, p, "name"),
                                       "field \"%s\" and fields[%zu] \"%s\" both need the "
                                       "struct member %s; rename one",
                                       fi->name, j, fj->name, mine[a]);
                        clash = true;
                    }
                }
            }
        }
    }
}

/* Depth-first over by-value record fields: finds cycles and fixes the
 * definition order (a record after every record it holds by value). */
static void order_record(ctx *c, record *r, record **order, size_t *n)
{
    if (r->visit == 2)
        return;
    r->visit = 1;
    for (size_t i = 0; i < r->nfields; i++) {
        field *fd = &r->fields[i];
        if (fd->type != FT_RECORD || !fd->rec || fd->array)
            continue;
        if (fd->rec->visit == 1) {
            size_t ri = (size_t)(r - c->s->records);
            const char *p = path_index(c, path_key(c, path_index(c, "$.records", ri), "fields"),
                                       i);
            diag_error(c->d, fd->type_pos, path_key(c, p, "type"),
                       "record %s holds record %s by value, which holds %s again: a struct "
                       "cannot contain itself; make one of the fields an array",
                       r->id, fd->rec->id, r->id);
            fd->rec = NULL;
            continue;
        }
        order_record(c, fd->rec, order, n);
    }
    r->visit = 2;
    r->emit_order = (int)*n;
    order[(*n)++] = r;
}

/* ------------------------------------------------------------------------
 * Entities
 * ---------------------------------------------------------------------- */

/* The keys every entity has; each kind adds its parameters (kinds.c) and,
 * for caches, "body". */
static const char *const entity_required_keys[] = {"id", "kind", "namespace", "name", NULL};
static const char *const entity_optional_keys[] = {"param", "description", NULL};
#define ENTITY_KEYS_MAX 16

/* "Lock", "RwLock", …: the names of kinds.c's rows, in order. */
static const char *const *kind_names(void)
{
    static const char *names[KIND_MAX + 1];
    for (int k = 0; k < kind_count(); k++)
        names[k] = kind_info(k)->name;
    return names;
}

static const char *const name_type_names[] = {"str", "bytes", "u64", "i64", NULL};

/* The keys of an entity of kind kd (NULL: of an unknown kind, so every
 * key any kind has), the required ones, and the keys other kinds have
 * with why they are wrong here. */
static void entity_keys(ctx *c, const kind_desc *kd, const char **allowed,
                        const char **required, misplaced_key *misplaced)
{
    size_t na = 0, nr = 0, nm = 0;
    for (size_t i = 0; entity_required_keys[i]; i++)
        allowed[na++] = required[nr++] = entity_required_keys[i];
    for (size_t i = 0; entity_optional_keys[i]; i++)
        allowed[na++] = entity_optional_keys[i];
    for (const param_desc *const *p = kind_all_params(); *p; p++) {
        /* the kind's own parameter of that key (each kind says whether
         * it is required), or NULL */
        const param_desc *own = NULL;
        for (size_t i = 0; kd && kd->params[i]; i++)
            own = !strcmp(kd->params[i]->key, (*p)->key) ? kd->params[i] : own;
        if (!kd || own) {
            allowed[na++] = (*p)->key;
            if (own && own->required)
                required[nr++] = (*p)->key;
        } else {
            misplaced[nm++] = (misplaced_key){(*p)->key, pool_printf(c->pl, (*p)->elsewhere,
                                                                     kd->name)};
        }
    }
    if (!kd || kd->fair_macro)
        allowed[na++] = "fair";
    else
        misplaced[nm++] = (misplaced_key){
            "fair", pool_printf(c->pl, "a %s has no fair mode (a Lock or an RwLock has)",
                                kd->name)};
    if (!kd || kd->has_body)
        allowed[na++] = "body";
    else
        misplaced[nm++] = (misplaced_key){
            "body",
            pool_printf(c->pl, "only a Cache or a HashedCache has a body (a %s does not)",
                        kd->name)};
    allowed[na] = NULL;
    required[nr] = NULL;
    misplaced[nm] = (misplaced_key){NULL, NULL};
}

/* The kind's parameters (kinds.c) into e->params, then the kind's rule
 * across them. Returns false after reporting. */
static bool parse_params(ctx *c, const cg_json_value *v, const char *path, entity *e)
{
    const kind_desc *kd = kind_info(e->kind);
    const cg_json_member *given[KIND_PARAMS_MAX] = {NULL};
    bool good = true, all = true;
    for (size_t i = 0; kd->params[i]; i++) {
        const param_desc *pd = kd->params[i];
        param_value *pv = &e->params[i];
        const char *pp = path_key(c, path, pd->key);
        pv->ms = pd->default_ms;
        if (!(given[i] = member(v, pd->key))) {
            all = all && !pd->required; /* a missing required key is reported already */
            continue;
        }
        bool ok = pd->rule == RULE_DURATION
                      ? get_duration(c, given[i]->value, pp, pd->key, &pv->ms)
                      : get_positive(c, given[i]->value, pp, pd->key, &pv->num, &pv->text);
        good = good && ok;
        all = all && ok;
    }
    if (all && kd->check) {
        char why[300];
        int bad = kd->check(e, why, sizeof(why));
        if (bad >= 0) {
            diag_error(c->d, given[bad]->value->pos, path_key(c, path, kd->params[bad]->key),
                       "%s", why);
            good = false;
        }
    }
    return good;
}

static void parse_entity(ctx *c, const cg_json_value *v, const char *path, entity *e, bool *ok)
{
    e->pos = v->pos;
    *ok = false;
    if (v->type != CG_JSON_T_OBJECT) {
        check_object(c, v, path, "an entity", entity_required_keys, NULL, NULL);
        return;
    }
    /* The kind first: it decides which keys are allowed. */
    const cg_json_member *m = member(v, "kind");
    bool kind_ok = false;
    if (m) {
        const char *k = get_string(c, m->value, path_key(c, path, "kind"), "kind");
        const char *const *names = kind_names();
        for (int i = 0; k && names[i]; i++) {
            if (strcmp(k, names[i]) == 0) {
                e->kind = i;
                kind_ok = true;
            }
        }
        if (k && !kind_ok) {
            const char *close = suggest(k, names);
            diag_error(c->d, m->value->pos, path_key(c, path, "kind"),
                       "unknown kind \"%s\"%s%s%s (kinds: %s)", k,
                       close ? "; did you mean \"" : "", close ? close : "",
                       close ? "\"?" : "", join(c, names));
        }
    }
    const char *allowed[ENTITY_KEYS_MAX], *required[ENTITY_KEYS_MAX];
    misplaced_key misplaced[ENTITY_KEYS_MAX];
    entity_keys(c, kind_ok ? kind_info(e->kind) : NULL, allowed, required, misplaced);
    check_object(c, v, path, "an entity", allowed, required, misplaced);

    bool good = kind_ok;
    e->id_pos = v->pos;
    if ((m = member(v, "id"))) {
        e->id_pos = m->value->pos;
        e->id = get_ident(c, m->value, path_key(c, path, "id"), "an entity id");
    }
    good = good && e->id;
    e->ns_pos = v->pos;
    if ((m = member(v, "namespace"))) {
        e->ns_pos = m->value->pos;
        const char *np = path_key(c, path, "namespace");
        e->ns = get_string(c, m->value, np, "namespace");
        const char *sep = e->ns ? strpbrk(e->ns, ":{}") : NULL;
        if (e->ns && (e->ns[0] == '\0' || strlen(e->ns) > WK_NAMESPACE_MAX)) {
            diag_error(c->d, m->value->pos, np, "namespace must be 1 to %d bytes long",
                       WK_NAMESPACE_MAX);
            e->ns = NULL;
        } else if (sep) {
            /* The runtime's rule and words (wk_entity_check_msg): with a
             * ':' Lock "jobs:billing" + "daily" would be Lock "jobs" +
             * "billing:daily", so a capability on one namespace could
             * reach the other's items. */
            diag_error(c->d, m->value->pos, np,
                       "namespace \"%s\" contains '%c' (':', '{' and '}' separate the parts "
                       "of a key, so such a namespace would share keys with another one)",
                       e->ns, *sep);
            e->ns = NULL;
        }
    }
    good = good && e->ns;
    e->name_type = NAME_STR;
    if ((m = member(v, "name"))) {
        const char *np = path_key(c, path, "name");
        const char *t = get_string(c, m->value, np, "the name type");
        bool found = false;
        for (int i = 0; t && name_type_names[i]; i++) {
            if (strcmp(t, name_type_names[i]) == 0) {
                e->name_type = (name_type)i;
                found = true;
            }
        }
        if (t && !found) {
            const char *close = suggest(t, name_type_names);
            diag_error(c->d, m->value->pos, np, "unknown name type \"%s\"%s%s%s (types: %s)", t,
                       close ? "; did you mean \"" : "", close ? close : "",
                       close ? "\"?" : "", join(c, name_type_names));
        }
        good = good && found;
    } else {
        good = false;
    }
    e->param = "name";
    if ((m = member(v, "param"))) {
        const char *pp = path_key(c, path, "param");
        const char *pname = get_ident(c, m->value, pp, "the name parameter");
        if (pname) {
            const char *esc = ident_escape(c->pl, pname);
            if (param_clashes(esc)) {
                diag_error(c->d, m->value->pos, pp,
                           "the name parameter \"%s\" clashes with a parameter of the generated "
                           "accessors (token, body, state, …); choose another",
                           pname);
                good = false;
            } else {
                e->param = esc;
            }
        } else {
            good = false;
        }
    }
    if (e->name_type == NAME_BYTES)
        e->param_len = pool_printf(c->pl, "%s_len", e->param);
    e->description = get_description(c, v, path);
    if ((m = member(v, "fair"))) {
        if (m->value->type != CG_JSON_T_BOOL) {
            diag_error(c->d, m->value->pos, path_key(c, path, "fair"),
                       "fair must be true or false, not %s", cg_json_type_name(m->value->type));
            good = false;
        } else {
            e->fair = m->value->boolean;
        }
    }
    if (kind_ok)
        good = parse_params(c, v, path, e) && good;
    *ok = good;
}

/* ------------------------------------------------------------------------
 * Capabilities
 * ---------------------------------------------------------------------- */

static const char *const cap_keys[] = {"id", "default", "grants", "description", NULL};
static const char *const cap_required[] = {"id", "default", NULL};
static const char *const grant_names[] = {"none", "read", "write", NULL};

static bool get_grant(ctx *c, const cg_json_value *v, const char *path, grant *out)
{
    const char *g = get_string(c, v, path, "a grant");
    if (!g)
        return false;
    for (int i = 0; grant_names[i]; i++) {
        if (strcmp(g, grant_names[i]) == 0) {
            *out = (grant)i;
            return true;
        }
    }
    const char *close = suggest(g, grant_names);
    diag_error(c->d, v->pos, path, "unknown grant \"%s\"%s%s%s (grants: none, read, write)", g,
               close ? "; did you mean \"" : "", close ? close : "", close ? "\"?" : "");
    return false;
}

static void parse_capability(ctx *c, const cg_json_value *v, const char *path, capability *cap,
                             const bool *entity_ok)
{
    cap->pos = v->pos;
    cap->grants = pool_alloc(c->pl, (c->s->nentities + 1) * sizeof(grant));
    cap->listed = pool_alloc(c->pl, (c->s->nentities + 1) * sizeof(bool));
    if (!check_object(c, v, path, "a capability", cap_keys, cap_required, NULL))
        return;
    const cg_json_member *m;
    cap->id_pos = v->pos;
    if ((m = member(v, "id"))) {
        cap->id_pos = m->value->pos;
        cap->id = get_ident(c, m->value, path_key(c, path, "id"), "a capability id");
    }
    cap->description = get_description(c, v, path);
    if ((m = member(v, "default")))
        get_grant(c, m->value, path_key(c, path, "default"), &cap->default_grant);
    for (size_t i = 0; i < c->s->nentities; i++)
        cap->grants[i] = cap->default_grant;
    if (!(m = member(v, "grants")))
        return;
    const char *gpath = path_key(c, path, "grants");
    const cg_json_value *g = m->value;
    if (g->type != CG_JSON_T_OBJECT) {
        diag_error(c->d, g->pos, gpath,
                   "grants must be an object mapping entity ids to \"none\", \"read\" or "
                   "\"write\", not %s",
                   cg_json_type_name(g->type));
        return;
    }
    for (size_t i = 0; i < g->count; i++) {
        const cg_json_member *gm = &g->members[i];
        const char *p = path_key(c, gpath, gm->key);
        for (size_t j = 0; j < i; j++) {
            if (strcmp(g->members[j].key, gm->key) == 0 && g->members[j].key_len == gm->key_len) {
                diag_error(c->d, gm->pos, p, "duplicate key \"%s\" (first at line %d:%d)",
                           gm->key, g->members[j].pos.line, g->members[j].pos.col);
                break;
            }
        }
        size_t ei = c->s->nentities;
        for (size_t k = 0; k < c->s->nentities; k++) {
            const entity *e = &c->s->entities[k];
            if (e->id && strcmp(e->id, gm->key) == 0 && strlen(gm->key) == gm->key_len)
                ei = k;
        }
        if (ei == c->s->nentities) {
            const char **cands = pool_alloc(c->pl, (c->s->nentities + 1) * sizeof(char *));
            size_t nc = 0;
            for (size_t k = 0; k < c->s->nentities; k++) {
                if (c->s->entities[k].id)
                    cands[nc++] = c->s->entities[k].id;
            }
            const char *close = suggest(gm->key, cands);
            diag_error(c->d, gm->pos, p, "no entity has the id \"%s\"%s%s%s", gm->key,
                       close ? "; did you mean \"" : "", close ? close : "",
                       close ? "\"?" : "");
            continue;
        }
        grant gr;
        if (get_grant(c, gm->value, p, &gr) && entity_ok[ei]) {
            cap->grants[ei] = gr;
            cap->listed[ei] = true;
        }
    }
}

/* ------------------------------------------------------------------------
 * Generated names
 * ---------------------------------------------------------------------- */

/* Whether item i repeats the id of an earlier one (already reported as a
 * duplicate id, so its generated names are not claimed a second time). */
static bool repeats_entity(const schema *s, size_t i)
{
    for (size_t j = 0; j < i; j++) {
        if (s->entities[j].id && strcmp(s->entities[j].id, s->entities[i].id) == 0)
            return true;
    }
    return false;
}

static bool repeats_record(const schema *s, size_t i)
{
    for (size_t j = 0; j < i; j++) {
        if (s->records[j].id && strcmp(s->records[j].id, s->records[i].id) == 0)
            return true;
    }
    return false;
}

static bool repeats_cap(const schema *s, size_t i)
{
    for (size_t j = 0; j < i; j++) {
        if (s->caps[j].id && strcmp(s->caps[j].id, s->caps[i].id) == 0)
            return true;
    }
    return false;
}

/* Claims "<prefix>_<fn>" for each of `fns` (NULL-terminated) as a `what`. */
static void claim_functions(ctx *c, const char *prefix, const char *const *fns, const char *path,
                            cg_json_pos pos, const char *what)
{
    for (size_t k = 0; fns[k]; k++)
        names_claim(c->names, c->d, pool_printf(c->pl, "%s_%s", prefix, fns[k]), path, pos, what);
}

static void claim_names(ctx *c, const bool *entity_ok)
{
    schema *s = c->s;
    const char *svc = s->service;
    cg_json_pos top = {1, 1};
    bool any_bytes = false;
    for (size_t i = 0; i < s->nrecords; i++) {
        record *r = &s->records[i];
        for (size_t k = 0; k < r->nfields; k++)
            any_bytes = any_bytes || r->fields[k].type == FT_BYTES;
    }
    names_claim(c->names, c->d, pool_printf(c->pl, "%s_H", s->service_upper), "$.service", top,
                "include guard");
    names_claim(c->names, c->d, pool_printf(c->pl, "%s_entities", svc), "$.service", top,
                "entity table");
    names_claim(c->names, c->d, pool_printf(c->pl, "%s_ENTITY_COUNT", s->service_upper),
                "$.service", top, "entity count");
    if (any_bytes)
        names_claim(c->names, c->d, pool_printf(c->pl, "%s_bytes", svc), "$.service", top,
                    "bytes type");
    for (size_t i = 0; i < s->nrecords; i++) {
        record *r = &s->records[i];
        if (!r->id || repeats_record(s, i))
            continue;
        const char *p = path_index(c, "$.records", i);
        r->c_type = pool_printf(c->pl, "%s_%s", svc, r->id);
        r->fn_prefix = r->c_type;
        r->codec = pool_printf(c->pl, "%s_%s_codec", svc, r->id);
        names_claim(c->names, c->d, r->c_type, p, r->pos, "record type");
        static const char *const fns[] = {"init", "free", "encode", "decode", NULL};
        claim_functions(c, r->fn_prefix, fns, p, r->pos, "record function");
        if (r->used_by_cache)
            names_claim(c->names, c->d, r->codec, p, r->pos, "record codec");
    }
    for (size_t i = 0; i < s->nentities; i++) {
        entity *e = &s->entities[i];
        if (!entity_ok[i] || repeats_entity(s, i))
            continue;
        const char *p = path_index(c, "$.entities", i);
        e->fn_prefix = pool_printf(c->pl, "%s_%s", svc, e->id);
        e->descriptor = pool_printf(c->pl, "%s_%s_entity", svc, e->id);
        names_claim(c->names, c->d, e->descriptor, p, e->pos, "entity descriptor");
        size_t nops;
        const op_desc *ops = kind_ops(e, &nops);
        for (size_t k = 0; k < nops; k++)
            names_claim(c->names, c->d, pool_printf(c->pl, "%s_%s", e->fn_prefix, ops[k].op), p,
                        e->pos, "accessor");
        const op_desc *parts = kind_parts(e, &nops);
        for (size_t k = 0; k < nops; k++)
            names_claim(c->names, c->d, pool_printf(c->pl, "%s_%s", e->fn_prefix, parts[k].op), p,
                        e->pos, "constructor");
    }
    for (size_t i = 0; i < s->ncaps; i++) {
        capability *cap = &s->caps[i];
        if (!cap->id || repeats_cap(s, i))
            continue;
        const char *p = path_index(c, "$.capabilities", i);
        cap->c_type = pool_printf(c->pl, "%s_%s", svc, cap->id);
        names_claim(c->names, c->d, cap->c_type, p, cap->pos, "capability handle type");
        static const char *const fns[] = {"cap_new", "open", "narrow", "close", NULL};
        claim_functions(c, cap->c_type, fns, p, cap->pos, "capability function");
        for (size_t ei = 0; ei < s->nentities; ei++) {
            entity *e = &s->entities[ei];
            if (!entity_ok[ei] || repeats_entity(s, ei))
                continue;
            /* a query the capability does not grant is a macro of the same
             * name (a compile error when called), so it claims the name too */
            size_t nops;
            const op_desc *ops = kind_ops(e, &nops);
            for (size_t k = 0; k < nops; k++) {
                bool granted = cap->grants[ei] == GRANT_WRITE ||
                               (cap->grants[ei] == GRANT_READ && !ops[k].write);
                names_claim(c->names, c->d,
                            pool_printf(c->pl, "%s_%s_%s", cap->c_type, e->id, ops[k].op), p,
                            cap->pos, granted ? "handle function" : "ungranted handle function");
            }
        }
    }
}

/* ------------------------------------------------------------------------
 * The schema
 * ---------------------------------------------------------------------- */

static const char *const top_keys[] = {"service", "description", "entities", "records",
                                       "capabilities", NULL};
static const char *const top_required[] = {"service", "entities", NULL};
static const char *const entity_id_what[] = {"entity", "record", "capability"};

/* The layout check_duplicate_ids() reads a list's items by: entities,
 * records and capabilities each hold `id` and `id_pos`. */
#define ID_LAYOUT(type) sizeof(type), offsetof(type, id), offsetof(type, id_pos)

/* Reports ids used twice in one list (entities, records or capabilities):
 * its n items, `size` bytes each, the id and its position at the offsets
 * ID_LAYOUT() gives. */
static void check_duplicate_ids(ctx *c, const char *list, const void *items, size_t n, size_t size,
                                size_t id_at, size_t pos_at, int what)
{
#define ID_AT(k) (*(const char *const *)((const char *)items + (k)*size + id_at))
#define POS_AT(k) (*(const cg_json_pos *)((const char *)items + (k)*size + pos_at))
    for (size_t i = 0; i < n; i++) {
        if (!ID_AT(i))
            continue;
        for (size_t j = 0; j < i; j++) {
            if (ID_AT(j) && strcmp(ID_AT(i), ID_AT(j)) == 0) {
                diag_error(c->d, POS_AT(i), path_key(c, path_index(c, list, i), "id"),
                           "duplicate %s id \"%s\" (also %s[%zu], line %d:%d)",
                           entity_id_what[what], ID_AT(i), list + 2, j, POS_AT(j).line,
                           POS_AT(j).col);
                break;
            }
        }
    }
#undef ID_AT
#undef POS_AT
}

/* The schema's list `key` (records, entities, capabilities): NULL when
 * it is absent, or not an array (reported). */
static const cg_json_value *top_list(ctx *c, const cg_json_value *root, const char *key)
{
    const cg_json_member *m = member(root, key);
    if (!m)
        return NULL;
    if (m->value->type != CG_JSON_T_ARRAY) {
        diag_error(c->d, m->value->pos, path_key(c, "$", key), "%s must be an array, not %s", key,
                   cg_json_type_name(m->value->type));
        return NULL;
    }
    return m->value;
}

bool check_schema(const cg_json_value *root, const char *source_name, pool *pl, diag *d,
                  schema *out)
{
    ctx cx = {pl, d, names_new(pl), out};
    ctx *c = &cx;
    memset(out, 0, sizeof(*out));
    out->source_name = source_name;
    if (!check_object(c, root, "$", "the schema", top_keys, top_required, NULL))
        return false;
    const cg_json_member *m;

    if ((m = member(root, "service"))) {
        out->service = get_ident(c, m->value, "$.service", "the service name");
        if (out->service)
            out->service_upper = ident_upper(pl, out->service);
    }
    out->description = get_description(c, root, "$");

    /* Records first: entities refer to them. */
    const cg_json_value *rv = top_list(c, root, "records");
    if (rv) {
        out->nrecords = rv->count;
        out->records = pool_alloc(pl, (rv->count + 1) * sizeof(record));
        for (size_t i = 0; i < rv->count; i++)
            parse_record(c, rv->items[i], path_index(c, "$.records", i), &out->records[i]);
    }
    for (size_t i = 0; i < out->nrecords; i++)
        resolve_record(c, &out->records[i], i);

    bool *entity_ok = NULL;
    const cg_json_value *ev = top_list(c, root, "entities");
    if (ev && ev->count == 0) {
        diag_error(d, ev->pos, "$.entities", "a schema needs at least one entity");
    } else if (ev) {
        out->nentities = ev->count;
        out->entities = pool_alloc(pl, ev->count * sizeof(entity));
        entity_ok = pool_alloc(pl, ev->count * sizeof(bool));
        for (size_t i = 0; i < ev->count; i++) {
            const char *p = path_index(c, "$.entities", i);
            entity *e = &out->entities[i];
            parse_entity(c, ev->items[i], p, e, &entity_ok[i]);
            /* the body: a record id */
            const cg_json_member *b =
                ev->items[i]->type == CG_JSON_T_OBJECT ? member(ev->items[i], "body") : NULL;
            if (b && entity_ok[i] && kind_info(e->kind)->has_body) {
                const char *bp = path_key(c, p, "body");
                const char *rid = get_string(c, b->value, bp, "body (a record id)");
                bool found = false;
                for (size_t k = 0; rid && k < out->nrecords; k++) {
                    record *r = &out->records[k];
                    if (r->id && strcmp(r->id, rid) == 0) {
                        e->body = r;
                        r->used_by_cache = true;
                        found = true;
                    }
                }
                if (rid && !found) {
                    diag_error(d, b->value->pos, bp, "no record has the id \"%s\"", rid);
                }
                entity_ok[i] = found;
            }
        }
    }
    if (!entity_ok)
        entity_ok = pool_alloc(pl, sizeof(bool));

    /* Duplicate ids, and entities sharing keys. */
    {
        size_t n = out->nentities;
        check_duplicate_ids(c, "$.entities", out->entities, n, ID_LAYOUT(entity), 0);
        for (size_t i = 0; i < n; i++) {
            entity *e = &out->entities[i];
            if (!entity_ok[i])
                continue;
            for (size_t j = 0; j < i; j++) {
                entity *o = &out->entities[j];
                if (entity_ok[j] && o->kind == e->kind && strcmp(o->ns, e->ns) == 0) {
                    diag_error(d, e->ns_pos,
                               path_key(c, path_index(c, "$.entities", i), "namespace"),
                               "entities %s and %s (entities[%zu]) are both %s:%s: they would "
                               "share Redis keys; give each its own namespace",
                               e->id, o->id, j, kind_info(e->kind)->name, e->ns);
                    break;
                }
            }
        }
        check_duplicate_ids(c, "$.records", out->records, out->nrecords, ID_LAYOUT(record), 1);
    }

    /* Record definition order, and cycles. */
    out->record_order = pool_alloc(pl, (out->nrecords + 1) * sizeof(record *));
    size_t norder = 0;
    for (size_t i = 0; i < out->nrecords; i++)
        order_record(c, &out->records[i], out->record_order, &norder);

    const cg_json_value *cv = top_list(c, root, "capabilities");
    if (cv) {
        out->ncaps = cv->count;
        out->caps = pool_alloc(pl, (cv->count + 1) * sizeof(capability));
        for (size_t i = 0; i < cv->count; i++)
            parse_capability(c, cv->items[i], path_index(c, "$.capabilities", i), &out->caps[i],
                             entity_ok);
        check_duplicate_ids(c, "$.capabilities", out->caps, cv->count, ID_LAYOUT(capability), 2);
    }

    if (out->service)
        claim_names(c, entity_ok);
    return d->errors == 0;
}
