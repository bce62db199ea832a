/*
 * quarantine.h -- the bad-records file a reader writes (quarantine.c; docs/reliability.md).
 */
#ifndef CTF_QUARANTINE_H
#define CTF_QUARANTINE_H

#include "source/source.h"

/* Bytes of a record's raw text kept at most (the rest is cut, "truncated": true). */
#define CTF__QUAR_TEXT 4096

typedef struct ctf__quarantine ctf__quarantine;
struct ctf__remote;

/* Starts the file's temporary copy next to path. @return : 0, or CTF_EINVAL/CTF_ENOMEM. */
int ctf__quar_open(const char *path, ctf__quarantine **out, ctf_error *err);
/* Writes the line of one skipped record (e: the error that skipped it); its text is read back
 * from src's file through rem. @return : 0, or CTF_EIO/CTF_ENOMEM with err filled. */
int ctf__quar_add(ctf__quarantine *q, struct ctf__remote *rem, const ctf__source *src,
                  const ctf_error *e, ctf_error *err);
uint64_t ctf__quar_count(const ctf__quarantine *q);
/* Renames what was written so far onto the path (a later add starts a new temporary file from
 * it). NULL or nothing new: a no-op. @return : 0 or an errno value. */
int ctf__quar_commit(ctf__quarantine *q);
/* Renames the file onto its path (what was written so far) and frees q. NULL: a no-op. */
void ctf__quar_close(ctf__quarantine *q);

#endif
