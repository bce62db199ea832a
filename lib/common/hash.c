/*
 * hash.c -- the one non-cryptographic hash of the library: index cache checksums, the
 * fingerprints of options and data that checkpoints compare.
 */
#include "common/common.h"

uint64_t ctf__hash_bytes(uint64_t h, const void *data, size_t n)
{
    /* FNV-1a over 8-byte words with a final mix: fast enough for the sequence table and good
     * enough to catch corruption (not an adversarial checksum). */
    const unsigned char *p = data;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * 0x100000001b3ull;
        h ^= h >> 29;
        p += 8;
        n -= 8;
    }
    while (n--) h = (h ^ *p++) * 0x100000001b3ull;
    return h;
}
