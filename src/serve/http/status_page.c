/* status_page.c: what the status page (GET /) needs from the daemon
 * besides /status and /metrics: its embedded files and the training curves. */
#define _POSIX_C_SOURCE 200809L
#include "serve/http/status_page.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* metrics.csv holds one short line an epoch: larger is not ours to parse. */
#define CURVES_MAX_BYTES (1 << 20)

const ui_asset *ui_asset_find(const char *name)
{
    for (size_t i = 0; i < ui_nassets; i++)
        if (strcmp(ui_assets[i].name, name) == 0)
            return &ui_assets[i];
    return NULL;
}

/* ---- training curves ------------------------------------------------------ */

/* The next line of *p (its newline replaced by NUL), or NULL at the end. */
static char *next_line(char **p)
{
    char *line = *p;
    if (!*line)
        return NULL;
    char *nl = strchr(line, '\n');
    if (nl) {
        *nl = '\0';
        *p = nl + 1;
    } else {
        *p = line + strlen(line);
    }
    size_t n = strlen(line);
    if (n > 0 && line[n - 1] == '\r')
        line[n - 1] = '\0';
    return line;
}

/* The header's column names. */
static json_t *csv_columns(char *line)
{
    json_t *cols = json_array();
    for (char *save = NULL, *f = strtok_r(line, ",", &save); cols && f;
         f = strtok_r(NULL, ",", &save))
        if (json_array_append_new(cols, json_string(f)) != 0) {
            json_decref(cols);
            return NULL;
        }
    return cols;
}

static bool has_column(const json_t *cols, const char *name)
{
    size_t i;
    json_t *c;
    json_array_foreach(cols, i, c)
        if (strcmp(json_string_value(c), name) == 0)
            return true;
    return false;
}

/* The outputs of a model of several, read from the header by name: a
 * column <name>_test_loss beside <name>_test_accuracy or <name>_test_rmse
 * gives {"name", "metric": "accuracy" or "rmse"}. None for one output. */
static json_t *csv_outputs(const json_t *cols)
{
    static const char suffix[] = "_test_loss";
    const size_t ns = sizeof(suffix) - 1;
    json_t *outs = json_array();
    size_t i;
    json_t *c;
    json_array_foreach(cols, i, c) {
        const char *col = json_string_value(c);
        size_t len = strlen(col);
        if (!outs || len <= ns || len - ns >= DL_NAME_MAX || strcmp(col + len - ns, suffix))
            continue;
        char name[DL_NAME_MAX], want[DL_NAME_MAX + 32];
        snprintf(name, sizeof(name), "%.*s", (int)(len - ns), col);
        const char *metric = NULL;
        snprintf(want, sizeof(want), "%s_test_accuracy", name);
        if (has_column(cols, want))
            metric = "accuracy";
        snprintf(want, sizeof(want), "%s_test_rmse", name);
        if (!metric && has_column(cols, want))
            metric = "rmse";
        if (metric && json_array_append_new(outs, json_pack("{s:s, s:s}", "name", name,
                                                            "metric", metric)) != 0) {
            json_decref(outs);
            outs = NULL;
        }
    }
    return outs;
}

/* One row of numbers (null for what is not a finite number); its field
 * count in *n. */
static json_t *csv_row(const char *line, size_t *n)
{
    json_t *row = json_array();
    *n = 0;
    for (const char *f = line; row; f++) {
        char *end;
        double v = strtod(f, &end);
        bool num = end != f && (*end == ',' || *end == '\0') && isfinite(v);
        if (json_array_append_new(row, num ? json_real(v) : json_null()) != 0) {
            json_decref(row);
            return NULL;
        }
        (*n)++;
        f = strchr(f, ',');
        if (!f)
            break;
    }
    return row;
}

/* "columns", "outputs" and "rows" (or "error") of one model from the CSV
 * text (modified). False when out of memory. */
static bool curves_from_csv(json_t *m, char *text, const char *path)
{
    char *p = text, *line = next_line(&p);
    json_t *cols = line ? csv_columns(line) : json_array();
    json_t *rows = json_array();
    if (!cols || !rows || json_object_set_new(m, "columns", cols) != 0 ||
        json_object_set_new(m, "outputs", csv_outputs(cols)) != 0) {
        json_decref(rows);
        return false;
    }
    size_t want = json_array_size(cols);
    for (int lineno = 2; (line = next_line(&p)); lineno++) {
        if (!*line)
            continue;
        size_t n;
        json_t *row = csv_row(line, &n);
        if (!row || json_array_append_new(rows, row) != 0) {
            json_decref(rows);
            return false;
        }
        if (n != want) {
            json_decref(rows);
            return json_object_set_new(m, "error",
                                       json_sprintf("%s:%d: %zu fields, the header has %zu",
                                                    path, lineno, n, want)) == 0;
        }
    }
    return json_object_set_new(m, "rows", rows) == 0;
}

/* The curves of one version, or NULL when it has no metrics.csv (or out of
 * memory: *oom). */
static json_t *model_curves(const char *dir, const char *name, int64_t version, bool *oom)
{
    char path[DL_PATH_MAX + DL_NAME_MAX + 64];
    snprintf(path, sizeof(path), "%s/%s/%lld/metrics.csv", dir, name, (long long)version);
    struct stat sb;
    if (stat(path, &sb) != 0)
        return NULL;
    json_t *m = json_pack("{s:s, s:I}", "name", name, "version", (json_int_t)version);
    if (!m) {
        *oom = true;
        return NULL;
    }
    char *text = NULL;
    size_t len;
    dl_err err = {0};
    bool ok;
    if (sb.st_size > CURVES_MAX_BYTES)
        ok = json_object_set_new(m, "error", json_sprintf("%s: over %d bytes", path,
                                                          CURVES_MAX_BYTES)) == 0;
    else if (dl_file_read(path, &text, &len, &err) != DL_OK)
        ok = json_object_set_new(m, "error", json_string(err.msg)) == 0;
    else
        ok = curves_from_csv(m, text, path);
    free(text);
    if (!ok) {
        json_decref(m);
        *oom = true;
        return NULL;
    }
    return m;
}

json_t *status_training(registry *reg, const char *models_dir)
{
    json_t *status = registry_status(reg);
    json_t *list = json_array();
    bool oom = !status || !list;
    size_t i;
    json_t *e;
    json_array_foreach(status, i, e) {   /* status NULL: no entries */
        /* versions are newest first */
        json_t *newest = json_array_get(json_object_get(e, "versions"), 0);
        const char *name = json_string_value(json_object_get(e, "name"));
        if (!newest || !name)
            continue;
        json_t *m = model_curves(models_dir, name, json_integer_value(newest), &oom);
        if (oom || (m && json_array_append_new(list, m) != 0)) {
            oom = true;
            break;
        }
    }
    json_decref(status);
    if (oom) {
        json_decref(list);
        return NULL;
    }
    return json_pack("{s:o}", "models", list);
}
