/*
 * _stats.h -- the reader's counters and index facts as Python dicts (_stats.c), for
 * Reader.stats() and Reader.index_info() in _ctfio.c.
 */
#ifndef CTFIO_STATS_H
#define CTFIO_STATS_H

#include <Python.h>

#include "ctfio.h"

/* {sequences, errors, ..., streams: [{name, samples, nonzeros, dropped_samples}]}; names: the
 * stream names in configuration order (a tuple). @return : a new dict, or NULL with an
 * exception set. */
PyObject *ctf_py_stats_dict(const ctf_stats *s, PyObject *names);

/* {file_size, sequences, samples, lines, chunks, max_sequence_samples, line_mode,
 * from_cache}. @return : a new dict, or NULL with an exception set. */
PyObject *ctf_py_index_info_dict(const ctf_index_info *info);

/* Every ctf_perf counter by its field name, and "verdict": {stage, share, text} from
 * ctf_perf_verdict. @return : a new dict, or NULL with an exception set. */
PyObject *ctf_py_perf_dict(const ctf_perf *p);

#endif
