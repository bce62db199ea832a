/*
 * readbuf.c -- the read buffer each loading thread keeps from one chunk load to the next: what
 * a corpus reads a chunk's blocks into and the chunk cache reads an entry into.
 */
#include "source/source.h"

char *ctf__readbuf_get(ctf__readbuf *rb, size_t need)
{
    if (need > rb->cap) {
        /* Chunks differ in size by up to a sequence: growing to exactly `need` would free and
         * map a new buffer for most chunks (a chunk-sized block is an mmap of its own), and the
         * pread would fault in every page again. 1/8 more makes that rare. */
        size_t cap = need + need / 8;
        CTF_FREE(rb->p);
        rb->p = CTF_MALLOC(cap);
        rb->cap = rb->p ? cap : 0;
    }
    return rb->p;
}
