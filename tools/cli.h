/*
 * cli.h -- what the parts of the command-line tool share: the subcommands that live in their
 * own files (convert.c's `ctfio convert`, ctfio_stats.c's counters and progress line), called
 * from main() in ctfio.c.
 */
#ifndef CTFIO_CLI_H
#define CTFIO_CLI_H

/* `ctfio convert FORMAT IN OUT [options]`: argv[0] is "convert". @return : the exit status. */
int ctfio_cli_convert(int argc, char **argv);

/* Prints "COMMAND: " + fmt (with arg) and where the usage is, on stderr. @return : 2, the exit
 * status of a usage error. */
int ctfio_cli_usage_error(const char *command, const char *fmt, const char *arg);

/* `dump --stats`: the reader's stage counters and the verdict, as "stats: ..." lines on out
 * (ctfio_stats.c). */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "ctfio.h"
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
