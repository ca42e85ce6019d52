/* cuda_module.h (private to tensor/cuda/): the interface between the core
 * and the CUDA backend module, libdlserve-cuda.so. The module links cuBLAS,
 * whose loading alone costs a process about 0.1 s and 90 MB of private
 * memory; cuda_loader.c opens the module on the first CUDA request, so
 * runs that never touch a GPU never pay for it. The module links nothing
 * of the core: it gets logging and error formatting from the host table. */
#ifndef DL_TENSOR_CUDA_MODULE_H
#define DL_TENSOR_CUDA_MODULE_H

#include "tensor/dl_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped whenever this file or dl_backend_ops changes shape. */
#define DL_CUDA_MODULE_ABI 1

/* What the core lends the module. */
typedef struct dl_cuda_host {
    int  *log_level;                                   /* &dl_log_level */
    void (*log_write)(int level, const char *subsys, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
    dl_status (*err_set)(dl_err *err, dl_status code, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
} dl_cuda_host;

/* The module's implementation of dl_cuda.h (see there). */
typedef struct dl_cuda_module {
    int                   abi;        /* DL_CUDA_MODULE_ABI */
    size_t                ops_size;   /* sizeof(dl_backend_ops) */
    const dl_backend_ops *ops;        /* a backend is the module's when be->ops == ops */
    bool      (*available)(int *ndevices);
    void      (*set_tf32)(bool on);
    dl_status (*backend_new)(int device, dl_backend **out, dl_err *err);
    void      (*backend_destroy)(dl_backend *be);
    dl_status (*sync)(dl_backend *be, dl_err *err);
    dl_status (*memory)(dl_backend *be, size_t *used, size_t *total);
    int       (*device)(const dl_backend *be);
    void     *(*stream)(dl_backend *be);
    dl_status (*graph_begin)(dl_backend *be, dl_err *err);
    dl_status (*graph_end)(dl_backend *be, dl_cuda_graph **out, dl_err *err);
    dl_status (*graph_launch)(dl_cuda_graph *g, dl_err *err);
    void      (*graph_free)(dl_cuda_graph *g);
} dl_cuda_module;

/* The module's one exported symbol, DL_CUDA_ENTRY: keeps host (borrowed
 * for the life of the process) and returns the module's table. */
#define DL_CUDA_ENTRY "dl_cuda_module_entry"
typedef const dl_cuda_module *(*dl_cuda_entry_fn)(const dl_cuda_host *host);

#ifdef __cplusplus
}
#endif
#endif /* DL_TENSOR_CUDA_MODULE_H */
