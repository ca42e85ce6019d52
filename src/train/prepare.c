/* prepare.c: where --train and --eval find their data folder without
 * --data, and running a model's `prepare` script to fill it. */
#define _POSIX_C_SOURCE 200809L
#include "train/session.h"

#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static bool is_file(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* Whether dir holds the split as JSON Lines or CSV. */
static bool has_split(const char *dir, const char *split)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s/%s.jsonl", dir, split);
    if (is_file(path))
        return true;
    snprintf(path, sizeof(path), "%s/%s.csv", dir, split);
    return is_file(path);
}

/* The environment with OUT_DIR=dir in place of any OUT_DIR. New (free the
 * array and its last entry, *own). */
static char **env_with(const char *dir, char **own)
{
    size_t n = 0;
    while (environ[n])
        n++;
    char **env = calloc(n + 2, sizeof(char *));
    size_t len = strlen(dir) + 9;
    *own = malloc(len);
    if (!env || !*own) {
        free(env);
        free(*own);
        return NULL;
    }
    snprintf(*own, len, "OUT_DIR=%s", dir);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "OUT_DIR=", 8) != 0)
            env[k++] = environ[i];
    env[k] = *own;
    return env;
}

/* Runs `script dir` with OUT_DIR=dir, its standard output on our standard
 * error (--train's own output is one JSON line), and waits for it. */
static dl_status run_script(const char *script, const char *dir, dl_err *err)
{
    char *own = NULL, **env = env_with(dir, &own);
    if (!env)
        return dl_err_set(err, DL_ERR_NOMEM, "environment");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, STDERR_FILENO, STDOUT_FILENO);
    char *argv[] = { (char *)script, (char *)dir, NULL };
    pid_t pid;
    int rc = posix_spawn(&pid, script, &fa, NULL, argv, env), status = 0;
    posix_spawn_file_actions_destroy(&fa);
    free(env);
    free(own);
    if (rc != 0)
        return dl_err_set(err, DL_ERR_IO, "%s: %s", script, strerror(rc));
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return DL_OK;
    if (WIFEXITED(status))
        return dl_err_set(err, DL_ERR_IO, "%s %s exited with status %d", script, dir,
                          WEXITSTATUS(status));
    return dl_err_set(err, DL_ERR_IO, "%s %s was stopped by signal %d", script, dir,
                      WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

/* Runs the model's prepare script into dir unless dir holds the split;
 * a lock in dir makes processes of one machine (mpirun's ranks) run it
 * once. */
static dl_status prepare(const char *script, const char *dir, const char *split,
                         dl_err *err)
{
    if (has_split(dir, split))
        return DL_OK;
    if (access(script, X_OK) != 0)
        return dl_err_set(err, DL_ERR_IO, "%s is not executable (chmod +x it, or give --data)",
                          script);
    dl_status st = dl_mkdir(dir, err);
    if (st != DL_OK)
        return st;
    char lock[4200];
    snprintf(lock, sizeof(lock), "%s/.prepare.lock", dir);
    int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0 || flock(fd, LOCK_EX) != 0) {
        st = dl_err_set(err, DL_ERR_IO, "%s: %s", lock, strerror(errno));
        if (fd >= 0)
            close(fd);
        return st;
    }
    if (!has_split(dir, split)) {      /* another process may have done it */
        DL_LOG(DL_LOG_NOTICE, "data", "no --data: running %s %s to write the data", script,
                dir);
        st = run_script(script, dir, err);
    }
    if (st == DL_OK && !has_split(dir, split))
        st = dl_err_set(err, DL_ERR_IO, "%s wrote no %s.jsonl or %s.csv into %s", script,
                        split, split, dir);
    close(fd);     /* unlocks */
    return st;
}

dl_status session_data_dir(const dl_run_opts *o, const char *split, char *dir, size_t len,
                           dl_err *err)
{
    char script[4200];
    snprintf(script, sizeof(script), "%s/prepare", o->model_dir);
    if (o->data_dir || !is_file(script)) {
        snprintf(dir, len, "%s", o->data_dir ? o->data_dir : DL_DEFAULT_DATA_DIR);
        return DL_OK;
    }
    snprintf(dir, len, "%s/data", o->model_dir);
    return prepare(script, dir, split, err);
}
