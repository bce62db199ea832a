/*
 * fuzz.h -- what fuzz_targets.c offers the drivers (regression.c and libFuzzer): the targets,
 * the "interesting event" log the regression driver uses as cheap coverage feedback, and helpers.
 */
#ifndef CTF_FUZZ_H
#define CTF_FUZZ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

int ctf_fuzz_parse(const uint8_t *data, size_t size);
int ctf_fuzz_index(const uint8_t *data, size_t size);
int ctf_fuzz_config(const uint8_t *data, size_t size);
int ctf_fuzz_state(const uint8_t *data, size_t size);
int ctf_fuzz_cbf(const uint8_t *data, size_t size);
int ctf_fuzz_record(const uint8_t *data, size_t size);
/* A valid state string of a small reader after num_minibatches (with a BPTT reader if bptt). */
int ctf_fuzz_state_example(uint64_t num_minibatches, bool bptt, char *buf, size_t cap);
const char *ctf_fuzz_tmpdir(void);

typedef int (*ctf_fuzz_fn)(const uint8_t *data, size_t size);
typedef struct ctf_fuzz_target {
    const char *name;
    ctf_fuzz_fn fn;
} ctf_fuzz_target;
extern const ctf_fuzz_target ctf_fuzz_targets[];
extern const size_t ctf_fuzz_num_targets;

#define CTF_FUZZ_MAX_EVENTS 256
extern uint64_t ctf_fuzz_events[CTF_FUZZ_MAX_EVENTS];
extern size_t ctf_fuzz_num_events;

#endif
