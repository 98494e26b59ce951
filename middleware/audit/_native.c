/* The audit log's per-record work in C, with the GIL released (see docs/audit-log.md).
 *
 * Byte-identical to the pure-Python code in segment.py and merkle.py, which stays the
 * reference (and the fallback: middleware/audit/native.py picks one). Every function
 * gathers its inputs (buffers, lengths) while holding the GIL, does the per-record work for
 * the whole batch between Py_BEGIN_ALLOW_THREADS and Py_END_ALLOW_THREADS, and builds its
 * Python results afterwards.
 *
 * Frame layout (little-endian, each frame padded to 8 bytes):
 *    0 u32 magic  4 u32 length L  8 u32 CRC-32C of [12, 72+L)  12 u8 type  13 u8 version
 *   14 u16 0  16 u64 index  24 u64 synced  32 u64 time_ns  40 32B prev chain  72 payload
 * leaf  = SHA-256(0x00 || payload)
 * chain = SHA-256(type || index(u64 LE) || prev || leaf)
 * node  = SHA-256(0x01 || left || right)
 *
 * SHA-256 comes from OpenSSL's libcrypto (the same library Python's hashlib uses; SHA-NI
 * where the CPU has it). CRC-32C uses SSE4.2's crc32 instruction when the CPU has it
 * (checked at import), else a slicing-by-8 table.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

#include <openssl/sha.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <nmmintrin.h>
#define AUDIT_X86 1
#else
#define AUDIT_X86 0
#endif

#define MAGIC 0x31445541u
#define HEADER_SIZE 72
#define EVENT 2
#define COMMIT 5
#define COMMIT_SIZE 68 /* u32 count, 64-byte Ed25519 signature */
#define MAX_BATCH (1u << 24)
#define VERSION 2
#define MAX_PAYLOAD (4u << 20)

/* ------------------------------------------------------------------ little-endian helpers */

static inline void put32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16);
    p[3] = (unsigned char)(v >> 24);
}

static inline void put64(unsigned char *p, uint64_t v) {
    put32(p, (uint32_t)v);
    put32(p + 4, (uint32_t)(v >> 32));
}

static inline uint32_t get32(const unsigned char *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static inline uint64_t get64(const unsigned char *p) {
    return (uint64_t)get32(p) | ((uint64_t)get32(p + 4) << 32);
}

/* ------------------------------------------------------------------ CRC-32C */

static uint32_t crc_table[8][256];
static int crc_hw; /* the CPU has SSE4.2 */

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = crc_table[0][i];
        for (int t = 1; t < 8; t++) {
            c = crc_table[0][c & 0xff] ^ (c >> 8);
            crc_table[t][i] = c;
        }
    }
#if AUDIT_X86
    __builtin_cpu_init();
    crc_hw = __builtin_cpu_supports("sse4.2") != 0;
#else
    crc_hw = 0;
#endif
}

/* crc: the running register (already inverted). */
static uint32_t crc_sw(uint32_t crc, const unsigned char *p, size_t n) {
    while (n >= 8) {
        uint32_t lo = get32(p) ^ crc, hi = get32(p + 4);
        crc = crc_table[7][lo & 0xff] ^ crc_table[6][(lo >> 8) & 0xff] ^ crc_table[5][(lo >> 16) & 0xff] ^
              crc_table[4][lo >> 24] ^ crc_table[3][hi & 0xff] ^ crc_table[2][(hi >> 8) & 0xff] ^
              crc_table[1][(hi >> 16) & 0xff] ^ crc_table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--)
        crc = crc_table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return crc;
}

#if AUDIT_X86
__attribute__((target("sse4.2"))) static uint32_t crc_sse42(uint32_t crc, const unsigned char *p, size_t n) {
    uint64_t c = crc;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = _mm_crc32_u64(c, w);
        p += 8;
        n -= 8;
    }
    crc = (uint32_t)c;
    while (n--)
        crc = _mm_crc32_u8(crc, *p++);
    return crc;
}
#endif

static inline uint32_t crc_update(uint32_t crc, const unsigned char *p, size_t n) {
#if AUDIT_X86
    if (crc_hw)
        return crc_sse42(crc, p, n);
#endif
    return crc_sw(crc, p, n);
}

/* CRC-32C of p[0:n], continuing from ``value`` (the CRC so far, as the crc32c package takes it). */
static inline uint32_t crc32c(uint32_t value, const unsigned char *p, size_t n) {
    return ~crc_update(~value, p, n);
}

/* ------------------------------------------------------------------ SHA-256 */

/* One SHA-256 through the low-level calls: OpenSSL 3's one-shot SHA256() goes through EVP
 * and looks the algorithm up on every call (several times slower on short inputs). */
static inline void sha256(const unsigned char *data, size_t n, unsigned char out[32]) {
    SHA256_CTX ctx;
    SHA256_Init(&ctx);
    SHA256_Update(&ctx, data, n);
    SHA256_Final(out, &ctx);
}

static inline void leaf_hash(const unsigned char *payload, size_t n, unsigned char out[32]) {
    static const unsigned char zero = 0;
    SHA256_CTX ctx;
    SHA256_Init(&ctx);
    SHA256_Update(&ctx, &zero, 1);
    SHA256_Update(&ctx, payload, n);
    SHA256_Final(out, &ctx);
}

static inline void chain_hash(int typ, uint64_t index, const unsigned char prev[32], const unsigned char leaf[32],
                              unsigned char out[32]) {
    unsigned char buf[73];
    buf[0] = (unsigned char)typ;
    put64(buf + 1, index);
    memcpy(buf + 9, prev, 32);
    memcpy(buf + 41, leaf, 32);
    sha256(buf, sizeof buf, out);
}

/* ------------------------------------------------------------------ gathering inputs */

typedef struct {
    Py_ssize_t n;
    Py_buffer *views;
} Payloads;

static void payloads_release(Payloads *p) {
    if (p->views != NULL) {
        for (Py_ssize_t i = 0; i < p->n; i++)
            PyBuffer_Release(&p->views[i]);
        PyMem_Free(p->views);
    }
    p->views = NULL;
    p->n = 0;
}

/* Hold a buffer of every item of ``seq`` (a list of bytes); 0 on success. */
static int payloads_gather(PyObject *seq, Payloads *out) {
    out->n = 0;
    out->views = NULL;
    PyObject *fast = PySequence_Fast(seq, "payloads must be a sequence of bytes");
    if (fast == NULL)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    out->views = PyMem_Calloc(n ? (size_t)n : 1, sizeof(Py_buffer));
    if (out->views == NULL) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return -1;
    }
    PyObject **items = PySequence_Fast_ITEMS(fast);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (PyObject_GetBuffer(items[i], &out->views[i], PyBUF_SIMPLE) < 0) {
            payloads_release(out);
            Py_DECREF(fast);
            return -1;
        }
        out->n = i + 1;
        if ((size_t)out->views[i].len > 0xffffffffu) {
            payloads_release(out);
            Py_DECREF(fast);
            PyErr_SetString(PyExc_ValueError, "payload larger than a frame can hold");
            return -1;
        }
    }
    /* the buffers keep their objects alive; the sequence may go */
    Py_DECREF(fast);
    return 0;
}

static int get_hash32(PyObject *obj, unsigned char out[32], const char *what) {
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE) < 0)
        return -1;
    if (view.len != 32) {
        PyBuffer_Release(&view);
        PyErr_Format(PyExc_ValueError, "%s must be 32 bytes", what);
        return -1;
    }
    memcpy(out, view.buf, 32);
    PyBuffer_Release(&view);
    return 0;
}

/* ------------------------------------------------------------------ crc32c(data, value=0) */

static PyObject *py_crc32c(PyObject *self, PyObject *args) {
    Py_buffer view;
    unsigned int value = 0;
    if (!PyArg_ParseTuple(args, "y*|I:crc32c", &view, &value))
        return NULL;
    uint32_t crc;
    Py_BEGIN_ALLOW_THREADS
    crc = crc32c(value, view.buf, (size_t)view.len);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(crc);
}

/* The table fallback alone (tests check it gives the same values as the instruction). */
static PyObject *py_crc32c_table(PyObject *self, PyObject *args) {
    Py_buffer view;
    unsigned int value = 0;
    if (!PyArg_ParseTuple(args, "y*|I:crc32c_table", &view, &value))
        return NULL;
    uint32_t crc = ~crc_sw(~(uint32_t)value, view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(crc);
}

/* ------------------------------------------------------------------ leaf_hashes(payloads) */

static PyObject *py_leaf_hashes(PyObject *self, PyObject *arg) {
    Payloads p;
    if (payloads_gather(arg, &p) < 0)
        return NULL;
    PyObject *leaves = PyBytes_FromStringAndSize(NULL, 32 * p.n);
    PyObject *digest = PyBytes_FromStringAndSize(NULL, 32);
    if (leaves == NULL || digest == NULL) {
        Py_XDECREF(leaves);
        Py_XDECREF(digest);
        payloads_release(&p);
        return NULL;
    }
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(leaves);
    unsigned char *dig = (unsigned char *)PyBytes_AS_STRING(digest);
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < p.n; i++)
        leaf_hash(p.views[i].buf, (size_t)p.views[i].len, out + 32 * i);
    sha256(out, (size_t)(32 * p.n), dig);
    Py_END_ALLOW_THREADS
    payloads_release(&p);
    return Py_BuildValue("(NN)", leaves, digest);
}

/* ------------------------------------------------------------------ encode_events(...) */

static PyObject *py_encode_events(PyObject *self, PyObject *args) {
    unsigned long long first_index, synced, time_ns;
    PyObject *prev_obj, *payload_seq, *given = Py_None;
    int version = VERSION;
    if (!PyArg_ParseTuple(args, "KKKOO|Oi:encode_events", &first_index, &synced, &time_ns, &prev_obj, &payload_seq,
                          &given, &version))
        return NULL;
    if (version < 0 || version > 255) {
        PyErr_SetString(PyExc_ValueError, "version must be 0..255");
        return NULL;
    }
    unsigned char prev[32];
    if (get_hash32(prev_obj, prev, "prev") < 0)
        return NULL;
    Payloads p;
    if (payloads_gather(payload_seq, &p) < 0)
        return NULL;
    Py_buffer given_view = {0};
    int have_given = given != Py_None;
    if (have_given) {
        if (PyObject_GetBuffer(given, &given_view, PyBUF_SIMPLE) < 0) {
            payloads_release(&p);
            return NULL;
        }
        if (given_view.len != 32 * p.n) {
            PyBuffer_Release(&given_view);
            payloads_release(&p);
            PyErr_SetString(PyExc_ValueError, "leaves must be 32 bytes per payload");
            return NULL;
        }
    }
    size_t total = 0;
    for (Py_ssize_t i = 0; i < p.n; i++) {
        size_t framed = HEADER_SIZE + (size_t)p.views[i].len;
        total += framed + (-framed & 7);
    }
    PyObject *frames = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
    PyObject *leaves = PyBytes_FromStringAndSize(NULL, 32 * p.n);
    PyObject *chain = PyBytes_FromStringAndSize(NULL, 32);
    if (frames == NULL || leaves == NULL || chain == NULL) {
        Py_XDECREF(frames);
        Py_XDECREF(leaves);
        Py_XDECREF(chain);
        if (have_given)
            PyBuffer_Release(&given_view);
        payloads_release(&p);
        return NULL;
    }
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(frames);
    unsigned char *lv = (unsigned char *)PyBytes_AS_STRING(leaves);
    unsigned char *ch = (unsigned char *)PyBytes_AS_STRING(chain);
    const unsigned char *gv = have_given ? given_view.buf : NULL;
    Py_BEGIN_ALLOW_THREADS
    unsigned char cur[32];
    memcpy(cur, prev, 32);
    uint64_t index = first_index;
    for (Py_ssize_t i = 0; i < p.n; i++, index++) {
        const unsigned char *pay = p.views[i].buf;
        size_t len = (size_t)p.views[i].len;
        size_t framed = HEADER_SIZE + len, pad = -framed & 7;
        put32(out, MAGIC);
        put32(out + 4, (uint32_t)len);
        out[12] = EVENT;
        out[13] = (unsigned char)version;
        out[14] = out[15] = 0;
        put64(out + 16, index);
        put64(out + 24, synced);
        put64(out + 32, time_ns);
        memcpy(out + 40, cur, 32);
        memcpy(out + HEADER_SIZE, pay, len);
        memset(out + framed, 0, pad);
        put32(out + 8, crc32c(0, out + 12, framed - 12));
        unsigned char *leaf = lv + 32 * i;
        if (gv != NULL)
            memcpy(leaf, gv + 32 * i, 32);
        else
            leaf_hash(pay, len, leaf);
        chain_hash(EVENT, index, cur, leaf, cur);
        out += framed + pad;
    }
    memcpy(ch, cur, 32);
    Py_END_ALLOW_THREADS
    if (have_given) PyBuffer_Release(&given_view);
    payloads_release(&p);
    return Py_BuildValue("(NNN)", frames, leaves, chain);
}

/* ------------------------------------------------------------------ reduce(hashes, levels) */

/* Hash packed hashes up ``levels`` levels: each level hashes 0x01 || the next 64 bytes (a last
 * chunk of 32 bytes is hashed as it is, as merkle._reduce does). */
static size_t reduce_in_place(unsigned char *buf, size_t len, int levels) {
    unsigned char node[65];
    node[0] = 1;
    for (int l = 0; l < levels && len > 0; l++) {
        size_t o = 0;
        for (size_t i = 0; i < len; i += 64, o += 32) {
            size_t chunk = len - i < 64 ? len - i : 64;
            memcpy(node + 1, buf + i, chunk);
            sha256(node, 1 + chunk, buf + o);
        }
        len = o;
    }
    return len;
}

static PyObject *py_reduce(PyObject *self, PyObject *args) {
    Py_buffer view;
    int levels;
    if (!PyArg_ParseTuple(args, "y*i:reduce", &view, &levels))
        return NULL;
    if (levels <= 0) {
        PyObject *same = PyBytes_FromStringAndSize(view.buf, view.len);
        PyBuffer_Release(&view);
        return same;
    }
    size_t len = (size_t)view.len;
    unsigned char *work = PyMem_Malloc(len ? len : 1);
    if (work == NULL) {
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    memcpy(work, view.buf, len);
    Py_BEGIN_ALLOW_THREADS
    len = reduce_in_place(work, len, levels);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    PyObject *out = PyBytes_FromStringAndSize((const char *)work, (Py_ssize_t)len);
    PyMem_Free(work);
    return out;
}

/* ------------------------------------------------------------------ the record check's fast path */

/* Whether ``p[0:n]`` is certainly an AuditRecord that pydantic validates (record.py): the
 * canonical form the log writes -- every field, keys sorted, no spaces -- with each value of
 * the right type and within its limits. 0 means "not vouched for", never "invalid": the
 * caller then validates the record with pydantic exactly as before (and names what is wrong).
 * So this only has to be sound (what it accepts, pydantic accepts), and it is strict: valid
 * UTF-8, no escaped surrogates, numbers of modest size, nesting at most 64 deep, the time as
 * YYYY-MM-DDTHH:MM:SS[.ffffff]Z with a real date. */

typedef struct {
    const unsigned char *p, *end;
} Cur;

static inline int hexval(unsigned char c) {
    if (c >= '0' && c <= '9')
        return c - '0';
    c |= 0x20;
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* A JSON string at c->p; its length in code points in *len. */
static int rec_string(Cur *c, size_t *len) {
    const unsigned char *p = c->p, *end = c->end;
    size_t count = 0;
    if (p >= end || *p != '"')
        return 0;
    p++;
    while (p < end) {
        unsigned char b = *p;
        if (b == '"') {
            c->p = p + 1;
            *len = count;
            return 1;
        }
        if (b < 0x20)
            return 0;
        if (b == '\\') {
            if (end - p < 2)
                return 0;
            unsigned char e = p[1];
            if (e == 'u') {
                if (end - p < 6)
                    return 0;
                int v = 0;
                for (int k = 2; k < 6; k++) {
                    int h = hexval(p[k]);
                    if (h < 0)
                        return 0;
                    v = v * 16 + h;
                }
                if (v >= 0xD800 && v <= 0xDFFF)
                    return 0; /* surrogates: left to pydantic */
                p += 6;
            } else if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' || e == 'r' ||
                       e == 't') {
                p += 2;
            } else
                return 0;
        } else if (b < 0x80) {
            p++;
        } else {
            size_t k;
            unsigned char lo = 0x80, hi = 0xBF;
            if (b >= 0xC2 && b <= 0xDF)
                k = 1;
            else if (b >= 0xE0 && b <= 0xEF) {
                k = 2;
                if (b == 0xE0)
                    lo = 0xA0;
                else if (b == 0xED)
                    hi = 0x9F;
            } else if (b >= 0xF0 && b <= 0xF4) {
                k = 3;
                if (b == 0xF0)
                    lo = 0x90;
                else if (b == 0xF4)
                    hi = 0x8F;
            } else
                return 0;
            if ((size_t)(end - p) <= k || p[1] < lo || p[1] > hi)
                return 0;
            for (size_t j = 2; j <= k; j++)
                if (p[j] < 0x80 || p[j] > 0xBF)
                    return 0;
            p += k + 1;
        }
        count++;
    }
    return 0;
}

static inline int rec_digits(Cur *c, size_t max) {
    size_t n = 0;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
        c->p++;
        if (++n > max)
            return 0;
    }
    return n > 0;
}

/* A JSON number: at most 18 integer digits, 30 fraction digits, a two-digit exponent. */
static int rec_number(Cur *c, int integer_only) {
    if (c->p < c->end && *c->p == '-')
        c->p++;
    if (c->p >= c->end)
        return 0;
    if (*c->p == '0') {
        c->p++;
        if (c->p < c->end && *c->p >= '0' && *c->p <= '9')
            return 0;
    } else if (!rec_digits(c, 18))
        return 0;
    if (integer_only)
        return 1;
    if (c->p < c->end && *c->p == '.') {
        c->p++;
        if (!rec_digits(c, 30))
            return 0;
    }
    if (c->p < c->end && (*c->p == 'e' || *c->p == 'E')) {
        c->p++;
        if (c->p < c->end && (*c->p == '+' || *c->p == '-'))
            c->p++;
        if (!rec_digits(c, 2))
            return 0;
    }
    return 1;
}

static int rec_value(Cur *c, int depth);

static int rec_object(Cur *c, int depth) {
    size_t len;
    if (depth > 64 || c->p >= c->end || *c->p != '{')
        return 0;
    c->p++;
    if (c->p < c->end && *c->p == '}') {
        c->p++;
        return 1;
    }
    for (;;) {
        if (!rec_string(c, &len) || c->p >= c->end || *c->p != ':')
            return 0;
        c->p++;
        if (!rec_value(c, depth + 1) || c->p >= c->end)
            return 0;
        if (*c->p == '}') {
            c->p++;
            return 1;
        }
        if (*c->p != ',')
            return 0;
        c->p++;
    }
}

static int rec_array(Cur *c, int depth) {
    if (depth > 64 || c->p >= c->end || *c->p != '[')
        return 0;
    c->p++;
    if (c->p < c->end && *c->p == ']') {
        c->p++;
        return 1;
    }
    for (;;) {
        if (!rec_value(c, depth + 1) || c->p >= c->end)
            return 0;
        if (*c->p == ']') {
            c->p++;
            return 1;
        }
        if (*c->p != ',')
            return 0;
        c->p++;
    }
}

static int rec_literal(Cur *c, const char *word, size_t n) {
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, word, n) != 0)
        return 0;
    c->p += n;
    return 1;
}

static int rec_value(Cur *c, int depth) {
    size_t len;
    if (c->p >= c->end)
        return 0;
    switch (*c->p) {
    case '{':
        return rec_object(c, depth);
    case '[':
        return rec_array(c, depth);
    case '"':
        return rec_string(c, &len);
    case 't':
        return rec_literal(c, "true", 4);
    case 'f':
        return rec_literal(c, "false", 5);
    case 'n':
        return rec_literal(c, "null", 4);
    default:
        return rec_number(c, 0);
    }
}

/* "name": exactly these bytes, then a colon. */
static int rec_key(Cur *c, const char *quoted_colon) {
    return rec_literal(c, quoted_colon, strlen(quoted_colon));
}

static int rec_str_field(Cur *c, const char *key, size_t min, size_t max) {
    size_t len;
    return rec_key(c, key) && rec_string(c, &len) && len >= min && len <= max;
}

static inline int two(const unsigned char *p) {
    return (p[0] >= '0' && p[0] <= '9' && p[1] >= '0' && p[1] <= '9') ? (p[0] - '0') * 10 + (p[1] - '0') : -1;
}

/* "YYYY-MM-DDTHH:MM:SS[.f{1,6}]Z", a real date of the years 1000..9999. */
static int rec_time(Cur *c) {
    const unsigned char *p = c->p;
    size_t n = (size_t)(c->end - p);
    if (n < 22 || p[0] != '"' || p[5] != '-' || p[8] != '-' || p[11] != 'T' || p[14] != ':' || p[17] != ':')
        return 0;
    int y1 = two(p + 1), y2 = two(p + 3), mo = two(p + 6), d = two(p + 9), h = two(p + 12), mi = two(p + 15),
        s = two(p + 18);
    if (y1 < 10 || y2 < 0 || mo < 1 || mo > 12 || d < 1 || h < 0 || h > 23 || mi < 0 || mi > 59 || s < 0 || s > 59)
        return 0;
    int year = y1 * 100 + y2;
    static const int days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    int leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    if (d > days[mo - 1] + (mo == 2 && leap))
        return 0;
    size_t i = 20;
    if (i < n && p[i] == '.') {
        size_t k = 0;
        i++;
        while (i < n && p[i] >= '0' && p[i] <= '9' && k < 7) {
            i++;
            k++;
        }
        if (k < 1 || k > 6)
            return 0;
    }
    if (n < i + 2 || p[i] != 'Z' || p[i + 1] != '"')
        return 0;
    c->p = p + i + 2;
    return 1;
}

static int record_ok(const unsigned char *p, size_t n) {
    Cur c = {p, p + n};
    size_t len;
    if (!rec_key(&c, "{\"actors\":{\"agent\":") || !rec_string(&c, &len) || !rec_key(&c, ",\"session\":") ||
        !rec_string(&c, &len))
        return 0;
    if (rec_key(&c, ",\"tenant\":") && !rec_string(&c, &len))
        return 0;
    if (!rec_key(&c, ",\"user\":") || !rec_string(&c, &len) || !rec_literal(&c, "}", 1))
        return 0;
    if (!rec_str_field(&c, ",\"component\":", 0, 64) || !rec_key(&c, ",\"detail\":") || !rec_object(&c, 1))
        return 0;
    if (!rec_str_field(&c, ",\"event_id\":", 0, SIZE_MAX) || !rec_str_field(&c, ",\"event_type\":", 1, 64) ||
        !rec_str_field(&c, ",\"goal_id\":", 0, SIZE_MAX) || !rec_str_field(&c, ",\"node\":", 0, 128) ||
        !rec_str_field(&c, ",\"outcome\":", 0, SIZE_MAX) || !rec_str_field(&c, ",\"rule\":", 0, SIZE_MAX))
        return 0;
    if (!rec_key(&c, ",\"schema_version\":") || !rec_number(&c, 1))
        return 0;
    if (!rec_str_field(&c, ",\"task_id\":", 0, SIZE_MAX) || !rec_key(&c, ",\"time\":") || !rec_time(&c) ||
        !rec_str_field(&c, ",\"trace_id\":", 0, SIZE_MAX))
        return 0;
    return rec_literal(&c, "}", 1) && c.p == c.end;
}

static PyObject *py_record_ok(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    int ok = record_ok(view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyBool_FromLong(ok);
}

/* ------------------------------------------------------------------ scan_events(...) */

typedef struct {
    int typ;
    uint64_t index, ts;
    size_t off, end;
    int unsure; /* its record not vouched for by record_ok */
} Seen;

/* The frame at off is readable and continues ``chain``: the checks segment.check makes first
 * (magic, length, CRC-32C, padding inside the buffer, chain). */
static inline int frame_ok(const unsigned char *buf, size_t size, size_t off, const unsigned char chain[32],
                           uint32_t *length, size_t *end, size_t *nxt) {
    if (off >= size || size - off < HEADER_SIZE)
        return 0;
    const unsigned char *h = buf + off;
    uint32_t len = get32(h + 4);
    if (get32(h) != MAGIC || len > MAX_PAYLOAD)
        return 0;
    size_t e = off + HEADER_SIZE + len, x = e + (-e & 7);
    if (x > size || crc32c(0, h + 12, e - off - 12) != get32(h + 8) || memcmp(h + 40, chain, 32) != 0)
        return 0;
    *length = len;
    *end = e;
    *nxt = x;
    return 1;
}

static PyObject *seen_list(const Seen *seen, size_t n, int only_unsure) {
    PyObject *list = PyList_New(0);
    for (size_t i = 0; list != NULL && i < n; i++) {
        if (only_unsure && !seen[i].unsure)
            continue;
        PyObject *t = Py_BuildValue("(iKKnn)", seen[i].typ, (unsigned long long)seen[i].index,
                                    (unsigned long long)seen[i].ts, (Py_ssize_t)seen[i].off, (Py_ssize_t)seen[i].end);
        if (t == NULL || PyList_Append(list, t) < 0) {
            Py_XDECREF(t);
            Py_CLEAR(list);
        } else
            Py_DECREF(t);
    }
    return list;
}

/* Check consecutive event frames of an open batch from ``off``: the frames every check of
 * segment.check passes (framing, CRC, chain, version 2, type event, index count+1 up to
 * batch_last). Stops before the first frame that is anything else (segment.check then reads
 * that frame itself and says what is wrong with it, in its words) or once count reaches
 * batch_last. Returns (offset after the last frame taken, chain, count, their leaf hashes
 * packed, time of the last one or None, [(type, index, time, offset, payload end)] or None,
 * and with ``records`` the same tuples of the frames whose record ``record_ok`` does not
 * vouch for -- for the caller to check with pydantic -- or None).
 */
static PyObject *py_scan_events(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t start;
    PyObject *chain_obj;
    unsigned long long count, batch_last;
    int want_frames, records;
    if (!PyArg_ParseTuple(args, "y*nOKKpp:scan_events", &view, &start, &chain_obj, &count, &batch_last,
                          &want_frames, &records))
        return NULL;
    unsigned char chain[32];
    if (get_hash32(chain_obj, chain, "chain") < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    size_t size = (size_t)view.len, off = start < 0 ? size : (size_t)start;
    uint64_t room = batch_last > count ? batch_last - count : 0;
    /* at most one frame per 72 bytes: bound the outputs before starting */
    size_t cap = size > off ? (size - off) / HEADER_SIZE : 0;
    if (room < cap)
        cap = (size_t)room;
    unsigned char *leaves = PyMem_Malloc(cap ? 32 * cap : 1);
    Seen *seen = PyMem_Malloc(cap ? sizeof(Seen) * cap : 1);
    if (leaves == NULL || seen == NULL) {
        PyMem_Free(leaves);
        PyMem_Free(seen);
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    const unsigned char *buf = view.buf;
    size_t taken = 0;
    Py_BEGIN_ALLOW_THREADS
    uint32_t length;
    size_t end, nxt;
    while (taken < cap && frame_ok(buf, size, off, chain, &length, &end, &nxt)) {
        const unsigned char *h = buf + off;
        if (h[13] != VERSION || h[12] != EVENT)
            break;
        uint64_t index = get64(h + 16);
        if (index != count + 1)
            break;
        unsigned char *leaf = leaves + 32 * taken;
        leaf_hash(h + HEADER_SIZE, length, leaf);
        chain_hash(EVENT, index, chain, leaf, chain);
        seen[taken].typ = EVENT;
        seen[taken].index = index;
        seen[taken].ts = get64(h + 32);
        seen[taken].off = off;
        seen[taken].end = end;
        seen[taken].unsure = records && !record_ok(h + HEADER_SIZE, length);
        taken++;
        count = index;
        off = nxt;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    PyObject *frames = Py_None, *last_ts = Py_None, *unsure = Py_None;
    Py_INCREF(frames);
    Py_INCREF(last_ts);
    Py_INCREF(unsure);
    if (records) {
        Py_DECREF(unsure);
        unsure = seen_list(seen, taken, 1);
    }
    if (taken) {
        Py_DECREF(last_ts);
        last_ts = PyLong_FromUnsignedLongLong(seen[taken - 1].ts);
    }
    if (want_frames) {
        Py_DECREF(frames);
        frames = seen_list(seen, taken, 0);
    }
    PyObject *result = NULL;
    if (frames != NULL && last_ts != NULL && unsure != NULL)
        result = Py_BuildValue("(ny#Ky#NNN)", (Py_ssize_t)off, chain, (Py_ssize_t)32, (unsigned long long)count,
                               leaves, (Py_ssize_t)(32 * taken), last_ts, frames, unsure);
    else {
        Py_XDECREF(frames);
        Py_XDECREF(last_ts);
        Py_XDECREF(unsure);
    }
    PyMem_Free(leaves);
    PyMem_Free(seen);
    return result;
}

/* ------------------------------------------------------------------ scan_batches(...) */

typedef struct {
    uint64_t last, first, n;
    size_t off;
    unsigned char prev[32], digest[32], sig[64];
} Batch;

/* Check whole batches from ``off`` (no batch open): a commit frame passing every check of
 * segment.check (framing, CRC, chain, version 2, its payload, index == count, 0 < n <= MAX_BATCH),
 * then the n event frames it announces, as scan_events checks them. Only whole batches whose
 * records (with ``records``) record_ok vouches for are taken: at the first frame that is
 * anything else -- another frame type, a broken frame, a batch cut short, a record for pydantic
 * -- it stops at the start of that batch, and segment.check reads on from there itself.
 * Returns (offset, chain, count, packed leaf hashes, time of the last frame or None, frames or
 * None, [(last index, first index, count, prev chain, digest of the leaf hashes, signature,
 * commit frame offset)]).
 */
static PyObject *py_scan_batches(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t start;
    PyObject *chain_obj;
    unsigned long long count;
    int want_frames, records;
    if (!PyArg_ParseTuple(args, "y*nOKpp:scan_batches", &view, &start, &chain_obj, &count, &want_frames, &records))
        return NULL;
    unsigned char chain[32];
    if (get_hash32(chain_obj, chain, "chain") < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    size_t size = (size_t)view.len, off = start < 0 ? size : (size_t)start;
    size_t cap = size > off ? (size - off) / HEADER_SIZE : 0; /* frames that can fit */
    unsigned char *leaves = PyMem_Malloc(cap ? 32 * cap : 1);
    Seen *seen = PyMem_Malloc(cap ? sizeof(Seen) * cap : 1);
    Batch *batches = PyMem_Malloc(cap ? sizeof(Batch) * (cap / 2 + 1) : 1);
    if (leaves == NULL || seen == NULL || batches == NULL) {
        PyMem_Free(leaves);
        PyMem_Free(seen);
        PyMem_Free(batches);
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    const unsigned char *buf = view.buf;
    /* what is taken: whole batches only */
    size_t g_off = off, g_frames = 0, g_leaves = 0, g_batches = 0;
    uint64_t g_count = count, g_ts = 0;
    unsigned char g_chain[32];
    memcpy(g_chain, chain, 32);
    Py_BEGIN_ALLOW_THREADS
    size_t nframes = 0, nleaves = 0;
    uint32_t length;
    size_t end, nxt;
    for (;;) {
        if (!frame_ok(buf, size, off, chain, &length, &end, &nxt))
            break;
        const unsigned char *h = buf + off;
        if (h[13] != VERSION || h[12] != COMMIT || length != COMMIT_SIZE || get64(h + 16) != count)
            break;
        uint32_t n = get32(h + HEADER_SIZE);
        if (n == 0 || n > MAX_BATCH || nframes + 1 + n > cap)
            break;
        Batch *b = &batches[g_batches];
        b->first = count + 1;
        b->n = n;
        b->last = count + n;
        b->off = off;
        memcpy(b->prev, chain, 32);
        memcpy(b->sig, h + HEADER_SIZE + 4, 64);
        unsigned char leaf[32];
        leaf_hash(h + HEADER_SIZE, length, leaf);
        chain_hash(COMMIT, count, chain, leaf, chain);
        seen[nframes++] = (Seen){COMMIT, count, get64(h + 32), off, end, 0};
        off = nxt;
        size_t first_leaf = nleaves;
        int whole = 1;
        while (count < b->last) {
            if (!frame_ok(buf, size, off, chain, &length, &end, &nxt)) {
                whole = 0;
                break;
            }
            h = buf + off;
            uint64_t index = get64(h + 16);
            if (h[13] != VERSION || h[12] != EVENT || index != count + 1 ||
                (records && !record_ok(h + HEADER_SIZE, length))) {
                whole = 0;
                break;
            }
            unsigned char *lf = leaves + 32 * nleaves++;
            leaf_hash(h + HEADER_SIZE, length, lf);
            chain_hash(EVENT, index, chain, lf, chain);
            seen[nframes++] = (Seen){EVENT, index, get64(h + 32), off, end, 0};
            count = index;
            off = nxt;
        }
        if (!whole)
            break;
        sha256(leaves + 32 * first_leaf, 32 * (size_t)n, b->digest);
        g_batches++;
        g_off = off;
        g_frames = nframes;
        g_leaves = nleaves;
        g_count = count;
        g_ts = seen[nframes - 1].ts;
        memcpy(g_chain, chain, 32);
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    PyObject *frames = NULL, *last_ts = NULL, *done = NULL, *result = NULL;
    frames = want_frames ? seen_list(seen, g_frames, 0) : Py_NewRef(Py_None);
    last_ts = g_batches ? PyLong_FromUnsignedLongLong(g_ts) : Py_NewRef(Py_None);
    done = PyList_New((Py_ssize_t)g_batches);
    for (size_t i = 0; done != NULL && i < g_batches; i++) {
        const Batch *b = &batches[i];
        PyObject *t = Py_BuildValue("(KKKy#y#y#n)", (unsigned long long)b->last, (unsigned long long)b->first,
                                    (unsigned long long)b->n, b->prev, (Py_ssize_t)32, b->digest, (Py_ssize_t)32,
                                    b->sig, (Py_ssize_t)64, (Py_ssize_t)b->off);
        if (t == NULL)
            Py_CLEAR(done);
        else
            PyList_SET_ITEM(done, (Py_ssize_t)i, t);
    }
    if (frames != NULL && last_ts != NULL && done != NULL) {
        result = Py_BuildValue("(ny#Ky#NNN)", (Py_ssize_t)g_off, g_chain, (Py_ssize_t)32, (unsigned long long)g_count,
                               leaves, (Py_ssize_t)(32 * g_leaves), last_ts, frames, done);
    } else {
        Py_XDECREF(frames);
        Py_XDECREF(last_ts);
        Py_XDECREF(done);
    }
    PyMem_Free(leaves);
    PyMem_Free(seen);
    PyMem_Free(batches);
    return result;
}

/* ------------------------------------------------------------------ module */

static PyMethodDef methods[] = {
    {"crc32c", py_crc32c, METH_VARARGS, "crc32c(data, value=0) -> int: CRC-32C, continuing from value."},
    {"crc32c_table", py_crc32c_table, METH_VARARGS, "crc32c with the table (no CPU instruction), for tests."},
    {"leaf_hashes", py_leaf_hashes, METH_O, "leaf_hashes(payloads) -> (packed leaf hashes, SHA-256 of them)."},
    {"encode_events", py_encode_events, METH_VARARGS,
     "encode_events(first_index, synced, time_ns, prev, payloads, leaves=None, version=2)"
     " -> (frames, packed leaf hashes, chain)."},
    {"reduce", py_reduce, METH_VARARGS, "reduce(hashes, levels) -> the hashes levels levels up (RFC 6962 nodes)."},
    {"scan_events", py_scan_events, METH_VARARGS,
     "scan_events(buf, off, chain, count, batch_last, want_frames, records)"
     " -> (off, chain, count, packed leaves, last time or None, frames or None, unsure records or None)."},
    {"scan_batches", py_scan_batches, METH_VARARGS,
     "scan_batches(buf, off, chain, count, want_frames, records)"
     " -> (off, chain, count, packed leaves, last time or None, frames or None, batches)."},
    {"record_ok", py_record_ok, METH_O,
     "record_ok(payload) -> bool: certainly a valid AuditRecord (False: not vouched for; ask pydantic)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_native", "The audit log's per-record work in C (see native.py).", -1, methods,
};

PyMODINIT_FUNC PyInit__native(void) {
    crc_init();
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddIntConstant(m, "HARDWARE_CRC", crc_hw) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
