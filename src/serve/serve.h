/* serve.h (private to serve/): the daemon's shared core in one include,
 * for the core's own files. A transport (http/, kafka/) includes the parts
 * it meets itself: batcher.h and registry.h (and stats.h).
 *
 *   transport (http/, kafka/) --infer_req--> batcher (batcher.h) --> worker
 *        |                                      |  holds a reference on the
 *        |                                      v  served version (registry.h)
 *        +--> stats (stats.h): counters and histograms for /metrics, /status
 *
 * Thread-safety: every function of these headers may be called from any
 * thread unless its comment says otherwise. */
#ifndef DL_SERVE_SERVE_H
#define DL_SERVE_SERVE_H

#include "serve/dl_serve.h"
#include "serve/registry.h"
#include "serve/stats.h"
#include "serve/batcher.h"

/* `git describe --always --dirty --tags` of the source the daemon was
 * built from, or "unknown" (build_info.c, made by meson's vcs_tag). */
extern const char dl_serve_commit[];

#endif /* DL_SERVE_SERVE_H */
