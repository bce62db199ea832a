/*
 * convert.h -- what the converters share: the output file, written to a temporary file of its
 * own and renamed over the output when complete (convert.c).
 */
#ifndef CTF_CONVERT_H
#define CTF_CONVERT_H

#include "format/format.h"

#include <stdio.h>

/* The output is written to a temporary file of its own, created exclusively (O_EXCL: never a
 * file that exists, O_NOFOLLOW: never through a link planted at its name) next to the file it
 * replaces, and renamed over it only when complete. So a failed or cancelled conversion leaves
 * the old output as it was, two conversions to one output never mix (the last rename wins,
 * whole), and no file but the named output is ever written or removed -- a file that happens
 * to be named like a temporary one (a browser's "OUT.part") included. */
typedef struct ctf__out_file {
    FILE *f;
    char *tmp;                 /* the temporary file; NULL when written in place */
    char *final; /* what tmp is renamed to: the output, or the file its link names */
} ctf__out_file;

/* ctf__out_open(o, in_path, in_fd, out_path, err): refuses an output that is the input (the
 * same path, or the same device and inode: in_fd's when >= 0, else in_path's), a directory and
 * a link to a missing file; opens an existing device or pipe in place; else creates the
 * temporary file. The caller writes o->f, closes it (setting o->f to NULL), renames o->tmp to
 * o->final when complete or unlinks o->tmp on failure, then calls ctf__out_free.
 * @return : 0, CTF_EINVAL (the input), CTF_EIO, CTF_ENOMEM. */
int ctf__out_open(ctf__out_file *o, const char *in_path, int in_fd, const char *out_path,
                  ctf_error *err);
void ctf__out_free(ctf__out_file *o);

#endif
