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

/* ------------------------------------------------------------------ scan_events(...) */

typedef struct {
    uint64_t index, ts;
    size_t off, end;
} Seen;

/* Check consecutive event frames of an open batch from ``off``: the frames every check of
 * segment.check passes (framing, CRC, chain, version 2, type event, index count+1 up to
 * batch_last). Stops before the first frame that is anything else (segment.check then reads
 * that frame itself and says what is wrong with it, in its words) or once count reaches
 * batch_last. Returns (offset after the last frame taken, chain, count, their leaf hashes
 * packed, time of the last one or None, [(type, index, time, offset, payload end)] or None).
 */
static PyObject *py_scan_events(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t start;
    PyObject *chain_obj;
    unsigned long long count, batch_last;
    int want_frames;
    if (!PyArg_ParseTuple(args, "y*nOKKp:scan_events", &view, &start, &chain_obj, &count, &batch_last,
                          &want_frames))
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
    while (taken < cap && off < size && size - off >= HEADER_SIZE) {
        const unsigned char *h = buf + off;
        uint32_t length = get32(h + 4);
        if (get32(h) != MAGIC || length > MAX_PAYLOAD)
            break;
        size_t end = off + HEADER_SIZE + length, nxt = end + (-end & 7);
        if (nxt > size)
            break;
        if (crc32c(0, h + 12, end - off - 12) != get32(h + 8))
            break;
        if (memcmp(h + 40, chain, 32) != 0 || h[13] != VERSION || h[12] != EVENT)
            break;
        uint64_t index = get64(h + 16);
        if (index != count + 1)
            break;
        unsigned char *leaf = leaves + 32 * taken;
        leaf_hash(h + HEADER_SIZE, length, leaf);
        chain_hash(EVENT, index, chain, leaf, chain);
        seen[taken].index = index;
        seen[taken].ts = get64(h + 32);
        seen[taken].off = off;
        seen[taken].end = end;
        taken++;
        count = index;
        off = nxt;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    PyObject *frames = Py_None, *last_ts = Py_None;
    Py_INCREF(frames);
    Py_INCREF(last_ts);
    if (taken) {
        Py_DECREF(last_ts);
        last_ts = PyLong_FromUnsignedLongLong(seen[taken - 1].ts);
    }
    if (want_frames) {
        Py_DECREF(frames);
        frames = PyList_New((Py_ssize_t)taken);
        for (size_t i = 0; frames != NULL && i < taken; i++) {
            PyObject *t = Py_BuildValue("(iKKnn)", EVENT, (unsigned long long)seen[i].index,
                                        (unsigned long long)seen[i].ts, (Py_ssize_t)seen[i].off,
                                        (Py_ssize_t)seen[i].end);
            if (t == NULL) {
                Py_CLEAR(frames);
                break;
            }
            PyList_SET_ITEM(frames, (Py_ssize_t)i, t);
        }
    }
    PyObject *result = NULL;
    if (frames != NULL && last_ts != NULL)
        result = Py_BuildValue("(ny#Ky#NN)", (Py_ssize_t)off, chain, (Py_ssize_t)32, (unsigned long long)count,
                               leaves, (Py_ssize_t)(32 * taken), last_ts, frames);
    else {
        Py_XDECREF(frames);
        Py_XDECREF(last_ts);
    }
    PyMem_Free(leaves);
    PyMem_Free(seen);
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
     "scan_events(buf, off, chain, count, batch_last, want_frames)"
     " -> (off, chain, count, packed leaves, last time or None, frames or None)."},
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
