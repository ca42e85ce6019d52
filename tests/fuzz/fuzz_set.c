/* fuzz_set.c: `--set section.key=value` overrides of the daemon's options
 * (src/serve/conf.c, src/util/conf.c): each input line one override,
 * applied over the defaults, then the cross-field checks; what passes
 * prints as an INI file.
 *
 * Input: up to 32 lines, each an override. */
#include "fuzz.h"
#include "serve/dl_serve.h"

static dl_serve_conf defaults, conf;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fz_quiet();
    dl_err err = {0};
    FZ_CHECK(dl_serve_conf_load(&defaults, NULL, &err) == DL_OK, "%s", err.msg);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* NUL-terminated lines in one copy of the input. */
    char *text = malloc(size + 1);
    FZ_CHECK(text != NULL, "out of memory");
    memcpy(text, data, size);
    text[size] = '\0';
    const char *ov[32];
    int n = 0;
    for (char *p = text; p && n < 32;) {
        ov[n++] = p;
        p = strchr(p, '\n');
        if (p)
            *p++ = '\0';
    }
    memcpy(&conf, &defaults, sizeof(conf));
    dl_err err = {0};
    dl_status st = dl_serve_conf_apply(&conf, ov, n, &err);
    if (st == DL_OK)
        st = dl_serve_conf_validate(&conf, &err);
    if (st != DL_OK) {
        fz_check_failure(st, &err);
    } else {
        char *out = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&out, &len);
        FZ_CHECK(f != NULL, "open_memstream");
        dl_conf_print(dl_serve_opts, &conf, f);
        fclose(f);
        free(out);
    }
    free(text);
    return 0;
}
