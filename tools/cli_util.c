/*
 * cli_util.c -- what every subcommand of the command-line tool reports the same way.
 */
#include "cli.h"

#include <stdio.h>

int ctfio_cli_usage_error(const char *command, const char *fmt, const char *arg)
{
    fprintf(stderr, "%s: ", command);
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(run '%s --help' for usage)\n", command);
    return 2;
}
