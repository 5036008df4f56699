/*
 * The verifier's scalar domain (vf_scalar.h): intervals of the 64-bit value
 * and of its low 32 bits, signed and unsigned, and a tristate number.
 *
 * Every ALU operation is written once for a width w of 32 or 64 bits over a
 * "view" of the value at that width (its unsigned and signed interval and
 * the low w bits of the tristate number): ALU64 operates on the 64-bit view,
 * ALU on the 32-bit view and zero-extends, exactly as the VM computes.
 * Interval rules work on the exact mathematical result first (in 128-bit
 * arithmetic) and keep it only if wrapping to w bits leaves it one
 * interval; otherwise the interval is the whole range, and the other parts
 * carry what is left.  Shifts enumerate the possible counts after the VM's
 * mask (at most 64 of them) and join the results, so a count that is
 * unknown, or known only modulo 32, is handled like any other.
 */
#include "vf_scalar.h"

#include "mkscope/bpf_isa.h"

__extension__ typedef __int128 vfs_i128;
__extension__ typedef unsigned __int128 vfs_u128;

#define M32 0xffffffffull

/* A value at width w: the parts that describe the low w bits. */
struct wv {
    unsigned w;
    uint64_t umin, umax;
    int64_t smin, smax;
    uint64_t tv, tm;
};

static uint64_t umask(unsigned w)
{
    return w == 64 ? ~0ull : M32;
}

static int64_t smin_w(unsigned w)
{
    return w == 64 ? INT64_MIN : INT32_MIN;
}

static int64_t smax_w(unsigned w)
{
    return w == 64 ? INT64_MAX : INT32_MAX;
}

/* The w-bit pattern x read as a signed number. */
static int64_t sx(unsigned w, uint64_t x)
{
    return w == 64 ? (int64_t)x : (int64_t)(int32_t)(uint32_t)x;
}

static uint64_t umin64(uint64_t a, uint64_t b) { return a < b ? a : b; }
static uint64_t umax64(uint64_t a, uint64_t b) { return a > b ? a : b; }
static int64_t smin64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t smax64(int64_t a, int64_t b) { return a > b ? a : b; }

/* ---- tristate numbers --------------------------------------------------- */

struct tn {
    uint64_t v, m;
};

static struct tn tn_unknown(unsigned w)
{
    return (struct tn){0, umask(w)};
}

/* The smallest tristate number holding every value in [lo, hi]. */
static struct tn tn_range(unsigned w, uint64_t lo, uint64_t hi)
{
    uint64_t chi = lo ^ hi;
    if (chi == 0)
        return (struct tn){lo, 0};
    unsigned bits = 64u - (unsigned)__builtin_clzll(chi);
    if (bits >= 64)
        return tn_unknown(w);
    uint64_t delta = (1ull << bits) - 1;
    return (struct tn){lo & ~delta & umask(w), delta & umask(w)};
}

static struct tn tn_add(struct tn a, struct tn b, unsigned w)
{
    uint64_t sm = a.m + b.m, sv = a.v + b.v, sigma = sm + sv, chi = sigma ^ sv, mu = chi | a.m | b.m;
    return (struct tn){sv & ~mu & umask(w), mu & umask(w)};
}

static struct tn tn_sub(struct tn a, struct tn b, unsigned w)
{
    uint64_t dv = a.v - b.v, alpha = dv + a.m, beta = dv - b.m, chi = alpha ^ beta, mu = chi | a.m | b.m;
    return (struct tn){dv & ~mu & umask(w), mu & umask(w)};
}

static struct tn tn_and(struct tn a, struct tn b)
{
    uint64_t alpha = a.v | a.m, beta = b.v | b.m, v = a.v & b.v;
    return (struct tn){v, alpha & beta & ~v};
}

static struct tn tn_or(struct tn a, struct tn b)
{
    uint64_t v = a.v | b.v, mu = a.m | b.m;
    return (struct tn){v, mu & ~v};
}

static struct tn tn_xor(struct tn a, struct tn b)
{
    uint64_t v = a.v ^ b.v, mu = a.m | b.m;
    return (struct tn){v & ~mu, mu};
}

/* Bits below the lowest unknown bit are known; so are the zeros below the
 * sum of the operands' trailing zeros. */
static struct tn tn_mul(struct tn a, struct tn b, unsigned w)
{
    unsigned kna = a.m ? (unsigned)__builtin_ctzll(a.m) : 64, knb = b.m ? (unsigned)__builtin_ctzll(b.m) : 64;
    unsigned tza = (a.v | a.m) ? (unsigned)__builtin_ctzll(a.v | a.m) : 64;
    unsigned tzb = (b.v | b.m) ? (unsigned)__builtin_ctzll(b.v | b.m) : 64;
    unsigned k = kna < knb ? kna : knb;
    if (tza + tzb > k)
        k = tza + tzb;
    if (k >= w)
        return (struct tn){(a.v * b.v) & umask(w), 0};
    uint64_t low = (1ull << k) - 1;
    return (struct tn){(a.v * b.v) & low, umask(w) & ~low};
}

static struct tn tn_lsh(struct tn a, unsigned k, unsigned w)
{
    return (struct tn){(a.v << k) & umask(w), (a.m << k) & umask(w)};
}

static struct tn tn_rsh(struct tn a, unsigned k)
{
    return (struct tn){a.v >> k, a.m >> k};
}

static struct tn tn_arsh(struct tn a, unsigned k, unsigned w)
{
    int64_t v = sx(w, a.v), m = sx(w, a.m);
    return (struct tn){(uint64_t)(v >> k) & umask(w), (uint64_t)(m >> k) & umask(w)};
}

static struct tn tn_union(struct tn a, struct tn b)
{
    uint64_t mu = a.m | b.m | (a.v ^ b.v);
    return (struct tn){a.v & ~mu, mu};
}

/* a and b both hold; false when no value fits both. */
static bool tn_intersect(struct tn a, struct tn b, struct tn *out)
{
    if ((a.v ^ b.v) & ~(a.m | b.m))
        return false;
    uint64_t mu = a.m & b.m;
    *out = (struct tn){(a.v | b.v) & ~mu, mu};
    return true;
}

static bool tn_in(struct tn t, struct tn s)
{
    if (s.m & ~t.m)
        return false;
    return (s.v & ~t.m) == t.v;
}

/* Swaps the bytes of the low bits/8 bytes and zero-extends. */
static uint64_t bswap_n(uint64_t x, unsigned bits)
{
    switch (bits) {
    case 16: return (uint64_t)__builtin_bswap16((uint16_t)x);
    case 32: return (uint64_t)__builtin_bswap32((uint32_t)x);
    default: return __builtin_bswap64(x);
    }
}

/* ---- views -------------------------------------------------------------- */

static void wv_full(struct wv *r, unsigned w)
{
    r->w = w;
    r->umin = 0;
    r->umax = umask(w);
    r->smin = smin_w(w);
    r->smax = smax_w(w);
    r->tv = 0;
    r->tm = umask(w);
}

static void wv_const(struct wv *r, unsigned w, uint64_t c)
{
    c &= umask(w);
    r->w = w;
    r->umin = r->umax = c;
    r->smin = r->smax = sx(w, c);
    r->tv = c;
    r->tm = 0;
}

static struct wv view(const struct vf_scalar *r, unsigned w)
{
    struct wv v;
    v.w = w;
    if (w == 64) {
        v.umin = r->umin;
        v.umax = r->umax;
        v.smin = r->smin;
        v.smax = r->smax;
        v.tv = r->tv;
        v.tm = r->tm;
    } else {
        v.umin = r->u32min;
        v.umax = r->u32max;
        v.smin = r->s32min;
        v.smax = r->s32max;
        v.tv = r->tv & M32;
        v.tm = r->tm & M32;
    }
    return v;
}

static struct tn wv_tn(const struct wv *v)
{
    return (struct tn){v->tv, v->tm};
}

/* r takes the 64-bit view v; its low half is found again by vfs_sync. */
static void set64(struct vf_scalar *r, const struct wv *v)
{
    r->umin = v->umin;
    r->umax = v->umax;
    r->smin = v->smin;
    r->smax = v->smax;
    r->tv = v->tv;
    r->tm = v->tm;
    r->u32min = 0;
    r->u32max = (uint32_t)M32;
    r->s32min = INT32_MIN;
    r->s32max = INT32_MAX;
}

/* r takes the 32-bit view v, zero-extended. */
static void set32zext(struct vf_scalar *r, const struct wv *v)
{
    r->u32min = (uint32_t)v->umin;
    r->u32max = (uint32_t)v->umax;
    r->s32min = (int32_t)v->smin;
    r->s32max = (int32_t)v->smax;
    r->umin = v->umin;
    r->umax = v->umax;
    r->smin = (int64_t)v->umin;
    r->smax = (int64_t)v->umax;
    r->tv = v->tv & M32;
    r->tm = v->tm & M32;
}

/* ---- basic values ------------------------------------------------------- */

void vfs_unknown(struct vf_scalar *r)
{
    r->umin = 0;
    r->umax = UINT64_MAX;
    r->smin = INT64_MIN;
    r->smax = INT64_MAX;
    r->u32min = 0;
    r->u32max = UINT32_MAX;
    r->s32min = INT32_MIN;
    r->s32max = INT32_MAX;
    r->tv = 0;
    r->tm = UINT64_MAX;
}

void vfs_const(struct vf_scalar *r, uint64_t c)
{
    r->umin = r->umax = c;
    r->smin = r->smax = (int64_t)c;
    r->u32min = r->u32max = (uint32_t)c;
    r->s32min = r->s32max = (int32_t)(uint32_t)c;
    r->tv = c;
    r->tm = 0;
}

void vfs_urange(struct vf_scalar *r, uint64_t lo, uint64_t hi)
{
    vfs_unknown(r);
    r->umin = lo;
    r->umax = hi;
    if (!vfs_sync(r))
        vfs_unknown(r);
}

void vfs_width(struct vf_scalar *r, uint32_t size, bool sign)
{
    if (size >= 8) {
        vfs_unknown(r);
        return;
    }
    uint32_t bits = size * 8u;
    if (sign) {
        vfs_unknown(r);
        r->smin = -(int64_t)(1ull << (bits - 1));
        r->smax = (int64_t)((1ull << (bits - 1)) - 1);
        if (!vfs_sync(r))
            vfs_unknown(r);
    } else {
        vfs_urange(r, 0, (1ull << bits) - 1);
    }
}

bool vfs_is_const(const struct vf_scalar *r)
{
    return r->umin == r->umax;
}

bool vfs_contains(const struct vf_scalar *r, uint64_t x)
{
    return x >= r->umin && x <= r->umax && (int64_t)x >= r->smin && (int64_t)x <= r->smax &&
           (uint32_t)x >= r->u32min && (uint32_t)x <= r->u32max && (int32_t)(uint32_t)x >= r->s32min &&
           (int32_t)(uint32_t)x <= r->s32max && (x & ~r->tm) == r->tv;
}

bool vfs_covers(const struct vf_scalar *t, const struct vf_scalar *s)
{
    return s->umin >= t->umin && s->umax <= t->umax && s->smin >= t->smin && s->smax <= t->smax &&
           s->u32min >= t->u32min && s->u32max <= t->u32max && s->s32min >= t->s32min &&
           s->s32max <= t->s32max && tn_in((struct tn){t->tv, t->tm}, (struct tn){s->tv, s->tm});
}

void vfs_join(struct vf_scalar *s, const struct vf_scalar *t)
{
    s->umin = umin64(s->umin, t->umin);
    s->umax = umax64(s->umax, t->umax);
    s->smin = smin64(s->smin, t->smin);
    s->smax = smax64(s->smax, t->smax);
    if (t->u32min < s->u32min) s->u32min = t->u32min;
    if (t->u32max > s->u32max) s->u32max = t->u32max;
    if (t->s32min < s->s32min) s->s32min = t->s32min;
    if (t->s32max > s->s32max) s->s32max = t->s32max;
    struct tn u = tn_union((struct tn){s->tv, s->tm}, (struct tn){t->tv, t->tm});
    s->tv = u.v;
    s->tm = u.m;
}

/* ---- tightening --------------------------------------------------------- */

/* Signed bounds of the values a w-bit tristate number holds. */
static void tn_sbounds(struct tn t, unsigned w, int64_t *lo, int64_t *hi)
{
    uint64_t sb = 1ull << (w - 1);
    if (t.m & sb) {
        *lo = sx(w, t.v | sb);
        *hi = sx(w, (t.v | t.m) & ~sb);
    } else {
        *lo = sx(w, t.v);
        *hi = sx(w, t.v | t.m);
    }
}

/* One interval pair of a view, tightened from its tristate number and from
 * each other; false when empty. */
static bool wv_sync(struct wv *v)
{
    unsigned w = v->w;
    int64_t lo, hi;
    struct tn t = wv_tn(v);
    v->umin = umax64(v->umin, t.v);
    v->umax = umin64(v->umax, t.v | t.m);
    tn_sbounds(t, w, &lo, &hi);
    v->smin = smax64(v->smin, lo);
    v->smax = smin64(v->smax, hi);
    /* unsigned and signed agree where the interval does not cross the sign */
    if (v->umin <= v->umax && (sx(w, v->umin) <= sx(w, v->umax))) {
        v->smin = smax64(v->smin, sx(w, v->umin));
        v->smax = smin64(v->smax, sx(w, v->umax));
    }
    if (v->smin <= v->smax && (v->smin >= 0 || v->smax < 0)) {
        v->umin = umax64(v->umin, (uint64_t)v->smin & umask(w));
        v->umax = umin64(v->umax, (uint64_t)v->smax & umask(w));
    }
    if (v->umin > v->umax || v->smin > v->smax)
        return false;
    struct tn r = tn_range(w, v->umin, v->umax), n;
    if (!tn_intersect(t, r, &n))
        return false;
    v->tv = n.v;
    v->tm = n.m;
    return true;
}

bool vfs_sync(struct vf_scalar *r)
{
    for (int iter = 0; iter < 4; iter++) {
        struct vf_scalar before = *r;
        struct wv v64 = view(r, 64), v32 = view(r, 32);
        if (!wv_sync(&v64) || !wv_sync(&v32))
            return false;
        /* the two tristate numbers are one: merge the low halves */
        struct tn t;
        if (!tn_intersect((struct tn){v64.tv, v64.tm}, (struct tn){(v64.tv & ~M32) | v32.tv, (v64.tm & ~M32) | v32.tm},
                          &t))
            return false;
        /* 64 -> 32: where the upper half is the same over the interval, the
         * low halves run in order */
        if ((v64.umin >> 32) == (v64.umax >> 32)) {
            v32.umin = umax64(v32.umin, v64.umin & M32);
            v32.umax = umin64(v32.umax, v64.umax & M32);
            if ((int32_t)(uint32_t)v64.umin <= (int32_t)(uint32_t)v64.umax) {
                v32.smin = smax64(v32.smin, (int32_t)(uint32_t)v64.umin);
                v32.smax = smin64(v32.smax, (int32_t)(uint32_t)v64.umax);
            }
        }
        if ((v64.smin >> 32) == (v64.smax >> 32)) {
            v32.umin = umax64(v32.umin, (uint64_t)v64.smin & M32);
            v32.umax = umin64(v32.umax, (uint64_t)v64.smax & M32);
            if ((int32_t)(uint32_t)v64.smin <= (int32_t)(uint32_t)v64.smax) {
                v32.smin = smax64(v32.smin, (int32_t)(uint32_t)v64.smin);
                v32.smax = smin64(v32.smax, (int32_t)(uint32_t)v64.smax);
            }
        }
        if (v32.umin > v32.umax || v32.smin > v32.smax)
            return false;
        /* 32 -> 64: the same, the other way */
        if ((v64.umin >> 32) == (v64.umax >> 32)) {
            uint64_t h = v64.umin & ~M32;
            v64.umin = umax64(v64.umin, h | v32.umin);
            v64.umax = umin64(v64.umax, h | v32.umax);
        }
        if ((v64.smin >> 32) == (v64.smax >> 32)) {
            uint64_t h = (uint64_t)v64.smin & ~M32;
            v64.smin = smax64(v64.smin, (int64_t)(h | v32.umin));
            v64.smax = smin64(v64.smax, (int64_t)(h | v32.umax));
        }
        if (v64.umin > v64.umax || v64.smin > v64.smax)
            return false;
        r->umin = v64.umin;
        r->umax = v64.umax;
        r->smin = v64.smin;
        r->smax = v64.smax;
        r->u32min = (uint32_t)v32.umin;
        r->u32max = (uint32_t)v32.umax;
        r->s32min = (int32_t)v32.smin;
        r->s32max = (int32_t)v32.smax;
        r->tv = t.v;
        r->tm = t.m;
        if (__builtin_memcmp(&before, r, sizeof(*r)) == 0)
            break;
    }
    return true;
}

/* ---- interval arithmetic ------------------------------------------------ */

/* r's unsigned interval from the exact interval [lo, hi] of the result. */
static void wrap_u(struct wv *r, vfs_i128 lo, vfs_i128 hi)
{
    vfs_i128 mod = (vfs_i128)1 << r->w;
    if (hi - lo >= mod) {
        r->umin = 0;
        r->umax = umask(r->w);
        return;
    }
    vfs_i128 l = lo % mod, h = hi % mod;
    if (l < 0)
        l += mod;
    if (h < 0)
        h += mod;
    if (l <= h) {
        r->umin = (uint64_t)l;
        r->umax = (uint64_t)h;
    } else {
        r->umin = 0;
        r->umax = umask(r->w);
    }
}

static void wrap_u128(struct wv *r, vfs_u128 lo, vfs_u128 hi)
{
    vfs_u128 mask = umask(r->w);
    if (hi - lo > mask || (lo & mask) > (hi & mask)) {
        r->umin = 0;
        r->umax = umask(r->w);
        return;
    }
    r->umin = (uint64_t)(lo & mask);
    r->umax = (uint64_t)(hi & mask);
}

static void wrap_s(struct wv *r, vfs_i128 lo, vfs_i128 hi)
{
    vfs_i128 mod = (vfs_i128)1 << r->w, base = smin_w(r->w);
    if (hi - lo >= mod) {
        r->smin = smin_w(r->w);
        r->smax = smax_w(r->w);
        return;
    }
    vfs_i128 l = (lo - base) % mod, h = (hi - base) % mod;
    if (l < 0)
        l += mod;
    if (h < 0)
        h += mod;
    if (l <= h) {
        r->smin = (int64_t)(l + base);
        r->smax = (int64_t)(h + base);
    } else {
        r->smin = smin_w(r->w);
        r->smax = smax_w(r->w);
    }
}

static uint64_t uabs(int64_t x)
{
    return x < 0 ? (uint64_t)0 - (uint64_t)x : (uint64_t)x;
}

/* ---- operations at width w: a = a <op> b -------------------------------- */

static void op_add(struct wv *a, const struct wv *b)
{
    struct wv r = *a;
    wrap_u(&r, (vfs_i128)a->umin + b->umin, (vfs_i128)a->umax + b->umax);
    wrap_s(&r, (vfs_i128)a->smin + b->smin, (vfs_i128)a->smax + b->smax);
    struct tn t = tn_add(wv_tn(a), wv_tn(b), a->w);
    r.tv = t.v;
    r.tm = t.m;
    *a = r;
}

static void op_sub(struct wv *a, const struct wv *b)
{
    struct wv r = *a;
    wrap_u(&r, (vfs_i128)a->umin - b->umax, (vfs_i128)a->umax - b->umin);
    wrap_s(&r, (vfs_i128)a->smin - b->smax, (vfs_i128)a->smax - b->smin);
    struct tn t = tn_sub(wv_tn(a), wv_tn(b), a->w);
    r.tv = t.v;
    r.tm = t.m;
    *a = r;
}

static void op_mul(struct wv *a, const struct wv *b)
{
    struct wv r = *a;
    wrap_u128(&r, (vfs_u128)a->umin * b->umin, (vfs_u128)a->umax * b->umax);
    vfs_i128 c[4] = {(vfs_i128)a->smin * b->smin, (vfs_i128)a->smin * b->smax, (vfs_i128)a->smax * b->smin,
                     (vfs_i128)a->smax * b->smax};
    vfs_i128 lo = c[0], hi = c[0];
    for (int k = 1; k < 4; k++) {
        if (c[k] < lo)
            lo = c[k];
        if (c[k] > hi)
            hi = c[k];
    }
    wrap_s(&r, lo, hi);
    struct tn t = tn_mul(wv_tn(a), wv_tn(b), a->w);
    r.tv = t.v;
    r.tm = t.m;
    *a = r;
}

/* x / 0 = 0 */
static void op_div(struct wv *a, const struct wv *b)
{
    struct wv r;
    wv_full(&r, a->w);
    if (b->umax == 0) {
        wv_const(&r, a->w, 0);
    } else if (b->umin == 0) {
        r.umax = a->umax;
    } else {
        r.umin = a->umin / b->umax;
        r.umax = a->umax / b->umin;
    }
    *a = r;
}

/* x % 0 = x */
static void op_mod(struct wv *a, const struct wv *b)
{
    struct wv r;
    if (b->umax == 0 || (b->umin > 0 && a->umax < b->umin))
        return; /* the dividend unchanged */
    wv_full(&r, a->w);
    r.umax = a->umax;
    if (b->umin > 0 && b->umax - 1 < r.umax)
        r.umax = b->umax - 1;
    *a = r;
}

/* Signed: x / 0 = 0, x / -1 = -x (INT_MIN / -1 = INT_MIN), else truncated. */
static void op_sdiv(struct wv *a, const struct wv *b)
{
    struct wv r;
    unsigned w = a->w;
    wv_full(&r, w);
    if (b->smin == b->smax) {
        int64_t c = b->smin;
        if (c == 0) {
            wv_const(&r, w, 0);
        } else if (c == -1) {
            struct wv z;
            wv_const(&z, w, 0);
            op_sub(&z, a);
            r = z;
        } else if (c > 0) {
            r.smin = a->smin / c;
            r.smax = a->smax / c;
        } else {
            r.smin = a->smax / c;
            r.smax = a->smin / c;
        }
    } else if (a->smin >= 0 && b->smin >= 1) {
        r.smin = a->smin / b->smax;
        r.smax = a->smax / b->smin;
    } else if (a->smin > smin_w(w)) {
        /* |x / y| <= |x| for every y, 0 and -1 included */
        int64_t m = (int64_t)umax64(uabs(a->smin), uabs(a->smax));
        r.smin = -m;
        r.smax = m;
    }
    *a = r;
}

/* Signed: x % 0 = x, x % -1 = 0, else the sign of x and |r| < |y|. */
static void op_smod(struct wv *a, const struct wv *b)
{
    struct wv r;
    unsigned w = a->w;
    if (b->smin == 0 && b->smax == 0)
        return;
    wv_full(&r, w);
    if (b->smin == -1 && b->smax == -1) {
        wv_const(&r, w, 0);
        *a = r;
        return;
    }
    int64_t lo = smin64(a->smin, 0), hi = smax64(a->smax, 0);
    bool may_zero = b->smin <= 0 && b->smax >= 0 && b->umin == 0;
    if (!may_zero) {
        uint64_t m = umax64(uabs(b->smin), uabs(b->smax)) - 1; /* |r| <= |y| - 1 */
        if (m < uabs(lo))
            lo = -(int64_t)m;
        if (m < (uint64_t)hi)
            hi = (int64_t)m;
    }
    r.smin = lo;
    r.smax = hi;
    *a = r;
}

static void op_and(struct wv *a, const struct wv *b)
{
    struct wv r;
    wv_full(&r, a->w);
    r.umax = umin64(a->umax, b->umax);
    if (a->smin >= 0 || b->smin >= 0) {
        r.smin = 0;
        r.smax = a->smin >= 0 && b->smin >= 0 ? smin64(a->smax, b->smax) : a->smin >= 0 ? a->smax : b->smax;
    }
    struct tn t = tn_and(wv_tn(a), wv_tn(b));
    r.tv = t.v;
    r.tm = t.m;
    *a = r;
}

static void op_or(struct wv *a, const struct wv *b)
{
    struct wv r;
    wv_full(&r, a->w);
    r.umin = umax64(a->umin, b->umin);
    struct tn t = tn_or(wv_tn(a), wv_tn(b));
    r.tv = t.v;
    r.tm = t.m;
    *a = r;
}

static void op_xor(struct wv *a, const struct wv *b)
{
    struct wv r;
    wv_full(&r, a->w);
    struct tn t = tn_xor(wv_tn(a), wv_tn(b));
    r.tv = t.v;
    r.tm = t.m;
    *a = r;
}

/* Shifts: the join over every count the masked count register may hold. */
static void op_shift(uint8_t op, struct wv *a, const struct wv *b)
{
    unsigned w = a->w;
    struct tn ct = tn_and(wv_tn(b), (struct tn){w - 1, 0});
    uint64_t kmin = 0, kmax = w - 1;
    if (b->umax <= w - 1) {
        kmin = b->umin;
        kmax = b->umax;
    }
    struct wv acc;
    bool any = false;
    for (uint64_t k = kmin; k <= kmax; k++) {
        if ((k & ~ct.m) != ct.v)
            continue;
        struct wv r;
        struct tn t;
        wv_full(&r, w);
        switch (op) {
        case MKS_BPF_LSH:
            if (a->umax <= (umask(w) >> k)) {
                r.umin = a->umin << k;
                r.umax = a->umax << k;
            }
            t = tn_lsh(wv_tn(a), (unsigned)k, w);
            break;
        case MKS_BPF_RSH:
            r.umin = a->umin >> k;
            r.umax = a->umax >> k;
            t = tn_rsh(wv_tn(a), (unsigned)k);
            break;
        default: /* MKS_BPF_ARSH */
            r.smin = a->smin >> k;
            r.smax = a->smax >> k;
            t = tn_arsh(wv_tn(a), (unsigned)k, w);
            break;
        }
        r.tv = t.v;
        r.tm = t.m;
        if (!any) {
            acc = r;
            any = true;
        } else {
            acc.umin = umin64(acc.umin, r.umin);
            acc.umax = umax64(acc.umax, r.umax);
            acc.smin = smin64(acc.smin, r.smin);
            acc.smax = smax64(acc.smax, r.smax);
            struct tn u = tn_union(wv_tn(&acc), t);
            acc.tv = u.v;
            acc.tm = u.m;
        }
    }
    if (!any) /* no count possible: an impossible state; anything is sound */
        wv_full(&acc, w);
    *a = acc;
}

/* Sign extension of the low `bits` bits of the source (movsx). */
static void op_movsx(struct wv *a, const struct vf_scalar *src, unsigned bits)
{
    unsigned w = a->w;
    int64_t lim = (int64_t)1 << (bits - 1);
    struct wv r;
    wv_full(&r, w);
    if (src->s32min >= -lim && src->s32max < lim) {
        r.smin = src->s32min;
        r.smax = src->s32max;
    } else if (src->u32max < (uint64_t)lim) {
        r.smin = src->u32min;
        r.smax = src->u32max;
    } else {
        r.smin = -lim;
        r.smax = lim - 1;
    }
    uint64_t low = (1ull << bits) - 1, sb = 1ull << (bits - 1);
    uint64_t v = src->tv & low, m = src->tm & low;
    if (m & sb)
        m |= ~low;
    else if (v & sb)
        v |= ~low;
    r.tv = v & umask(w);
    r.tm = m & umask(w);
    *a = r;
}

/* Byte order: ALU | END | K is "to little endian" (truncation on this
 * little-endian VM), ALU | END | X "to big endian" and ALU64 | END | K
 * bswap both swap the low imm bits; every result is zero-extended except
 * le64, which changes nothing. */
static void op_end(uint8_t code, int32_t imm, struct vf_scalar *r)
{
    unsigned bits = (unsigned)imm;
    if (bits != 16 && bits != 32 && bits != 64) {
        vfs_unknown(r);
        return;
    }
    bool swap = MKS_BPF_CLASS(code) == MKS_BPF_ALU64 || (code & MKS_BPF_X);
    uint64_t low = bits == 64 ? ~0ull : (1ull << bits) - 1;
    if (!swap) {
        if (bits == 64)
            return;
        struct wv v = view(r, 32);
        if (bits == 16 && v.umax > low) {
            wv_full(&v, 32);
            v.umax = low;
            v.tv = r->tv & low;
            v.tm = r->tm & low;
        }
        set32zext(r, &v);
        return;
    }
    struct wv v;
    wv_full(&v, 64);
    v.tv = bswap_n(r->tv & low, bits);
    v.tm = bswap_n(r->tm & low, bits);
    set64(r, &v);
}

void vfs_alu(uint8_t code, int16_t off, int32_t imm, struct vf_scalar *dst, const struct vf_scalar *src)
{
    uint8_t op = code & 0xf0;
    unsigned w = MKS_BPF_CLASS(code) == MKS_BPF_ALU64 ? 64 : 32;
    bool x = (code & MKS_BPF_X) != 0;
    struct vf_scalar k;
    struct wv a, b;

    if (op == MKS_BPF_END) {
        op_end(code, imm, dst);
        if (!vfs_sync(dst))
            vfs_unknown(dst);
        return;
    }
    if (!x) {
        vfs_const(&k, w == 64 ? (uint64_t)(int64_t)imm : (uint64_t)(uint32_t)imm);
        src = &k;
    }
    a = view(dst, w);
    b = view(src, w);
    switch (op) {
    case MKS_BPF_ADD: op_add(&a, &b); break;
    case MKS_BPF_SUB: op_sub(&a, &b); break;
    case MKS_BPF_MUL: op_mul(&a, &b); break;
    case MKS_BPF_DIV:
        if (off == 1)
            op_sdiv(&a, &b);
        else
            op_div(&a, &b);
        break;
    case MKS_BPF_MOD:
        if (off == 1)
            op_smod(&a, &b);
        else
            op_mod(&a, &b);
        break;
    case MKS_BPF_OR: op_or(&a, &b); break;
    case MKS_BPF_AND: op_and(&a, &b); break;
    case MKS_BPF_XOR: op_xor(&a, &b); break;
    case MKS_BPF_LSH:
    case MKS_BPF_RSH:
    case MKS_BPF_ARSH:
        if (!x) /* the VM masks constant counts too */
            wv_const(&b, w, (uint64_t)(uint32_t)imm & (w - 1));
        op_shift(op, &a, &b);
        break;
    case MKS_BPF_NEG: {
        struct wv z;
        wv_const(&z, w, 0);
        op_sub(&z, &a);
        a = z;
        break;
    }
    case MKS_BPF_MOV:
        if (x && (off == 8 || off == 16 || off == 32))
            op_movsx(&a, src, (unsigned)off);
        else
            a = b;
        break;
    default:
        wv_full(&a, w);
        break;
    }
    if (w == 64)
        set64(dst, &a);
    else
        set32zext(dst, &a);
    if (!vfs_sync(dst))
        vfs_unknown(dst);
}

/* ---- branches ----------------------------------------------------------- */

/* a <op> b holds; false when it cannot. */
static bool refine(uint8_t op, struct wv *a, struct wv *b)
{
    unsigned w = a->w;
    switch (op) {
    case MKS_BPF_JEQ: {
        struct tn t;
        if (!tn_intersect(wv_tn(a), wv_tn(b), &t))
            return false;
        a->umin = b->umin = umax64(a->umin, b->umin);
        a->umax = b->umax = umin64(a->umax, b->umax);
        a->smin = b->smin = smax64(a->smin, b->smin);
        a->smax = b->smax = smin64(a->smax, b->smax);
        a->tv = b->tv = t.v;
        a->tm = b->tm = t.m;
        break;
    }
    case MKS_BPF_JNE:
        if (a->umin == a->umax && b->umin == b->umax)
            return a->umin != b->umin;
        if (a->umin == a->umax)
            return refine(op, b, a);
        if (b->umin == b->umax) {
            uint64_t c = b->umin;
            int64_t s = sx(w, c);
            if (a->umin == c)
                a->umin++;
            else if (a->umax == c)
                a->umax--;
            if (a->smin == s)
                a->smin++;
            else if (a->smax == s)
                a->smax--;
        }
        break;
    case MKS_BPF_JGT:
        if (a->umax <= b->umin)
            return false;
        a->umin = umax64(a->umin, b->umin + 1);
        b->umax = umin64(b->umax, a->umax - 1);
        break;
    case MKS_BPF_JGE:
        if (a->umax < b->umin)
            return false;
        a->umin = umax64(a->umin, b->umin);
        b->umax = umin64(b->umax, a->umax);
        break;
    case MKS_BPF_JLT: return refine(MKS_BPF_JGT, b, a);
    case MKS_BPF_JLE: return refine(MKS_BPF_JGE, b, a);
    case MKS_BPF_JSGT:
        if (a->smax <= b->smin)
            return false;
        a->smin = smax64(a->smin, b->smin + 1);
        b->smax = smin64(b->smax, a->smax - 1);
        break;
    case MKS_BPF_JSGE:
        if (a->smax < b->smin)
            return false;
        a->smin = smax64(a->smin, b->smin);
        b->smax = smin64(b->smax, a->smax);
        break;
    case MKS_BPF_JSLT: return refine(MKS_BPF_JSGT, b, a);
    case MKS_BPF_JSLE: return refine(MKS_BPF_JSGE, b, a);
    default:
        break;
    }
    return wv_sync(a) && wv_sync(b);
}

/* a & b != 0 (set) or == 0 (!set), narrowed when one side is constant. */
static bool refine_jset(bool set, struct wv *a, struct wv *b)
{
    if (a->umin == a->umax && b->umin != b->umax)
        return refine_jset(set, b, a);
    if (b->umin != b->umax)
        return true;
    uint64_t c = b->umin;
    if (set) {
        if (c == 0 || ((a->tv | a->tm) & c) == 0)
            return false;
        if ((c & (c - 1)) == 0) { /* one bit: it is set */
            a->tv |= c;
            a->tm &= ~c;
        }
    } else {
        if (a->tv & c)
            return false;
        a->tm &= ~c;
    }
    return wv_sync(a);
}

static void put(struct vf_scalar *r, const struct wv *v)
{
    if (v->w == 64) {
        r->umin = v->umin;
        r->umax = v->umax;
        r->smin = v->smin;
        r->smax = v->smax;
        r->tv = v->tv;
        r->tm = v->tm;
    } else {
        r->u32min = (uint32_t)v->umin;
        r->u32max = (uint32_t)v->umax;
        r->s32min = (int32_t)v->smin;
        r->s32max = (int32_t)v->smax;
        r->tv = (r->tv & ~M32) | v->tv;
        r->tm = (r->tm & ~M32) | v->tm;
    }
}

static uint8_t negate(uint8_t op)
{
    switch (op) {
    case MKS_BPF_JEQ: return MKS_BPF_JNE;
    case MKS_BPF_JNE: return MKS_BPF_JEQ;
    case MKS_BPF_JGT: return MKS_BPF_JLE;
    case MKS_BPF_JGE: return MKS_BPF_JLT;
    case MKS_BPF_JLT: return MKS_BPF_JGE;
    case MKS_BPF_JLE: return MKS_BPF_JGT;
    case MKS_BPF_JSGT: return MKS_BPF_JSLE;
    case MKS_BPF_JSGE: return MKS_BPF_JSLT;
    case MKS_BPF_JSLT: return MKS_BPF_JSGE;
    case MKS_BPF_JSLE: return MKS_BPF_JSGT;
    default: return op;
    }
}

bool vfs_branch(uint8_t code, int32_t imm, bool taken, struct vf_scalar *a, struct vf_scalar *b)
{
    uint8_t op = code & 0xf0;
    unsigned w = MKS_BPF_CLASS(code) == MKS_BPF_JMP32 ? 32 : 64;
    bool x = (code & MKS_BPF_X) != 0;
    struct vf_scalar k;
    if (!x) {
        vfs_const(&k, (uint64_t)(int64_t)imm);
        b = &k;
    }
    struct wv va = view(a, w), vb = view(b, w);
    bool ok;
    if (op == MKS_BPF_JSET)
        ok = refine_jset(taken, &va, &vb);
    else
        ok = refine(taken ? op : negate(op), &va, &vb);
    if (!ok)
        return false;
    put(a, &va);
    if (!vfs_sync(a))
        return false;
    if (x) {
        put(b, &vb);
        if (!vfs_sync(b))
            return false;
    }
    return true;
}
