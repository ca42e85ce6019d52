/* safetensors.h (private to nn/): reading and writing the safetensors
 * format: an 8-byte little-endian header length N, N bytes of JSON
 * {"name": {"dtype", "shape", "data_offsets": [begin, end]}, ...,
 *  "__metadata__": {"key": "string value"}}, then the data buffer. */
#ifndef DL_NN_SAFETENSORS_H
#define DL_NN_SAFETENSORS_H

#include "util/dl_util.h"

#define DL_ST_MAX_DIMS 8
#define DL_ST_MAX_HEADER (100u * 1024u * 1024u)

typedef enum dl_st_dtype {
    DL_ST_F32, DL_ST_F16, DL_ST_BF16, DL_ST_F64,
    DL_ST_I64, DL_ST_I32, DL_ST_I16, DL_ST_I8, DL_ST_U8, DL_ST_BOOL,
} dl_st_dtype;

/* One tensor: in a loaded file, data points into the file's buffer
 * (borrowed from the dl_st_file); for writing, the caller's F32 data. */
typedef struct dl_st_tensor {
    const char  *name;
    dl_st_dtype  dtype;
    int          ndim;
    int64_t      shape[DL_ST_MAX_DIMS];
    const void  *data;
    size_t       nbytes;
} dl_st_tensor;

typedef struct dl_st_file dl_st_file;

/* Writes tensors (their data in the given order) and metadata key/value
 * string pairs (meta[2i] = key, meta[2i+1] = value, nmeta pairs) atomically
 * to path.
 * Names must be unique and not "__metadata__". */
dl_status dl_st_write(const char *path, const dl_st_tensor *tensors, int n,
                      const char *const *meta, int nmeta, dl_err *err);

/* Loads and validates a whole file: header length within the file and
 * below DL_ST_MAX_HEADER, header is a JSON object, every entry has a known
 * dtype, a shape of non-negative dims, data_offsets [begin, end] with
 * begin <= end inside the data buffer and end - begin equal to the shape's
 * byte size, no two tensors overlapping, no unused bytes in the buffer,
 * metadata values are strings. Errors name the file and the problem.
 * *out is new (dl_st_free). */
dl_status dl_st_load(const char *path, dl_st_file **out, dl_err *err);

/* Same, from memory (the bytes are copied). `what` names the source in
 * errors. */
dl_status dl_st_parse(const void *bytes, size_t len, const char *what,
                      dl_st_file **out, dl_err *err);

int                 dl_st_count(const dl_st_file *f);
const dl_st_tensor *dl_st_at(const dl_st_file *f, int i);       /* borrowed */
const dl_st_tensor *dl_st_find(const dl_st_file *f, const char *name);
/* Metadata value for key, or NULL. Borrowed. */
const char         *dl_st_meta(const dl_st_file *f, const char *key);
const char         *dl_st_dtype_name(dl_st_dtype dt);
void                dl_st_free(dl_st_file *f);

#endif /* DL_NN_SAFETENSORS_H */
