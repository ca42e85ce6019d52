/* cli.h (private to cmd/): the dlserve command line, described by one
 * option table that builds getopt_long's array, parses and checks values,
 * prints --help and docs/training.md's option table (--options-reference). */
#ifndef DL_CMD_CLI_H
#define DL_CMD_CLI_H

#include "train/dl_train.h"

#define CLI_OVERRIDES_MAX 64

typedef enum cli_mode {
    CLI_SERVE,     /* no mode flag: the daemon */
    CLI_TRAIN,
    CLI_EVAL,
    CLI_PREDICT,
    CLI_BENCH,
    CLI_EXPORT,
    CLI_IMPORT,    /* --import FILE.onnx --models DIR --name NAME */
    CLI_GENERATE,  /* --generate MODEL_DIR (--prompt TEXT | --prompts FILE) */
} cli_mode;

/* What the command line asks for. Strings point into argv or into owned. */
typedef struct cli {
    cli_mode    mode;
    dl_run_opts run;              /* --train, --eval, --predict, --bench, --generate */
    dl_gen_run_opts gen;          /* --generate */
    const char *config;           /* --config or --check-config FILE; NULL: none */
    bool        check_config;     /* --check-config: print the effective config */
    bool        publish;          /* --train --publish */
    const char *onnx;             /* --export: the ONNX file to write */
    const char *import_name;      /* --import: --name */
    int64_t     import_max_length;/* --import: --max-length; 0: not given */
    bool        version_alias;    /* the model version came as "--version V" */
    const char *overrides[CLI_OVERRIDES_MAX];   /* "section.key=value", in order */
    int         noverrides;
    char        owned[CLI_OVERRIDES_MAX][1100]; /* texts built for --port, --models, ... */
} cli;

/* Parses argv into *c (which it initialises). Returns -1 when the command
 * should run; otherwise the exit code to end with: 0 once --help,
 * --version, --man, --config-reference or --options-reference has printed, 2
 * after a bad option or value (one line on stderr names it). Keeps
 * pointers into argv. Not thread-safe (getopt). */
int cli_parse(int argc, char **argv, cli *c);

#endif /* DL_CMD_CLI_H */
