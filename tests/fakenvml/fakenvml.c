/*
 * A fake libnvidia-ml.so.1 for layoutgen's tests.
 *
 * It exports the NVML C functions that pynvml (nvidia-ml-py 13.x) resolves for
 * layoutgen.live.nvml.read(), with the struct layouts pynvml declares, so the
 * tests run the real pynvml code: ctypes calls, buffer sizes, the
 * INSUFFICIENT_SIZE dance of the process lists, error codes.
 *
 * The GPUs come from the JSON file named by $FAKE_NVML_JSON, read at every
 * nvmlInit*():
 *
 *   {"driver_version": "570.86.15", "cuda_version": 12080,
 *    "gpus": [{"name": "...", "uuid": "GPU-...", "pci_bus_id": "00000000:01:00.0",
 *              "total": 85520809984, "used": 0, "free": 85520809984, "reserved": 0,
 *              "cc": [9, 0],
 *              "processes": [{"pid": 4242, "used": 6442450944, "kind": "compute"}]}],
 *    "init_error": 9,
 *    "fail": {"function": "nvmlDeviceGetMemoryInfo", "index": 1, "code": 999}}
 *
 * "used" of a process may be null (NVML_VALUE_NOT_AVAILABLE); "kind" is
 * "compute", "graphics" or "both".  "fail" may also be a list; its "function"
 * matches a symbol with or without its _vN suffix, "index" (default -1) is the
 * GPU index, -1 meaning "any" (and the only match for system functions).
 * A missing or malformed file makes nvmlInit fail with NVML_ERROR_UNKNOWN and
 * a message on stderr, so a broken test fixture is never mistaken for a GPU.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

typedef int nvmlReturn_t;
enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_UNKNOWN = 999,
};
#define NVML_VALUE_NOT_AVAILABLE_ULL (~0ULL)
#define NVML_MEMORY_V2 0x02000028u /* sizeof(nvmlMemory_v2_t) | 2 << 24 */

/* Struct layouts as pynvml declares them (and nvml.h defines them). */
typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;

typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;

typedef struct { /* nvmlProcessInfo_v2_t == nvmlProcessInfo_t (v3) */
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;

/* ---------------------------------------------------------------- JSON -- */

typedef enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ } jtype;

typedef struct jval {
    jtype t;
    int neg;                 /* J_NUM: a leading minus sign */
    unsigned long long num;  /* J_NUM: magnitude (integers only), J_BOOL: 0/1 */
    char *str;               /* J_STR */
    int n;                   /* J_ARR, J_OBJ: number of items */
    char **keys;             /* J_OBJ */
    struct jval **items;     /* J_ARR, J_OBJ */
} jval;

typedef struct {
    const char *p, *end;
    const char *err;
} jparser;

static void jfree(jval *v) {
    if (!v) return;
    for (int i = 0; i < v->n; i++) {
        if (v->keys) free(v->keys[i]);
        jfree(v->items[i]);
    }
    free(v->keys);
    free(v->items);
    free(v->str);
    free(v);
}

static void jskip(jparser *jp) {
    while (jp->p < jp->end && isspace((unsigned char)*jp->p)) jp->p++;
}

static jval *jvalue(jparser *jp, int depth);

static char *jstring(jparser *jp) {
    /* at the opening quote; output is never longer than the input */
    size_t cap = (size_t)(jp->end - jp->p) + 1;
    char *out = malloc(cap), *o = out;
    if (!out) { jp->err = "out of memory"; return NULL; }
    jp->p++;
    while (jp->p < jp->end && *jp->p != '"') {
        unsigned char c = (unsigned char)*jp->p++;
        if (c < 0x20) { jp->err = "control character in string"; free(out); return NULL; }
        if (c != '\\') { *o++ = (char)c; continue; }
        if (jp->p >= jp->end) break;
        c = (unsigned char)*jp->p++;
        switch (c) {
        case '"': case '\\': case '/': *o++ = (char)c; break;
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        case 'u': {
            unsigned int cp = 0;
            for (int i = 0; i < 4; i++) {
                if (jp->p >= jp->end || !isxdigit((unsigned char)*jp->p)) {
                    jp->err = "bad \\u escape"; free(out); return NULL;
                }
                char h = *jp->p++;
                cp = cp * 16 + (unsigned)(isdigit((unsigned char)h) ? h - '0' : (tolower(h) - 'a' + 10));
            }
            if (cp >= 0xD800 && cp <= 0xDFFF) cp = '?'; /* no surrogate pairs */
            if (cp < 0x80) *o++ = (char)cp;
            else if (cp < 0x800) { *o++ = (char)(0xC0 | cp >> 6); *o++ = (char)(0x80 | (cp & 0x3F)); }
            else {
                *o++ = (char)(0xE0 | cp >> 12);
                *o++ = (char)(0x80 | ((cp >> 6) & 0x3F));
                *o++ = (char)(0x80 | (cp & 0x3F));
            }
            break;
        }
        default: jp->err = "bad escape"; free(out); return NULL;
        }
    }
    if (jp->p >= jp->end) { jp->err = "unterminated string"; free(out); return NULL; }
    jp->p++;
    *o = '\0';
    return out;
}

static int jpush(jval *v, char *key, jval *item) {
    char **keys = v->t == J_OBJ ? realloc(v->keys, sizeof(char *) * (size_t)(v->n + 1)) : NULL;
    if (v->t == J_OBJ) { if (!keys) return 0; v->keys = keys; }
    jval **items = realloc(v->items, sizeof(jval *) * (size_t)(v->n + 1));
    if (!items) return 0;
    v->items = items;
    if (v->t == J_OBJ) v->keys[v->n] = key;
    v->items[v->n++] = item;
    return 1;
}

static jval *jcontainer(jparser *jp, int depth, int is_obj) {
    jval *v = calloc(1, sizeof *v);
    if (!v) { jp->err = "out of memory"; return NULL; }
    v->t = is_obj ? J_OBJ : J_ARR;
    char close = is_obj ? '}' : ']';
    jp->p++;
    jskip(jp);
    if (jp->p < jp->end && *jp->p == close) { jp->p++; return v; }
    for (;;) {
        char *key = NULL;
        jskip(jp);
        if (is_obj) {
            if (jp->p >= jp->end || *jp->p != '"') { jp->err = "expected a key"; goto fail; }
            if (!(key = jstring(jp))) goto fail;
            jskip(jp);
            if (jp->p >= jp->end || *jp->p != ':') { free(key); jp->err = "expected ':'"; goto fail; }
            jp->p++;
        }
        jval *item = jvalue(jp, depth + 1);
        if (!item) { free(key); goto fail; }
        if (!jpush(v, key, item)) { free(key); jfree(item); jp->err = "out of memory"; goto fail; }
        jskip(jp);
        if (jp->p < jp->end && *jp->p == ',') { jp->p++; continue; }
        if (jp->p < jp->end && *jp->p == close) { jp->p++; return v; }
        jp->err = is_obj ? "expected ',' or '}'" : "expected ',' or ']'";
        goto fail;
    }
fail:
    jfree(v);
    return NULL;
}

static jval *jvalue(jparser *jp, int depth) {
    jskip(jp);
    if (depth > 32) { jp->err = "nested too deeply"; return NULL; }
    if (jp->p >= jp->end) { jp->err = "unexpected end of file"; return NULL; }
    char c = *jp->p;
    if (c == '{' || c == '[') return jcontainer(jp, depth, c == '{');
    jval *v = calloc(1, sizeof *v);
    if (!v) { jp->err = "out of memory"; return NULL; }
    if (c == '"') {
        v->t = J_STR;
        if (!(v->str = jstring(jp))) { free(v); return NULL; }
        return v;
    }
    static const struct { const char *word; jtype t; unsigned long long num; } words[] = {
        {"null", J_NULL, 0}, {"true", J_BOOL, 1}, {"false", J_BOOL, 0},
    };
    for (size_t i = 0; i < sizeof words / sizeof *words; i++) {
        size_t len = strlen(words[i].word);
        if ((size_t)(jp->end - jp->p) >= len && memcmp(jp->p, words[i].word, len) == 0) {
            v->t = words[i].t;
            v->num = words[i].num;
            jp->p += len;
            return v;
        }
    }
    /* integers only: every number this fake needs is a count, a size or a code */
    v->t = J_NUM;
    if (*jp->p == '-') { v->neg = 1; jp->p++; }
    if (jp->p >= jp->end || !isdigit((unsigned char)*jp->p)) {
        jp->err = "expected a value"; free(v); return NULL;
    }
    while (jp->p < jp->end && isdigit((unsigned char)*jp->p)) {
        unsigned d = (unsigned)(*jp->p++ - '0');
        if (v->num > (~0ULL - d) / 10) { jp->err = "integer too large"; free(v); return NULL; }
        v->num = v->num * 10 + d;
    }
    if (jp->p < jp->end && (*jp->p == '.' || *jp->p == 'e' || *jp->p == 'E')) {
        jp->err = "only integers are supported"; free(v); return NULL;
    }
    return v;
}

static jval *jget(const jval *obj, const char *key) {
    if (!obj || obj->t != J_OBJ) return NULL;
    for (int i = 0; i < obj->n; i++)
        if (strcmp(obj->keys[i], key) == 0) return obj->items[i];
    return NULL;
}

/* ---------------------------------------------------------------- state -- */

#define MAX_GPUS 16
#define MAX_PROCS 64
#define MAX_FAILS 8

enum { KIND_COMPUTE = 1, KIND_GRAPHICS = 2 };

struct fake_proc {
    unsigned int pid;
    unsigned long long used;
    int kinds;
};

struct fake_gpu {
    char name[96], uuid[96], bus_id[32];
    unsigned long long total, used, free, reserved;
    int cc_major, cc_minor;
    int nprocs;
    struct fake_proc procs[MAX_PROCS];
};

struct fake_fail {
    char function[128];
    long long index;
    nvmlReturn_t code;
};

static int initialized;
static char driver_version[80];
static int cuda_version;
static int ngpus;
static struct fake_gpu gpus[MAX_GPUS];
static int nfails;
static struct fake_fail fails[MAX_FAILS];
static const char *load_error;

static int set_error(const char *msg) { load_error = msg; return 0; }

static int get_str(const jval *obj, const char *key, char *out, size_t size) {
    const jval *v = jget(obj, key);
    if (!v) { out[0] = '\0'; return 1; }
    if (v->t != J_STR) return set_error("a string field is not a string");
    if (strlen(v->str) >= size) return set_error("a string field is too long for its NVML buffer");
    strcpy(out, v->str);
    return 1;
}

static int get_u64(const jval *obj, const char *key, unsigned long long dflt, unsigned long long *out) {
    const jval *v = jget(obj, key);
    if (!v) { *out = dflt; return 1; }
    if (v->t == J_NULL) { *out = NVML_VALUE_NOT_AVAILABLE_ULL; return 1; }
    if (v->t != J_NUM || v->neg) return set_error("a size field is not a non-negative integer");
    *out = v->num;
    return 1;
}

static int get_int(const jval *obj, const char *key, long long dflt, long long *out) {
    const jval *v = jget(obj, key);
    if (!v) { *out = dflt; return 1; }
    if (v->t != J_NUM || v->num > 0x7fffffffULL) return set_error("an integer field is not a small integer");
    *out = v->neg ? -(long long)v->num : (long long)v->num;
    return 1;
}

static int load_fail(const jval *f) {
    if (f->t != J_OBJ) return set_error("\"fail\" entries must be objects");
    if (nfails >= MAX_FAILS) return set_error("too many \"fail\" entries");
    struct fake_fail *ff = &fails[nfails++];
    long long code;
    if (!get_str(f, "function", ff->function, sizeof ff->function)) return 0;
    if (!get_int(f, "index", -1, &ff->index)) return 0;
    if (!get_int(f, "code", NVML_ERROR_UNKNOWN, &code)) return 0;
    ff->code = (nvmlReturn_t)code;
    return 1;
}

static int load_gpu(const jval *g, struct fake_gpu *gpu) {
    if (g->t != J_OBJ) return set_error("\"gpus\" entries must be objects");
    memset(gpu, 0, sizeof *gpu);
    if (!get_str(g, "name", gpu->name, sizeof gpu->name)) return 0;
    if (!get_str(g, "uuid", gpu->uuid, sizeof gpu->uuid)) return 0;
    if (!get_str(g, "pci_bus_id", gpu->bus_id, sizeof gpu->bus_id)) return 0;
    if (!get_u64(g, "total", 0, &gpu->total)) return 0;
    if (!get_u64(g, "used", 0, &gpu->used)) return 0;
    if (!get_u64(g, "free", 0, &gpu->free)) return 0;
    if (!get_u64(g, "reserved", 0, &gpu->reserved)) return 0;
    const jval *cc = jget(g, "cc");
    if (cc) {
        if (cc->t != J_ARR || cc->n != 2 || cc->items[0]->t != J_NUM || cc->items[1]->t != J_NUM)
            return set_error("\"cc\" must be [major, minor]");
        gpu->cc_major = (int)cc->items[0]->num;
        gpu->cc_minor = (int)cc->items[1]->num;
    }
    const jval *procs = jget(g, "processes");
    if (!procs) return 1;
    if (procs->t != J_ARR) return set_error("\"processes\" must be a list");
    if (procs->n > MAX_PROCS) return set_error("too many processes");
    for (int i = 0; i < procs->n; i++) {
        const jval *p = procs->items[i];
        struct fake_proc *fp = &gpu->procs[gpu->nprocs++];
        long long pid;
        char kind[16];
        if (p->t != J_OBJ) return set_error("\"processes\" entries must be objects");
        if (!get_int(p, "pid", 0, &pid)) return 0;
        if (!get_u64(p, "used", 0, &fp->used)) return 0;
        if (!get_str(p, "kind", kind, sizeof kind)) return 0;
        fp->pid = (unsigned int)pid;
        if (strcmp(kind, "") == 0 || strcmp(kind, "compute") == 0) fp->kinds = KIND_COMPUTE;
        else if (strcmp(kind, "graphics") == 0) fp->kinds = KIND_GRAPHICS;
        else if (strcmp(kind, "both") == 0) fp->kinds = KIND_COMPUTE | KIND_GRAPHICS;
        else return set_error("a process \"kind\" is not compute, graphics or both");
    }
    return 1;
}

/* Loads $FAKE_NVML_JSON; returns the code nvmlInit should return. */
static nvmlReturn_t load(void) {
    const char *path = getenv("FAKE_NVML_JSON");
    ngpus = nfails = 0;
    cuda_version = 0;
    driver_version[0] = '\0';
    load_error = NULL;
    if (!path || !*path) {
        fprintf(stderr, "fakenvml: FAKE_NVML_JSON is not set\n");
        return NVML_ERROR_UNKNOWN;
    }
    FILE *f = fopen(path, "rb");
    if (!f) { perror(path); return NVML_ERROR_UNKNOWN; }
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + len, 1, cap - len, f)) > 0) {
        len += got;
        if (len == cap) { char *bigger = realloc(buf, cap *= 2); if (!bigger) free(buf); buf = bigger; }
    }
    fclose(f);
    if (!buf) { fprintf(stderr, "fakenvml: out of memory\n"); return NVML_ERROR_UNKNOWN; }
    jparser jp = {buf, buf + len, NULL};
    jval *root = jvalue(&jp, 0);
    if (root) {
        jskip(&jp);
        if (jp.p != jp.end) { jp.err = "trailing data"; jfree(root); root = NULL; }
    }
    free(buf);
    if (!root) {
        fprintf(stderr, "fakenvml: %s: %s\n", path, jp.err ? jp.err : "invalid JSON");
        return NVML_ERROR_UNKNOWN;
    }
    nvmlReturn_t ret = NVML_SUCCESS;
    long long init_error, cuda;
    int ok = root->t == J_OBJ ? 1 : set_error("the top level must be an object");
    ok = ok && get_int(root, "init_error", 0, &init_error);
    ok = ok && get_int(root, "cuda_version", 0, &cuda);
    ok = ok && get_str(root, "driver_version", driver_version, sizeof driver_version);
    const jval *list = ok ? jget(root, "gpus") : NULL;
    if (ok && list) {
        if (list->t != J_ARR || list->n > MAX_GPUS) ok = set_error("\"gpus\" must be a list of at most 16");
        for (int i = 0; ok && i < list->n; i++) ok = load_gpu(list->items[i], &gpus[ngpus++]);
    }
    const jval *fail = ok ? jget(root, "fail") : NULL;
    if (ok && fail) {
        if (fail->t == J_ARR)
            for (int i = 0; ok && i < fail->n; i++) ok = load_fail(fail->items[i]);
        else
            ok = load_fail(fail);
    }
    if (!ok) {
        fprintf(stderr, "fakenvml: %s: %s\n", path, load_error);
        ret = NVML_ERROR_UNKNOWN;
    } else {
        cuda_version = (int)cuda;
        ret = (nvmlReturn_t)init_error;
    }
    jfree(root);
    return ret;
}

/* "nvmlDeviceGetComputeRunningProcesses_v3" matches "...Processes" and "..._v3". */
static int same_function(const char *symbol, const char *wanted) {
    if (strcmp(symbol, wanted) == 0) return 1;
    const char *suffix = strrchr(symbol, '_');
    if (!suffix || suffix[1] != 'v' || !isdigit((unsigned char)suffix[2])) return 0;
    size_t base = (size_t)(suffix - symbol);
    return strlen(wanted) == base && strncmp(symbol, wanted, base) == 0;
}

static nvmlReturn_t injected(const char *symbol, long long index) {
    for (int i = 0; i < nfails; i++)
        if (same_function(symbol, fails[i].function) && (fails[i].index == -1 || fails[i].index == index))
            return fails[i].code;
    return NVML_SUCCESS;
}

typedef struct fake_gpu *nvmlDevice_t;

static long long gpu_index(nvmlDevice_t device) {
    for (int i = 0; i < ngpus; i++)
        if (device == &gpus[i]) return i;
    return -1;
}

/* The preamble of every device function: initialised, valid handle, no injected fault. */
#define DEVICE_CALL(device)                                                    \
    if (!initialized) return NVML_ERROR_UNINITIALIZED;                         \
    long long index_ = gpu_index(device);                                      \
    if (index_ < 0) return NVML_ERROR_INVALID_ARGUMENT;                        \
    nvmlReturn_t injected_ = injected(__func__, index_);                       \
    if (injected_ != NVML_SUCCESS) return injected_

#define SYSTEM_CALL()                                                          \
    if (!initialized) return NVML_ERROR_UNINITIALIZED;                         \
    nvmlReturn_t injected_ = injected(__func__, -1);                           \
    if (injected_ != NVML_SUCCESS) return injected_

static nvmlReturn_t copy_string(const char *value, char *out, unsigned int length) {
    if (!out) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(value) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(out, value);
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------- exports -- */

EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    nvmlReturn_t ret = load();
    initialized = ret == NVML_SUCCESS;
    return ret;
}

EXPORT nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
EXPORT nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }

EXPORT nvmlReturn_t nvmlShutdown(void) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    initialized = 0;
    return NVML_SUCCESS;
}

EXPORT const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case 0: return "Success";
    case 1: return "Uninitialized";
    case 2: return "Invalid Argument";
    case 3: return "Not Supported";
    case 4: return "Insufficient Permissions";
    case 7: return "Insufficient Size";
    case 9: return "Driver Not Loaded";
    case 12: return "NVML Shared Library Not Found";
    case 13: return "Function Not Found";
    case 15: return "GPU is lost";
    case 18: return "RM has detected an NVML/RM version mismatch.";
    case 25: return "Argument version mismatch";
    case 999: return "Unknown Error";
    default: return "Fake NVML error";
    }
}

EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    SYSTEM_CALL();
    return copy_string(driver_version, version, length);
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *version) {
    SYSTEM_CALL();
    if (!version) return NVML_ERROR_INVALID_ARGUMENT;
    *version = cuda_version;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *version) {
    SYSTEM_CALL();
    if (!version) return NVML_ERROR_INVALID_ARGUMENT;
    *version = cuda_version;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    SYSTEM_CALL();
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    *count = (unsigned int)ngpus;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) { return nvmlDeviceGetCount_v2(count); }

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    nvmlReturn_t ret = injected(__func__, index);
    if (ret != NVML_SUCCESS) return ret;
    if (!device || index >= (unsigned int)ngpus) return NVML_ERROR_INVALID_ARGUMENT;
    *device = &gpus[index];
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device) {
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    DEVICE_CALL(device);
    return copy_string(device->name, name, length);
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    DEVICE_CALL(device);
    return copy_string(device->uuid, uuid, length);
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    DEVICE_CALL(device);
    if (!pci) return NVML_ERROR_INVALID_ARGUMENT;
    memset(pci, 0, sizeof *pci);
    unsigned int function = 0;
    sscanf(device->bus_id, "%x:%x:%x.%x", &pci->domain, &pci->bus, &pci->device, &function);
    strcpy(pci->busId, device->bus_id);
    /* the legacy field holds the short form, "0000:01:00.0", as real NVML does */
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04x:%02x:%02x.%x",
             pci->domain & 0xffff, pci->bus & 0xff, pci->device & 0xff, function & 0xf);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    DEVICE_CALL(device);
    if (!memory) return NVML_ERROR_INVALID_ARGUMENT;
    memory->total = device->total;
    memory->free = device->free;
    memory->used = device->used;
    return NVML_SUCCESS;
}

/* v2 reports the reserved memory apart: used(v1) = used(v2) + reserved. */
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    DEVICE_CALL(device);
    if (!memory) return NVML_ERROR_INVALID_ARGUMENT;
    if (memory->version != NVML_MEMORY_V2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    memory->total = device->total;
    memory->reserved = device->reserved;
    memory->free = device->free;
    memory->used = device->used - device->reserved;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor) {
    DEVICE_CALL(device);
    if (!major || !minor) return NVML_ERROR_INVALID_ARGUMENT;
    *major = device->cc_major;
    *minor = device->cc_minor;
    return NVML_SUCCESS;
}

/* NVML's contract: with too small a buffer (or none), set *count to the number
 * needed and return INSUFFICIENT_SIZE; with no processes return SUCCESS and 0. */
static nvmlReturn_t processes(nvmlDevice_t device, int kind, unsigned int *count,
                              nvmlProcessInfo_t *infos) {
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int n = 0;
    for (int i = 0; i < device->nprocs; i++) n += (device->procs[i].kinds & kind) != 0;
    if (n == 0) { *count = 0; return NVML_SUCCESS; }
    if (!infos || *count < n) { *count = n; return NVML_ERROR_INSUFFICIENT_SIZE; }
    unsigned int k = 0;
    for (int i = 0; i < device->nprocs; i++) {
        if (!(device->procs[i].kinds & kind)) continue;
        infos[k].pid = device->procs[i].pid;
        infos[k].usedGpuMemory = device->procs[i].used;
        infos[k].gpuInstanceId = 0xFFFFFFFFu;
        infos[k].computeInstanceId = 0xFFFFFFFFu;
        k++;
    }
    *count = n;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *count,
                                                            nvmlProcessInfo_t *infos) {
    DEVICE_CALL(device);
    return processes(device, KIND_COMPUTE, count, infos);
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *count,
                                                            nvmlProcessInfo_t *infos) {
    DEVICE_CALL(device);
    return processes(device, KIND_COMPUTE, count, infos);
}

EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device, unsigned int *count,
                                                             nvmlProcessInfo_t *infos) {
    DEVICE_CALL(device);
    return processes(device, KIND_GRAPHICS, count, infos);
}

EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t device, unsigned int *count,
                                                             nvmlProcessInfo_t *infos) {
    DEVICE_CALL(device);
    return processes(device, KIND_GRAPHICS, count, infos);
}
