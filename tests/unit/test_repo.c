/* test_repo.c: the model repository's layout on a temporary folder tree:
 * version folders, weights, version policies and checkpoint files. */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include "fixture.h"

#include "nn/dl_nn.h"
#include "train/checkpoint.h"

static char dir[64];

static void setup(void) { fx_tmpdir(dir, sizeof(dir), "repo"); }
static void teardown(void) { fx_rmtree(dir); }

TestSuite(repo, .init = setup, .fini = teardown, .timeout = 10);

/* Creates DIR/rel as a folder. */
static void make_dir(const char *rel)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/%s", dir, rel);
    cr_assert_eq(mkdir(path, 0755), 0, "mkdir %s", path);
}

/* Creates DIR/rel as an empty file. */
static void make_file(const char *rel)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/%s", dir, rel);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "fopen %s", path);
    fclose(f);
}

/* Creates DIR/name/ holding model.safetensors. */
static void make_version(const char *name)
{
    char rel[128];
    make_dir(name);
    snprintf(rel, sizeof(rel), "%s/model.safetensors", name);
    make_file(rel);
}

static void expect_list(const int64_t *got, int n, const int64_t *want, int nwant)
{
    cr_assert_eq(n, nwant, "got %d entries, want %d", n, nwant);
    for (int i = 0; i < n; i++)
        cr_expect_eq(got[i], want[i], "entry %d: got %lld, want %lld", i,
                     (long long)got[i], (long long)want[i]);
}

Test(repo, versions_newest_first)
{
    make_version("2");
    make_version("10");
    make_version("1");
    make_version("3");
    int64_t v[8];
    expect_list(v, dl_repo_versions(dir, true, v, 8), (int64_t[]){10, 3, 2, 1}, 4);
    cr_expect_eq(dl_repo_latest(dir), 10);
    cr_expect_eq(dl_repo_next(dir), 11);
}

Test(repo, max_keeps_the_newest)
{
    const char *names[] = {"4", "7", "1", "9", "2", "8"};
    for (size_t i = 0; i < sizeof(names) / sizeof(*names); i++)
        make_version(names[i]);
    int64_t v[3];
    expect_list(v, dl_repo_versions(dir, true, v, 3), (int64_t[]){9, 8, 7}, 3);
    cr_expect_eq(dl_repo_versions(dir, true, v, 0), 0);
}

Test(repo, non_numeric_and_zero_names_are_not_versions)
{
    const char *names[] = {"0", "000", "v2", "+3", "-4", "5a", " 6", "latest",
                           "1234567890123456789", "checkpoints"};
    for (size_t i = 0; i < sizeof(names) / sizeof(*names); i++)
        make_version(names[i]);
    make_version("07");
    make_file("12");      /* a file, not a folder: no weights inside */
    int64_t v[8];
    expect_list(v, dl_repo_versions(dir, true, v, 8), (int64_t[]){7}, 1);
    cr_expect_eq(dl_repo_latest(dir), 7);
    /* Any entry with a version name takes its number, file or folder. */
    cr_expect_eq(dl_repo_next(dir), 13);
}

Test(repo, folders_without_weights)
{
    make_version("1");
    make_dir("2");                         /* being written */
    make_dir("3");
    make_dir("3/model.safetensors");       /* not a regular file */
    make_dir("4");
    make_file("4/metrics.csv");
    int64_t v[8];
    expect_list(v, dl_repo_versions(dir, true, v, 8), (int64_t[]){1}, 1);
    expect_list(v, dl_repo_versions(dir, false, v, 8), (int64_t[]){4, 3, 2, 1}, 4);
    cr_expect_eq(dl_repo_latest(dir), 1);
    cr_expect_eq(dl_repo_next(dir), 5);
}

/* The daemon also serves a version folder holding model.onnx alone; the
 * trainer's and the command line's newest version still needs weights. */
Test(repo, onnx_versions_are_served)
{
    make_version("1");
    make_dir("2");
    make_file("2/model.onnx");
    make_dir("3");
    make_dir("3/model.onnx");              /* not a regular file */
    int64_t v[8];
    expect_list(v, dl_repo_served_versions(dir, v, 8), (int64_t[]){2, 1}, 2);
    expect_list(v, dl_repo_versions(dir, true, v, 8), (int64_t[]){1}, 1);
    cr_expect_eq(dl_repo_latest(dir), 1);
}

Test(repo, empty_and_missing_folders)
{
    int64_t v[4];
    cr_expect_eq(dl_repo_versions(dir, false, v, 4), 0);
    cr_expect_eq(dl_repo_latest(dir), 0);
    cr_expect_eq(dl_repo_next(dir), 1);
    cr_expect_eq(dl_repo_checkpoints(dir, v, 4), 0);

    char missing[128];
    snprintf(missing, sizeof(missing), "%s/no-such-model", dir);
    cr_expect_eq(dl_repo_versions(missing, true, v, 4), 0);
    cr_expect_eq(dl_repo_latest(missing), 0);
    cr_expect_eq(dl_repo_next(missing), 1);
    cr_expect_eq(dl_repo_checkpoints(missing, v, 4), 0);
}

Test(repo, policy_selection)
{
    const int64_t have[] = {9, 5, 3, 1};
    int64_t out[4];
    expect_list(out, dl_repo_select("latest", have, 4, out), (int64_t[]){9}, 1);
    expect_list(out, dl_repo_select("latest:2", have, 4, out), (int64_t[]){9, 5}, 2);
    expect_list(out, dl_repo_select("latest:10", have, 4, out),
                (int64_t[]){9, 5, 3, 1}, 4);
    expect_list(out, dl_repo_select("versions:1,3", have, 4, out), (int64_t[]){3, 1}, 2);
    expect_list(out, dl_repo_select("versions:5", have, 4, out), (int64_t[]){5}, 1);
    /* Listed versions that are absent are left out; the order is newest first. */
    expect_list(out, dl_repo_select("versions:2,1,9,7", have, 4, out),
                (int64_t[]){9, 1}, 2);
    expect_list(out, dl_repo_select("versions:4", have, 4, out), NULL, 0);
    cr_expect_eq(dl_repo_select("latest", have, 0, out), 0);
    cr_expect_eq(dl_repo_select("versions:1", have, 0, out), 0);
}

Test(repo, policy_on_the_listed_versions)
{
    make_version("1");
    make_version("2");
    make_dir("3");          /* no weights: never selected */
    int64_t have[8], want[8];
    int nhave = dl_repo_versions(dir, true, have, 8);
    expect_list(want, dl_repo_select("latest:2", have, nhave, want), (int64_t[]){2, 1}, 2);
    expect_list(want, dl_repo_select("versions:3,1", have, nhave, want), (int64_t[]){1}, 1);
}

Test(repo, checkpoints_newest_first)
{
    make_dir("checkpoints");
    const char *names[] = {
        "checkpoints/step-000000020.safetensors",
        "checkpoints/step-000000100.safetensors",
        "checkpoints/step-000000003.safetensors",
        "checkpoints/step-7.safetensors",
        /* not checkpoints */
        "checkpoints/step-.safetensors", "checkpoints/step-x.safetensors",
        "checkpoints/step--5.safetensors", "checkpoints/step-+6.safetensors",
        "checkpoints/step-000000500.safetensors.tmp",
        "checkpoints/step-000000600.safetensor", "checkpoints/other.safetensors",
        "checkpoints/Step-000000700.safetensors",
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(*names); i++)
        make_file(names[i]);
    int64_t s[8];
    expect_list(s, dl_repo_checkpoints(dir, s, 8), (int64_t[]){100, 20, 7, 3}, 4);
    expect_list(s, dl_repo_checkpoints(dir, s, 1), (int64_t[]){100}, 1);
    expect_list(s, dl_repo_checkpoints(dir, s, 2), (int64_t[]){100, 20}, 2);
}

Test(repo, checkpoint_path_is_listed)
{
    char path[256];
    dl_repo_checkpoint_path(dir, 42, path, sizeof(path));
    char want[256];
    snprintf(want, sizeof(want), "%s/checkpoints/step-000000042.safetensors", dir);
    cr_expect_str_eq(path, want);

    make_dir("checkpoints");
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fclose(f);
    int64_t s[2];
    expect_list(s, dl_repo_checkpoints(dir, s, 2), (int64_t[]){42}, 1);
}

/* Writes DIR/checkpoints/step-000000005.safetensors with one float a buffer
 * and `meta` as its run position. */
static void write_checkpoint(const char *meta)
{
    char path[256];
    make_dir("checkpoints");
    dl_repo_checkpoint_path(dir, 5, path, sizeof(path));
    float v[3] = {1, 2, 3};
    dl_st_tensor t[3] = {
        {.name = "params", .dtype = DL_ST_F32, .ndim = 1, .shape = {1}, .data = v, .nbytes = 4},
        {.name = "state", .dtype = DL_ST_F32, .ndim = 1, .shape = {1}, .data = v + 1, .nbytes = 4},
        {.name = "optimizer", .dtype = DL_ST_F32, .ndim = 1, .shape = {1}, .data = v + 2,
         .nbytes = 4},
    };
    const char *kv[2] = {"dlserve.checkpoint", meta};
    dl_err err = {0};
    cr_assert_eq(dl_st_write(path, t, 3, kv, 1, &err), DL_OK, "%s", err.msg);
}

static dl_status read_checkpoint(ckpt_pos *pos, dl_err *err)
{
    float p, s, o;
    char path[256];
    return ckpt_read_latest(dir, pos, &p, 1, &s, 1, &o, 1, path, sizeof(path), err);
}

Test(repo, checkpoint_position_read_back)
{
    write_checkpoint("{\"step\":5,\"optim_steps\":4,\"rng_counter\":3,\"seed\":42,"
                     "\"batch_size\":64,\"ranks\":2}");
    ckpt_pos pos;
    dl_err err = {0};
    cr_assert_eq(read_checkpoint(&pos, &err), DL_OK, "%s", err.msg);
    cr_expect(pos.step == 5 && pos.optim_steps == 4 && pos.rng_counter == 3 &&
              pos.seed == 42 && pos.batch_size == 64 && pos.ranks == 2);
}

Test(repo, checkpoint_position_refused_when_damaged)
{
    static const struct { const char *meta, *key; } cases[] = {
        {"{\"step\":-1,\"optim_steps\":0,\"rng_counter\":0,\"seed\":1,\"batch_size\":8,"
         "\"ranks\":1}", "'step'"},
        {"{\"step\":1,\"optim_steps\":0,\"rng_counter\":0,\"seed\":1,\"batch_size\":0,"
         "\"ranks\":1}", "'batch_size'"},
        {"{\"step\":1,\"optim_steps\":0,\"rng_counter\":0,\"seed\":1,\"batch_size\":8}",
         "'ranks'"},
        {"{\"step\":\"1\",\"optim_steps\":0,\"rng_counter\":0,\"seed\":1,"
         "\"batch_size\":8,\"ranks\":1}", "'step'"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
        fx_rmtree(dir);
        cr_assert_eq(mkdir(dir, 0755), 0);
        write_checkpoint(cases[i].meta);
        ckpt_pos pos;
        dl_err err = {0};
        cr_expect_eq(read_checkpoint(&pos, &err), DL_ERR_INVALID, "case %zu", i);
        cr_expect_not_null(strstr(err.msg, cases[i].key), "case %zu: %s", i, err.msg);
    }
}
