/*
 * core/image.c — where the program's read-only image lies: the
 * non-writable loaded segments of the main program and of the object
 * that holds this library (the same one when linked statically). Bytes
 * there never change while the process runs (neither is ever unloaded),
 * so a string found there needs no second look (core/metrics.c).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <link.h>

#include "core/core_internal.h"

typedef struct found {
    wk__range *out;
    size_t max, n;
    bool first; /* the main program is the first object listed */
} found;

static bool holds(const struct dl_phdr_info *info, uintptr_t addr)
{
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == PT_LOAD && addr - lo < ph->p_memsz)
            return true;
    }
    return false;
}

static int visit(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    found *f = arg;
    bool main_program = f->first;
    f->first = false;
    if (!main_program && !holds(info, (uintptr_t)&wk__readonly_image))
        return 0;
    /* Loaded segments come in address order; read-only ones in a row
     * (no writable one between) make one range: the gaps between them
     * belong to the object's own reservation, never to another mapping. */
    bool open = false;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD)
            continue;
        if (ph->p_flags & PF_W) {
            open = false;
            continue;
        }
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
        if (open)
            f->out[f->n - 1].hi = hi;
        else if (f->n < f->max)
            f->out[f->n++] = (wk__range){lo, hi}, open = true;
    }
    return 0;
}

size_t wk__readonly_image(wk__range *out, size_t max)
{
    found f = {out, max, 0, true};
    dl_iterate_phdr(visit, &f);
    return f.n;
}
