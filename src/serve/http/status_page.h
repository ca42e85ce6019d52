/* status_page.h (private to serve/): the status page served at GET /, its
 * files embedded at build time (src/serve/http/ui/, turned into ui_assets.c by
 * src/serve/http/ui/embed.py), and the training curves it draws
 * (GET /status/training). */
#ifndef DL_SERVE_STATUS_PAGE_H
#define DL_SERVE_STATUS_PAGE_H

#include "serve/registry.h"

#include <stddef.h>

/* One embedded file: static data, never freed. */
typedef struct ui_asset {
    const char          *name;    /* base name: "index.html", "status.js" */
    const char          *ctype;   /* its Content-Type */
    const unsigned char *data;
    size_t               len;
} ui_asset;

/* The generated table (ui_assets.c). */
extern const ui_asset ui_assets[];
extern const size_t ui_nassets;

/* The embedded file called name, or NULL (borrowed: static). */
const ui_asset *ui_asset_find(const char *name);

/* Training curves of the newest served version of each model, read from
 * its metrics.csv under models_dir (new reference; NULL when out of memory):
 * {"models": [{"name", "version", "columns": ["epoch", "lr", ...],
 *              "rows": [[1, 0.001, ...], ...]}]}
 * A model whose file is missing is left out; one whose file cannot be read
 * (over 1 MiB, ragged rows) carries "error" instead of "rows". Values that
 * are not finite numbers are null. Reads files: call it off hot paths. */
json_t *status_training(registry *reg, const char *models_dir);

#endif /* DL_SERVE_STATUS_PAGE_H */
