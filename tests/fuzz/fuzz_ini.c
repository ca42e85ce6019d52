/* fuzz_ini.c: the daemon's configuration file (dlserve.conf: src/util/conf.c
 * reading it through inih, src/serve/conf.c's table and cross-field
 * checks), from a file as the daemon reads it; what loads is printed back
 * as an INI file, which loads again to the same configuration. */
#include "fuzz.h"
#include "serve/dl_serve.h"

static char path[600], again[600];
static dl_serve_conf conf, conf2;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fz_quiet();
    snprintf(path, sizeof(path), "%s/dlserve.conf", fz_tmpdir());
    snprintf(again, sizeof(again), "%s/again.conf", fz_tmpdir());
    return 0;
}

/* The configuration as dl_conf_print writes it (new). */
static char *printout(const dl_serve_conf *c)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    FZ_CHECK(f != NULL, "open_memstream");
    dl_conf_print(dl_serve_opts, c, f);
    FZ_CHECK(fclose(f) == 0, "open_memstream");
    return text;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_write(path, data, size);
    memset(&conf, 0, sizeof(conf));
    dl_err err = {0};
    dl_status st = dl_serve_conf_load(&conf, path, &err);
    if (st != DL_OK) {
        fz_check_failure(st, &err);
        return 0;
    }
    /* The printout is a file the daemon reads back as the same options. */
    char *text = printout(&conf);
    fz_write(again, text, strlen(text));
    memset(&conf2, 0, sizeof(conf2));
    st = dl_serve_conf_load(&conf2, again, &err);
    FZ_CHECK(st == DL_OK, "the printout does not load: %s\n%s", err.msg, text);
    char *text2 = printout(&conf2);
    FZ_CHECK(!strcmp(text, text2), "read back differently:\n%s\n----\n%s", text, text2);
    free(text);
    free(text2);
    return 0;
}
