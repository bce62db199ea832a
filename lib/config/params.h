/*
 * params.h -- what config.c needs of the parameter table beyond the public ctf_param_* calls:
 * parsing with a value shown in the message (a configuration block is "a block", not text), the
 * one reading of a decimal, and the worker rule with a prefix for messages about a ctf_config.
 */
#ifndef CTFIO_PARAMS_H
#define CTFIO_PARAMS_H

#include "common/common.h"

/* Sets every table parameter to its default (ctf_config_init). */
void ctf__params_init(ctf_config *cfg);

/* ctf_param_parse, with `shown` (if not NULL) in place of the quoted text in a message. */
int ctf__param_parse_shown(ctf_config *cfg, const ctf_param *p, const char *name, const char *text,
                           const char *shown, ctf_error *err);

/* Checks every table parameter's range in cfg; messages start with prefix + field. */
int ctf__params_validate(const ctf_config *cfg, const char *prefix, ctf_error *err);

/* Reads an unsigned decimal ("+" allowed, digits only) into *v; @return : 0, or
 * CTF__DECIMAL_BAD when text is not one, CTF__DECIMAL_OVERFLOW when it exceeds UINT64_MAX. */
enum { CTF__DECIMAL_BAD = 1, CTF__DECIMAL_OVERFLOW = 2 };
int ctf__parse_decimal(const char *text, uint64_t *v);

/* ctf_workers_check with prefix ("config.") before the names in the message. */
int ctf__workers_check(size_t num_workers, size_t worker_rank, const char *prefix, ctf_error *err);

#endif
