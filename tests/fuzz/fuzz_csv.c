/* fuzz_csv.c: CSV datasets (src/data/dataset.c): samples of `dim`
 * features with or without a label first, an optional header line.
 *
 * Input: one byte (bits 0-2: dim - 1, bit 3: a label first), then the
 * file's text. */
#include "fuzz.h"
#include "data/dl_data.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fz_quiet();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int64_t dim = (data[0] & 7) + 1;
    bool has_label = data[0] & 8;
    /* A copy of exactly the text, so that ASan sees any read past it. */
    char *text = malloc(size);
    FZ_CHECK(text != NULL, "out of memory");
    memcpy(text, data + 1, size - 1);
    dl_dataset *ds = NULL;
    dl_err err = {0};
    dl_status st = dl_dataset_parse_csv(text, size - 1, "fuzz.csv", dim, has_label, NULL,
                                        &ds, &err);
    if (st != DL_OK) {
        fz_check_failure(st, &err);
        FZ_CHECK(ds == NULL, "a refused file came back");
    } else {
        FZ_CHECK(ds->n >= 1 && ds->dim == dim, "n %lld, dim %lld", (long long)ds->n,
                 (long long)ds->dim);
        FZ_CHECK(!has_label || ds->y, "labels lost");
        fz_touch(ds->x, (size_t)(ds->n * ds->dim) * sizeof(float));
        for (int64_t i = 0; has_label && i < ds->n; i++)
            FZ_CHECK(ds->y[i] >= 0, "label %d", ds->y[i]);
        dl_dataset_free(ds);
    }
    free(text);
    return 0;
}
