/*
 * convert.h -- what the converters share: the output file, written to a temporary file of its
 * own and renamed over the output when complete (convert.c).
 */
#ifndef CTF_CONVERT_H
#define CTF_CONVERT_H

#include "format/format.h"

#include <stdio.h>

/* The output is written to a temporary file of its own next to the file it replaces, made
 * the one atomic way (ctf__atomic_open, common.h: O_EXCL, never a file that exists; O_NOFOLLOW,
 * never through a link planted at its name; the mode the umask gives, as for any output), and
 * renamed over it only when complete, after an fsync. So a failed or cancelled conversion
 * leaves the old output as it was, two conversions to one output never mix (the last rename
 * wins, whole), and no file but the named output is ever written or removed -- a file that
 * happens to be named like a temporary one (a browser's "OUT.part") included. */
typedef struct ctf__out_file {
    FILE *f;             /* the stream the converter writes */
    ctf__atomic_file af; /* the temporary file; af.tmp NULL when written in place */
} ctf__out_file;

/* ctf__out_open(o, in_path, in_fd, out_path, err): refuses an output that is the input (the
 * same path, or the same device and inode: in_fd's when >= 0, else in_path's), a directory and
 * a link to a missing file; opens an existing device or pipe in place; else creates the
 * temporary file (next to the file a link at out_path names, so that the link is kept). The
 * caller writes o->f, then calls ctf__out_finish.
 * @return : 0, CTF_EINVAL (the input), CTF_EIO, CTF_ENOMEM. */
int ctf__out_open(ctf__out_file *o, const char *in_path, int in_fd, const char *out_path,
                  ctf_error *err);
/* ctf__out_finish(o, rc, out_path, err): with rc 0, flushes and closes the output and (unless
 * written in place) fsyncs it and renames it over the output; with rc != 0 only closes it and
 * removes the temporary file. o holds nothing after.
 * @return : rc, or CTF_EIO (err filled) when the output could not be completed. */
int ctf__out_finish(ctf__out_file *o, int rc, const char *out_path, ctf_error *err);

#endif
