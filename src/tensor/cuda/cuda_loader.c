/* cuda_loader.c: the "cuda" backend registration in a build with CUDA:
 * opens the CUDA backend module (libdlserve-cuda.so) on the first request
 * for a GPU; CPU-only runs never load it (nor cuBLAS). */
#define _POSIX_C_SOURCE 200809L
#include "tensor/backend.h"
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

static dl_status cuda_create(int index, const dl_backend_params *p, dl_backend **out,
                             dl_err *err)
{
    *out = NULL;
    const dl_cuda_module *m = module();
    if (!m)
        return dl_err_set(err, DL_ERR_UNAVAILABLE, "no CUDA device: cannot load the CUDA "
                          "backend (%s)", why);
    return m->backend_new(index, p->tf32, out, err);
}

const dl_backend_reg dl_backend_cuda_reg = {
    .name    = "cuda",
    .indexed = true,
    .create  = cuda_create,
};
