/*
 * sigv4.c -- AWS Signature Version 4 for the HTTP backend: SHA-256, HMAC-SHA-256, the
 * canonical request and the Authorization header. Written here so that a signed request needs
 * nothing beyond libcurl (no TLS library's digest API, which differs between curl flavours).
 */

#include "io.h"

#include <stdio.h>
#include <string.h>

/*======================================================================
 * SHA-256 (FIPS 180-4)
 *====================================================================*/

static const uint32_t K256[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

static inline uint32_t ror(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

static void sha256_block(uint32_t h[8], const unsigned char *p)
{
    uint32_t w[64];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
               (uint32_t)p[4 * i + 2] << 8 | (uint32_t)p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = ror(w[i - 15], 7) ^ ror(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = ror(w[i - 2], 17) ^ ror(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
    for (int i = 0; i < 64; i++) {
        uint32_t t1 = k + (ror(e, 6) ^ ror(e, 11) ^ ror(e, 25)) + ((e & f) ^ (~e & g)) + K256[i] +
                      w[i];
        uint32_t t2 = (ror(a, 2) ^ ror(a, 13) ^ ror(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
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

void ctf__sha256_init(ctf__sha256_ctx *s)
{
    static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(s->h, iv, sizeof iv);
    s->len = 0;
    s->fill = 0;
}

void ctf__sha256_update(ctf__sha256_ctx *s, const void *data, size_t n)
{
    const unsigned char *p = data;
    s->len += n;
    if (s->fill) {
        size_t take = 64 - s->fill < n ? 64 - s->fill : n;
        memcpy(s->buf + s->fill, p, take);
        s->fill += take;
        p += take;
        n -= take;
        if (s->fill < 64) return;
        sha256_block(s->h, s->buf);
        s->fill = 0;
    }
    for (; n >= 64; p += 64, n -= 64) sha256_block(s->h, p);
    memcpy(s->buf, p, n);
    s->fill = n;
}

void ctf__sha256_final(ctf__sha256_ctx *s, unsigned char out[32])
{
    const uint64_t bits = s->len * 8;
    unsigned char pad[72] = {0x80};
    size_t padn = (s->fill < 56 ? 56 : 120) - s->fill;
    for (int i = 0; i < 8; i++) pad[padn + (size_t)i] = (unsigned char)(bits >> (56 - 8 * i));
    ctf__sha256_update(s, pad, padn + 8);
    for (int i = 0; i < 8; i++) {
        out[4 * i] = (unsigned char)(s->h[i] >> 24);
        out[4 * i + 1] = (unsigned char)(s->h[i] >> 16);
        out[4 * i + 2] = (unsigned char)(s->h[i] >> 8);
        out[4 * i + 3] = (unsigned char)s->h[i];
    }
}

void ctf__sha256(const void *data, size_t n, unsigned char out[32])
{
    ctf__sha256_ctx s;
    ctf__sha256_init(&s);
    ctf__sha256_update(&s, data, n);
    ctf__sha256_final(&s, out);
}

void ctf__hmac_sha256(const void *key, size_t klen, const void *msg, size_t mlen,
                      unsigned char out[32])
{
    unsigned char k[64] = {0}, pad[64], inner[32];
    if (klen > 64)
        ctf__sha256(key, klen, k);
    else
        memcpy(k, key, klen);
    ctf__sha256_ctx s;
    for (int i = 0; i < 64; i++) pad[i] = k[i] ^ 0x36;
    ctf__sha256_init(&s);
    ctf__sha256_update(&s, pad, 64);
    ctf__sha256_update(&s, msg, mlen);
    ctf__sha256_final(&s, inner);
    for (int i = 0; i < 64; i++) pad[i] = k[i] ^ 0x5c;
    ctf__sha256_init(&s);
    ctf__sha256_update(&s, pad, 64);
    ctf__sha256_update(&s, inner, 32);
    ctf__sha256_final(&s, out);
}

void ctf__hex(const unsigned char *p, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[p[i] >> 4];
        out[2 * i + 1] = digits[p[i] & 15];
    }
    out[2 * n] = '\0';
}

/*======================================================================
 * Signing
 *====================================================================*/

size_t ctf__uri_encode(const char *s, bool keep_slash, char *out, size_t cap)
{
    static const char digits[] = "0123456789ABCDEF";
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        const unsigned char c = *p;
        const bool plain = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                           (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.' || c == '~' ||
                           (keep_slash && c == '/');
        if (plain) {
            if (n + 1 < cap) out[n] = (char)c;
            n++;
        } else {
            if (n + 3 < cap) {
                out[n] = '%';
                out[n + 1] = digits[c >> 4];
                out[n + 2] = digits[c & 15];
            }
            n += 3;
        }
    }
    if (cap) out[n < cap ? n : cap - 1] = '\0';
    return n;
}

/* Feeds a string to the canonical request's hash: the request is hashed as it is written, so
 * that no header (a session token of any length) is cut. */
static void put(ctf__sha256_ctx *h, const char *s) { ctf__sha256_update(h, s, strlen(s)); }

int ctf__sigv4_authorization(const ctf__sigv4 *req, char *out, size_t cap)
{
    /* The canonical request: method, path, query, headers (lower-case names, sorted by the
     * caller), the signed header list and the payload hash, one per line. */
    ctf__sha256_ctx h;
    ctf__sha256_init(&h);
    put(&h, req->method);
    put(&h, "\n");
    put(&h, req->canonical_uri);
    put(&h, "\n");
    put(&h, req->canonical_query ? req->canonical_query : "");
    put(&h, "\n");
    char signed_hdrs[512];
    size_t sn = 0;
    for (size_t i = 0; i < req->num_headers; i++) {
        put(&h, req->headers[i].name);
        put(&h, ":");
        put(&h, req->headers[i].value);
        put(&h, "\n");
        const size_t nl = strlen(req->headers[i].name);
        if (sn + nl + 2 > sizeof signed_hdrs) return -1;
        if (i) signed_hdrs[sn++] = ';';
        memcpy(signed_hdrs + sn, req->headers[i].name, nl);
        sn += nl;
    }
    signed_hdrs[sn] = '\0';
    put(&h, "\n");
    put(&h, signed_hdrs);
    put(&h, "\n");
    put(&h, req->payload_hash);

    unsigned char d[32];
    char creq_hex[65];
    ctf__sha256_final(&h, d);
    ctf__hex(d, 32, creq_hex);

    /* The string to sign and the key derived from the secret through date, region and
     * service. */
    char date[9];
    memcpy(date, req->amz_date, 8);
    date[8] = '\0';
    char scope[160], sts[400];
    int sl = snprintf(scope, sizeof scope, "%s/%s/%s/aws4_request", date, req->region,
                      req->service);
    if (sl < 0 || (size_t)sl >= sizeof scope) return -1;
    int tl = snprintf(sts, sizeof sts, "AWS4-HMAC-SHA256\n%s\n%s\n%s", req->amz_date, scope,
                      creq_hex);
    if (tl < 0 || (size_t)tl >= sizeof sts) return -1;
    const size_t kl = strlen(req->secret_key) + 4;
    char *kseed = CTF_MALLOC(kl + 1);
    if (!kseed) return -1;
    memcpy(kseed, "AWS4", 4);
    memcpy(kseed + 4, req->secret_key, kl - 3);
    unsigned char k[32];
    ctf__hmac_sha256(kseed, kl, date, 8, k);
    ctf__hmac_sha256(k, 32, req->region, strlen(req->region), k);
    ctf__hmac_sha256(k, 32, req->service, strlen(req->service), k);
    ctf__hmac_sha256(k, 32, "aws4_request", 12, k);
    ctf__hmac_sha256(k, 32, sts, (size_t)tl, d);
    memset(kseed, 0, kl);
    CTF_FREE(kseed);
    char sig[65];
    ctf__hex(d, 32, sig);
    int ol = snprintf(out, cap, "AWS4-HMAC-SHA256 Credential=%s/%s, SignedHeaders=%s, Signature=%s",
                      req->access_key, scope, signed_hdrs, sig);
    return ol < 0 || (size_t)ol >= cap ? -1 : 0;
}
