/*
 * cli.h -- what the parts of the command-line tool share: the subcommands that live in their
 * own files (ctfio_convert.c's `ctfio convert`), called from main() in ctfio.c, and the helpers
 * below them (cli_util.c, describe.c; ctfio_stats.c: the stage counters and the progress line).
 * Calls go one way: ctfio.c -> ctfio_convert.c, ctfio_stats.c -> describe.c, cli_util.c.
 */
#ifndef CTFIO_CLI_H
#define CTFIO_CLI_H

#include "ctfio.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* `ctfio convert FORMAT IN OUT [options]`: argv[0] is "convert". @return : the exit status. */
int ctfio_cli_convert(int argc, char **argv);
/* `ctfio check --recheck FILE` (ctfio_recheck.c): the bad-records file FILE read back, each
 * record's text parsed again with cfg's streams. @return : the exit status. */
int ctfio_cli_recheck(const ctf_config *cfg, const char *path);

/* Prints "COMMAND: " + fmt (with arg) and where the usage is, on stderr. @return : 2, the exit
 * status of a usage error. */
int ctfio_cli_usage_error(const char *command, const char *fmt, const char *arg);

/* Reader parameter flags: the table's cli_flag (lib/config/params.def), by row. */
#define CLI_MAX_PARAMS 64
/* cli_param_flag(a): the row whose flag is a ("--seed"), or -1. */
int cli_param_flag(const char *a);
/* cli_params_apply(cfg, texts, err): parses texts[i] (row i's flag value; NULL: not given) into
 * cfg, each checked by the table's rule and named by its flag. @return : 0, or CTF_EINVAL. */
int cli_params_apply(ctf_config *cfg, const char *const *texts, ctf_error *err);

/* cli_convert_describe(result, opt, out_path, buf, cap):
 * Writes the reader configuration that reads a converted file into buf: a BrainScript reader
 * section, then the Python StreamDefs. Always NUL-terminates when cap > 0.
 * @return : the length the full text needs (like snprintf). */
size_t cli_convert_describe(const ctf_convert_result *result, const ctf_convert_options *opt,
                            const char *out_path, char *buf, size_t cap);

/* cli_remote_options(o, endpoint, cache_dir, unsigned_requests): fills the remote options from
 * the flags given (NULL: none), then the AWS environment variables and shared files and
 * CTFIO_CACHE_DIR (remote_env.c). */
void cli_remote_options(ctf_remote_options *o, const char *endpoint, const char *cache_dir,
                        bool unsigned_requests);
/* `dump --stats`: the reader's stage counters and the verdict, as "stats: ..." lines on out
 * (ctfio_stats.c). */
void ctfio_cli_print_perf(FILE *out, const ctf_reader *r);

/* A progress line on stderr, "WHAT:  42.0%", redrawn when the permille changes. mode: 1 always
 * (--progress), -1 never (--no-progress), 0 on a terminal for inputs of 32 MiB or more
 * (total_bytes; 0: decided at the first draw, by its total in bytes). */
typedef struct ctfio_progress {
    const char *what;
    int mode, last_permille;
    bool on, drawn, decided;
} ctfio_progress;
void ctfio_progress_init(ctfio_progress *p, const char *what, int mode, uint64_t total_bytes);
void ctfio_progress_draw(ctfio_progress *p, uint64_t done, uint64_t total);
/* Ends the line (a newline) if one was drawn. */
void ctfio_progress_end(ctfio_progress *p);
/* ctfio_progress_draw as a ctf_progress_fn (user: the ctfio_progress); never cancels. */
int ctfio_progress_fn(void *user, uint64_t done, uint64_t total);

#endif
