/*
 * tests/fuzz/fuzz_schema.c — libFuzzer target: arbitrary bytes through the
 * code generator's parser, checker and (when the schema is valid) both
 * emitters, all in memory. Any crash, leak, hang or undefined behaviour is
 * a finding; error messages go to /dev/null.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "schema.h"

static FILE *sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!sink)
        sink = fopen("/dev/null", "w");
    char err[256];
    cg_json_pos pos;
    cg_json_doc *doc = cg_json_parse((const char *)data, size, err, sizeof(err), &pos);
    if (!doc)
        return 0;
    diag d = {"fuzz.json", sink, 0};
    pool *pl = pool_new();
    schema s;
    if (check_schema(cg_json_doc_root(doc), "fuzz.json", pl, &d, &s)) {
        outbuf h = {0}, c = {0}, fh = {0};
        emit_header(&s, &h);
        emit_source(&s, &c);
        out_reflow(&fh, &h);
        free(h.data);
        free(c.data);
        free(fh.data);
    } else if (d.errors == 0) {
        abort(); /* a refused schema must say why */
    }
    pool_free(pl);
    cg_json_doc_free(doc);
    return 0;
}
