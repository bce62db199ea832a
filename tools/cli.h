/*
 * cli.h -- what the parts of the command-line tool share: the subcommands that live in their
 * own files (convert.c's `ctfio convert`), called from main() in ctfio.c.
 */
#ifndef CTFIO_CLI_H
#define CTFIO_CLI_H

/* `ctfio convert FORMAT IN OUT [options]`: argv[0] is "convert". @return : the exit status. */
int ctfio_cli_convert(int argc, char **argv);

/* Prints "COMMAND: " + fmt (with arg) and where the usage is, on stderr. @return : 2, the exit
 * status of a usage error. */
int ctfio_cli_usage_error(const char *command, const char *fmt, const char *arg);

#endif
