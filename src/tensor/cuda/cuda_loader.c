/* cuda_loader.c: dl_cuda.h in a build with CUDA: opens the CUDA backend
 * module (libdlserve-cuda.so) on the first request that needs a GPU and
 * forwards to it; CPU-only runs never load it (nor cuBLAS). */
#define _POSIX_C_SOURCE 200809L
#include "tensor/cuda/cuda_module.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Set by src/tensor/cuda/meson.build. */
#ifndef DL_CUDA_MODULE_BUILD
#error "DL_CUDA_MODULE_BUILD (the module in the build tree) is not defined"
#endif
#ifndef DL_CUDA_MODULE_INSTALL
#error "DL_CUDA_MODULE_INSTALL (the installed module) is not defined"
#endif
#ifndef DL_CUDA_BINDIR
#error "DL_CUDA_BINDIR (where dlserve is installed) is not defined"
#endif

static pthread_once_t once = PTHREAD_ONCE_INIT;
static const dl_cuda_module *mod;
static char why[512];          /* why the module did not load */
static bool tf32;

static const dl_cuda_host host = {
    .log_level = &dl_log_level,
    .log_write = dl_log_write,
    .err_set   = dl_err_set,
};

static bool try_path(const char *path)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(why, sizeof(why), "%s", e ? e : path);
        return false;
    }
    dl_cuda_entry_fn entry;
    *(void **)&entry = dlsym(h, DL_CUDA_ENTRY);   /* POSIX's way to a function */
    const dl_cuda_module *m = entry ? entry(&host) : NULL;
    if (!m || m->abi != DL_CUDA_MODULE_ABI || m->ops_size != sizeof(dl_backend_ops)) {
        snprintf(why, sizeof(why), "%s: not a CUDA module of this dlserve (ABI %d, want %d)",
                 path, m ? m->abi : -1, DL_CUDA_MODULE_ABI);
        dlclose(h);
        return false;
    }
    m->set_tf32(tf32);
    mod = m;   /* stays loaded until the process exits */
    return true;
}

/* $DLSERVE_CUDA_MODULE, else the installed module for an installed binary
 * and the build tree's for the others, then the other one. */
static void load(void)
{
    const char *env = getenv("DLSERVE_CUDA_MODULE");
    if (env && *env) {
        try_path(env);
        return;
    }
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    exe[n > 0 ? n : 0] = '\0';
    size_t bl = strlen(DL_CUDA_BINDIR);
    bool installed = strncmp(exe, DL_CUDA_BINDIR, bl) == 0 && exe[bl] == '/';
    const char *first = installed ? DL_CUDA_MODULE_INSTALL : DL_CUDA_MODULE_BUILD;
    const char *second = installed ? DL_CUDA_MODULE_BUILD : DL_CUDA_MODULE_INSTALL;
    if (!try_path(first) && access(second, F_OK) == 0)
        try_path(second);
}

static const dl_cuda_module *module(void)
{
    pthread_once(&once, load);
    return mod;
}

bool dl_cuda_available(int *ndevices)
{
    const dl_cuda_module *m = module();
    if (m)
        return m->available(ndevices);
    if (ndevices)
        *ndevices = 0;
    return false;
}

/* Remembered, so that setting it does not load the module. */
void dl_cuda_set_tf32(bool on)
{
    tf32 = on;
    if (mod)
        mod->set_tf32(on);
}

dl_status dl_backend_cuda_new(int device, dl_backend **out, dl_err *err)
{
    *out = NULL;
    const dl_cuda_module *m = module();
    if (!m)
        return dl_err_set(err, DL_ERR_UNAVAILABLE, "no CUDA device: cannot load the CUDA "
                          "backend (%s)", why);
    return m->backend_new(device, out, err);
}

/* Never loads the module: without it no backend can be a CUDA one. */
bool dl_backend_is_cuda(const dl_backend *be)
{
    return mod && be && be->ops == mod->ops;
}

void dl_cuda_backend_destroy(dl_backend *be)
{
    if (dl_backend_is_cuda(be))
        mod->backend_destroy(be);
    else
        dl_backend_free(be);
}

dl_status dl_cuda_sync(dl_backend *be, dl_err *err)
{
    return dl_backend_is_cuda(be) ? mod->sync(be, err) : DL_OK;
}

dl_status dl_cuda_memory(dl_backend *be, size_t *used, size_t *total)
{
    if (dl_backend_is_cuda(be))
        return mod->memory(be, used, total);
    *used = *total = 0;
    return DL_ERR_INVALID;
}

int dl_cuda_device(const dl_backend *be)
{
    return dl_backend_is_cuda(be) ? mod->device(be) : -1;
}

void *dl_cuda_stream(dl_backend *be)
{
    return dl_backend_is_cuda(be) ? mod->stream(be) : NULL;
}

dl_status dl_cuda_graph_begin(dl_backend *be, dl_err *err)
{
    if (!dl_backend_is_cuda(be))
        return dl_err_set(err, DL_ERR_INVALID, "CUDA graphs need a CUDA backend");
    return mod->graph_begin(be, err);
}

dl_status dl_cuda_graph_end(dl_backend *be, dl_cuda_graph **out, dl_err *err)
{
    *out = NULL;
    if (!dl_backend_is_cuda(be))
        return dl_err_set(err, DL_ERR_INVALID, "no CUDA graph is being recorded");
    return mod->graph_end(be, out, err);
}

/* A graph exists only if the module made it. */
dl_status dl_cuda_graph_launch(dl_cuda_graph *g, dl_err *err)
{
    return mod->graph_launch(g, err);
}

void dl_cuda_graph_free(dl_cuda_graph *g)
{
    if (g)
        mod->graph_free(g);
}
