/*
 * dump_json.h -- the JSON that `ctfio dump` prints for minibatches, made from the public
 * minibatch accessors (the golden files and the conformance corpus compare it byte for byte).
 */
#ifndef CTFIO_DUMP_JSON_H
#define CTFIO_DUMP_JSON_H

#include "ctfio.h"

#include <stdint.h>
#include <stdio.h>

/* One JSON object per sequence, one per line: {"key": K, ["file": F,] ["line": L,] "streams":
 * {...}}, numbers as the shortest decimal that reads back in the precision ("file" when the
 * reader has several files). @return : 0, or CTF_EIO when out reports a write error. */
int dump_json_sequences(const ctf_minibatch *mb, FILE *out, bool with_line);

/* The whole minibatch as one line: {"index": I, "position": P, "end_of_sweep": B,
 * "sequences": [...]} (dump --mb). @return : as dump_json_sequences. */
int dump_json_minibatch(const ctf_minibatch *mb, FILE *out, uint64_t index);
/* A replayed minibatch: as dump_json_minibatch, each sequence also with its file's path
 * ("path", from reader r) and its first line ("line"). */
int dump_json_replay(const ctf_minibatch *mb, FILE *out, uint64_t index, const ctf_reader *r);

#endif
