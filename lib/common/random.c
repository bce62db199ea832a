/*
 * random.c -- the random streams of the provider pool: a Mersenne Twister seeded exactly as
 * CPython's random.Random(text) seeds it (the text and its SHA-512 digest as one big integer,
 * fed to init_by_array), with random.Random's randrange and shuffle on top. The provider's data
 * orders were first defined with Python's generator; reproducing it bit for bit keeps every
 * seed's batches what they were.
 */
#include "common/common.h"

/*======================================================================
 * SHA-512 (FIPS 180-4), only for the seeding
 *====================================================================*/

static const uint64_t sha_k[80] = {
    0x428a2f98d728ae22ull, 0x7137449123ef65cdull, 0xb5c0fbcfec4d3b2full, 0xe9b5dba58189dbbcull,
    0x3956c25bf348b538ull, 0x59f111f1b605d019ull, 0x923f82a4af194f9bull, 0xab1c5ed5da6d8118ull,
    0xd807aa98a3030242ull, 0x12835b0145706fbeull, 0x243185be4ee4b28cull, 0x550c7dc3d5ffb4e2ull,
    0x72be5d74f27b896full, 0x80deb1fe3b1696b1ull, 0x9bdc06a725c71235ull, 0xc19bf174cf692694ull,
    0xe49b69c19ef14ad2ull, 0xefbe4786384f25e3ull, 0x0fc19dc68b8cd5b5ull, 0x240ca1cc77ac9c65ull,
    0x2de92c6f592b0275ull, 0x4a7484aa6ea6e483ull, 0x5cb0a9dcbd41fbd4ull, 0x76f988da831153b5ull,
    0x983e5152ee66dfabull, 0xa831c66d2db43210ull, 0xb00327c898fb213full, 0xbf597fc7beef0ee4ull,
    0xc6e00bf33da88fc2ull, 0xd5a79147930aa725ull, 0x06ca6351e003826full, 0x142929670a0e6e70ull,
    0x27b70a8546d22ffcull, 0x2e1b21385c26c926ull, 0x4d2c6dfc5ac42aedull, 0x53380d139d95b3dfull,
    0x650a73548baf63deull, 0x766a0abb3c77b2a8ull, 0x81c2c92e47edaee6ull, 0x92722c851482353bull,
    0xa2bfe8a14cf10364ull, 0xa81a664bbc423001ull, 0xc24b8b70d0f89791ull, 0xc76c51a30654be30ull,
    0xd192e819d6ef5218ull, 0xd69906245565a910ull, 0xf40e35855771202aull, 0x106aa07032bbd1b8ull,
    0x19a4c116b8d2d0c8ull, 0x1e376c085141ab53ull, 0x2748774cdf8eeb99ull, 0x34b0bcb5e19b48a8ull,
    0x391c0cb3c5c95a63ull, 0x4ed8aa4ae3418acbull, 0x5b9cca4f7763e373ull, 0x682e6ff3d6b2b8a3ull,
    0x748f82ee5defb2fcull, 0x78a5636f43172f60ull, 0x84c87814a1f0ab72ull, 0x8cc702081a6439ecull,
    0x90befffa23631e28ull, 0xa4506cebde82bde9ull, 0xbef9a3f7b2c67915ull, 0xc67178f2e372532bull,
    0xca273eceea26619cull, 0xd186b8c721c0c207ull, 0xeada7dd6cde0eb1eull, 0xf57d4f7fee6ed178ull,
    0x06f067aa72176fbaull, 0x0a637dc5a2c898a6ull, 0x113f9804bef90daeull, 0x1b710b35131c471bull,
    0x28db77f523047d84ull, 0x32caab7b40c72493ull, 0x3c9ebe0a15c9bebcull, 0x431d67c49c100d4cull,
    0x4cc5d4becb3e42b6ull, 0x597f299cfc657e2aull, 0x5fcb6fab3ad6faecull, 0x6c44198c4a475817ull,
};

static uint64_t ror64(uint64_t x, int n) { return (x >> n) | (x << (64 - n)); }

static void sha512_block(uint64_t h[8], const unsigned char *p)
{
    uint64_t w[80];
    for (int t = 0; t < 16; t++) {
        uint64_t v = 0;
        for (int b = 0; b < 8; b++) v = v << 8 | p[t * 8 + b];
        w[t] = v;
    }
    for (int t = 16; t < 80; t++) {
        const uint64_t s0 = ror64(w[t - 15], 1) ^ ror64(w[t - 15], 8) ^ (w[t - 15] >> 7);
        const uint64_t s1 = ror64(w[t - 2], 19) ^ ror64(w[t - 2], 61) ^ (w[t - 2] >> 6);
        w[t] = w[t - 16] + s0 + w[t - 7] + s1;
    }
    uint64_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
    for (int t = 0; t < 80; t++) {
        const uint64_t t1 = k + (ror64(e, 14) ^ ror64(e, 18) ^ ror64(e, 41)) +
                            ((e & f) ^ (~e & g)) + sha_k[t] + w[t];
        const uint64_t t2 = (ror64(a, 28) ^ ror64(a, 34) ^ ror64(a, 39)) +
                            ((a & b) ^ (a & c) ^ (b & c));
        k = g;
        g = f;
        f = e;
        e = d + t1;
        d = c;
        c = b;
        b = a;
        a = t1 + t2;
    }
    h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += k;
}

void ctf__sha512(const void *data, size_t len, unsigned char out[64])
{
    uint64_t h[8] = {
        0x6a09e667f3bcc908ull, 0xbb67ae8584caa73bull, 0x3c6ef372fe94f82bull, 0xa54ff53a5f1d36f1ull,
        0x510e527fade682d1ull, 0x9b05688c2b3e6c1full, 0x1f83d9abfb41bd6bull, 0x5be0cd19137e2179ull,
    };
    const unsigned char *p = data;
    size_t left = len;
    for (; left >= 128; left -= 128, p += 128) sha512_block(h, p);
    unsigned char last[256] = {0};
    memcpy(last, p, left);
    last[left] = 0x80;
    const size_t blocks = left + 17 <= 128 ? 1 : 2;
    const uint64_t bits = (uint64_t)len * 8; /* lengths below 2**61 bytes: high word 0 */
    for (int b = 0; b < 8; b++) last[blocks * 128 - 1 - b] = (unsigned char)(bits >> (8 * b));
    for (size_t i = 0; i < blocks; i++) sha512_block(h, last + i * 128);
    for (int i = 0; i < 64; i++) out[i] = (unsigned char)(h[i / 8] >> (56 - 8 * (i % 8)));
}

/*======================================================================
 * MT19937 and random.Random's seeding, randrange and shuffle
 *====================================================================*/

#define MT_N 624
#define MT_M 397

static void init_genrand(ctf__pyrandom *r, uint32_t s)
{
    r->mt[0] = s;
    for (uint32_t i = 1; i < MT_N; i++)
        r->mt[i] = 1812433253u * (r->mt[i - 1] ^ (r->mt[i - 1] >> 30)) + i;
    r->mti = MT_N;
}

static void init_by_array(ctf__pyrandom *r, const uint32_t *key, size_t n)
{
    uint32_t *mt = r->mt;
    init_genrand(r, 19650218u);
    size_t i = 1, j = 0;
    for (size_t k = MT_N > n ? MT_N : n; k; k--) {
        mt[i] = (mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1664525u)) + key[j] + (uint32_t)j;
        if (++i >= MT_N) {
            mt[0] = mt[MT_N - 1];
            i = 1;
        }
        if (++j >= n) j = 0;
    }
    for (size_t k = MT_N - 1; k; k--) {
        mt[i] = (mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1566083941u)) - (uint32_t)i;
        if (++i >= MT_N) {
            mt[0] = mt[MT_N - 1];
            i = 1;
        }
    }
    mt[0] = 0x80000000u;
}

static uint32_t genrand(ctf__pyrandom *r)
{
    static const uint32_t mag01[2] = {0, 0x9908b0dfu};
    uint32_t *mt = r->mt, y;
    if (r->mti >= MT_N) {
        int k;
        for (k = 0; k < MT_N - MT_M; k++) {
            y = (mt[k] & 0x80000000u) | (mt[k + 1] & 0x7fffffffu);
            mt[k] = mt[k + MT_M] ^ (y >> 1) ^ mag01[y & 1];
        }
        for (; k < MT_N - 1; k++) {
            y = (mt[k] & 0x80000000u) | (mt[k + 1] & 0x7fffffffu);
            mt[k] = mt[k + (MT_M - MT_N)] ^ (y >> 1) ^ mag01[y & 1];
        }
        y = (mt[MT_N - 1] & 0x80000000u) | (mt[0] & 0x7fffffffu);
        mt[MT_N - 1] = mt[MT_M - 1] ^ (y >> 1) ^ mag01[y & 1];
        r->mti = 0;
    }
    y = mt[r->mti++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    return y ^ (y >> 18);
}

int ctf__pyrandom_seed(ctf__pyrandom *r, const char *text)
{
    /* Python reads text + sha512(text) as one big-endian integer and hands init_by_array its
     * 32-bit words from the least significant one up (the text never starts with a zero byte
     * here, so no leading zeros shorten it). */
    const size_t len = strlen(text);
    unsigned char bytes[CTF__PYRANDOM_TEXT_MAX + 64];
    uint32_t key[(CTF__PYRANDOM_TEXT_MAX + 64) / 4 + 1];
    if (len == 0 || len > CTF__PYRANDOM_TEXT_MAX) return CTF_EINVAL;
    memcpy(bytes, text, len);
    ctf__sha512(text, len, bytes + len);
    const size_t total = len + 64, words = (total + 3) / 4;
    for (size_t w = 0; w < words; w++) {
        uint32_t v = 0;
        for (size_t b = 4; b-- > 0;) {
            const size_t back = w * 4 + b; /* byte position counted from the end */
            v = v << 8 | (back < total ? bytes[total - 1 - back] : 0);
        }
        key[w] = v;
    }
    init_by_array(r, key, words);
    return 0;
}

uint64_t ctf__pyrandom_below(ctf__pyrandom *r, uint64_t n)
{
    int k = 0;
    while (k < 64 && (n >> k)) k++; /* n's bit length */
    for (;;) {
        uint64_t v;
        if (k <= 32) {
            v = genrand(r) >> (32 - k);
        } else { /* getrandbits: the low word first */
            v = genrand(r);
            v |= (uint64_t)(genrand(r) >> (64 - k)) << 32;
        }
        if (v < n) return v;
    }
}

void ctf__pyrandom_shuffle(ctf__pyrandom *r, size_t *x, size_t n)
{
    for (size_t i = n; i-- > 1;) {
        const size_t j = (size_t)ctf__pyrandom_below(r, (uint64_t)i + 1);
        const size_t t = x[i];
        x[i] = x[j];
        x[j] = t;
    }
}
