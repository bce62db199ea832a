/*
 * cli.h -- what the parts of the command-line tool share: the subcommands that live in their
 * own files (ctfio_convert.c's `ctfio convert`), called from main() in ctfio.c, and the helpers
 * below them (cli_util.c, describe.c). Calls go one way: ctfio.c -> ctfio_convert.c ->
 * describe.c, cli_util.c.
 */
#ifndef CTFIO_CLI_H
#define CTFIO_CLI_H

#include "ctfio.h"

#include <stddef.h>

/* `ctfio convert FORMAT IN OUT [options]`: argv[0] is "convert". @return : the exit status. */
int ctfio_cli_convert(int argc, char **argv);

/* Prints "COMMAND: " + fmt (with arg) and where the usage is, on stderr. @return : 2, the exit
 * status of a usage error. */
int ctfio_cli_usage_error(const char *command, const char *fmt, const char *arg);

/* cli_convert_describe(result, opt, out_path, buf, cap):
 * Writes the reader configuration that reads a converted file into buf: a BrainScript reader
 * section, then the Python StreamDefs. Always NUL-terminates when cap > 0.
 * @return : the length the full text needs (like snprintf). */
size_t cli_convert_describe(const ctf_convert_result *result, const ctf_convert_options *opt,
                            const char *out_path, char *buf, size_t cap);

#endif
