/* fuzz_idx.c: IDX image and label files (src/data/dataset.c), plain or
 * gzip'd, loaded from files as training reads them.
 *
 * Input: one byte of flags (bit 0: a label file too); with labels, two
 * bytes (little-endian) of the image file's length, the image file, then
 * the label file; without, the image file. */
#include "fuzz.h"
#include "data/dl_data.h"

static char images[600], labels[600];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fz_quiet();
    snprintf(images, sizeof(images), "%s/images-idx3-ubyte", fz_tmpdir());
    snprintf(labels, sizeof(labels), "%s/labels-idx1-ubyte", fz_tmpdir());
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    bool with_labels = data[0] & 1;
    data++;
    size--;
    size_t ilen = size;
    if (with_labels) {
        if (size < 2)
            return 0;
        ilen = (size_t)data[0] | (size_t)data[1] << 8;
        data += 2;
        size -= 2;
        if (ilen > size)
            ilen = size;
        fz_write(labels, data + ilen, size - ilen);
    }
    fz_write(images, data, ilen);
    dl_dataset *ds = NULL;
    dl_err err = {0};
    dl_scaling sc = {1.0f / 255, 0.5f, 0.25f};
    dl_status st = dl_dataset_load_idx(images, with_labels ? labels : NULL, &sc, &ds, &err);
    if (st != DL_OK) {
        fz_check_failure(st, &err);
        FZ_CHECK(ds == NULL, "a refused file came back");
        return 0;
    }
    FZ_CHECK(ds->n >= 1 && ds->dim >= 1, "n %lld, dim %lld", (long long)ds->n,
             (long long)ds->dim);
    FZ_CHECK(!with_labels || ds->y, "labels lost");
    fz_touch(ds->x, (size_t)(ds->n * ds->dim) * sizeof(float));
    for (int64_t i = 0; with_labels && i < ds->n; i++)
        FZ_CHECK(ds->y[i] >= 0 && ds->y[i] <= 255, "label %d", ds->y[i]);
    dl_dataset_free(ds);
    return 0;
}
