/*
 * collection/live_view_scripts.h — LiveView's commit script, shared with
 * the benchmark so raw hiredis can do exactly the same Redis work. Not
 * installed.
 */
#ifndef WK_COLLECTION_LIVE_VIEW_SCRIPTS_H
#define WK_COLLECTION_LIVE_VIEW_SCRIPTS_H

#include <wakuwaku/query.h>

/* KEYS head, log; ARGV parent, diff, body, max_diffs (collection/live_view.c). */
extern const wk_script wk__live_view_commit_script;

#endif /* WK_COLLECTION_LIVE_VIEW_SCRIPTS_H */
