/*
 * cli_util.c -- what every subcommand of the command-line tool does the same way: usage errors
 * and the reader parameter flags, read through the parameter table.
 */
#include "cli.h"

#include <stdio.h>
#include <string.h>

int ctfio_cli_usage_error(const char *command, const char *fmt, const char *arg)
{
    fprintf(stderr, "%s: ", command);
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(run '%s --help' for usage)\n", command);
    return 2;
}

int cli_param_flag(const char *a)
{
    for (size_t i = 0; i < ctf_param_count() && i < CLI_MAX_PARAMS; i++) {
        const char *f = ctf_param_at(i)->cli_flag;
        if (f && !strcmp(f, a)) return (int)i;
    }
    return -1;
}

int cli_params_apply(ctf_config *cfg, const char *const *texts, ctf_error *err)
{
    for (size_t i = 0; i < ctf_param_count() && i < CLI_MAX_PARAMS; i++) {
        const ctf_param *p = ctf_param_at(i);
        if (texts[i] && ctf_param_parse(cfg, p, p->cli_flag, texts[i], err)) return CTF_EINVAL;
    }
    return 0;
}
