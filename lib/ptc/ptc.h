/*
 * ptc.h - the public interface of libptc.
 *
 * libptc reads PyTorch checkpoints (what torch.save writes: the zip format of PyTorch >= 1.6 and the
 * legacy pickle-stream format of older releases) without Python and without running any code from the
 * file. Loading follows torch 2.6's torch.load(weights_only=True): a restricted pickle machine that
 * knows a fixed set of opcodes and an exact allowlist of globals, and every size in the file is
 * treated as hostile and checked before use.
 *
 * Example: print every tensor of a state dict.
 *
 *     ptc_ckpt *c; ptc_error err;
 *     if (ptc_ckpt_open(&c, "model.pth", NULL, &err) < 0) {
 *         fprintf(stderr, "%s\n", err.message);   // "data.pkl+0x1c4: GLOBAL posix.system is not allowed ..."
 *         return 1;
 *     }
 *     ptc_walk *w = NULL; const ptc_tensor *t; const char *path;
 *     ptc_walk_new(&w, ptc_ckpt_root(c), &err);
 *     while (ptc_walk_next(w, &path, &t) > 0)
 *         printf("%s %s %lld elements\n", path, ptc_dtype_name(ptc_tensor_dtype(t)),
 *                (long long)ptc_tensor_numel(t));
 *     ptc_walk_free(w);
 *     ptc_ckpt_close(c);
 *
 * Conventions that hold for every function below (each function's comment says where it differs,
 * and names its own error codes):
 *   - Errors. Functions that can fail return int: 0 on success (or a count, where said), a
 *     negative PTC_E* code on failure. When a ptc_error pointer is given (it may always be NULL)
 *     it receives the code and a message that names the member, the byte offset and the reason;
 *     on success its contents are unspecified. Every function that allocates can fail with
 *     PTC_ENOMEM; an invalid argument (a required pointer NULL, a value out of its range) is
 *     PTC_EINVAL unless said otherwise.
 *   - NULL. Every *_free / *_close accepts NULL and does nothing. Getters that say so accept a
 *     NULL handle and return 0, NULL or the value they name; the others (the tensor, storage
 *     and report getters marked "t/s/r must not be NULL") do not check, as strlen does not.
 *   - Lifetimes. What a getter returns is borrowed: it lives as long as the handle it came from
 *     (a value or tensor read from a checkpoint: until ptc_ckpt_close; from a document: until
 *     ptc_doc_free; from a report: until ptc_report_free), and the caller never frees it. Strings
 *     said to be "static" live for ever. Input buffers and strings are used during the call only,
 *     unless the function says it keeps them (ptc_ckpt_open_memory's buffer, a borrowed storage).
 *   - Threads. Distinct handles may be used from distinct threads at once. One handle must not
 *     be used from two threads at once, except that functions taking only const pointers to a
 *     checkpoint and the values, tensors and storages read from it only read them: any number of
 *     threads may call those on the same open checkpoint (a ptc_walk, a ptc_budget and a ptc_doc
 *     are handles of their own: one thread each). Functions on no handle (ptc_strerror,
 *     ptc_dtype_name, ptc_*_default ...) may be called from any thread at any time.
 *   - Global state. libptc keeps exactly three process-wide things, and nothing else: (1) the
 *     allocator (ptc_set_allocator: set it before the first handle is created and not again while
 *     any handle or anything the library allocated exists; it is not locked); (2) the table of
 *     loaded modules ("modules" below: filled on first use, under a lock, by any thread; modules
 *     are never unloaded); (3) the table of temporary file names of the saves in progress, which
 *     ptc_save_remove_temporaries reads (updated atomically by each save). Everything else lives
 *     in the handles a caller creates.
 *   - Every parameter struct (ptc_open_params, ptc_save_params, ptc_verify_params,
 *     ptc_train_params, and those added later) starts with size_t size, which its *_default()
 *     sets to the sizeof the caller was compiled with. Fill one with *_default() and then set
 *     the fields you need. The library refuses a struct whose size is 0 or larger than its own
 *     (PTC_EINVAL, "ptc_open_params: size N is not this library's M ..."), and reads only the
 *     first size bytes of a smaller one (a program built against an older ptc.h), keeping its
 *     own defaults for the fields added since.
 */
#ifndef PTC_PTC_H
#define PTC_PTC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) && defined(PTC_BUILDING)
#define PTC_API __attribute__((visibility("default")))
#else
#define PTC_API
#endif

/* ---------------------------------------------------------------------------------------------
 * Versions
 */
#define PTC_VERSION_MAJOR  0
#define PTC_VERSION_MINOR  1
#define PTC_VERSION_PATCH  0
#define PTC_VERSION_STRING "0.1.0"
/* "0.1.0": the version of the library running, which may be newer than the PTC_VERSION_* the
 * caller was compiled with. Static; never fails; any thread. */
PTC_API const char *ptc_version(void);

/* ---------------------------------------------------------------------------------------------
 * Errors. Codes are appended, never renumbered.
 *
 *   NOMEM        an allocation failed (the allocator refused, or the system is out of memory)
 *   INVAL        a caller passed an invalid argument
 *   IO           the operating system failed to open, read, map or write a file
 *   FORMAT       the file is malformed: its structure is broken, inconsistent or ambiguous
 *   UNSAFE       the file references a global or opcode outside the policy (it may run code)
 *   LIMIT        the file exceeds a configured limit (depth, memo, objects, bytes, ratio)
 *   UNSUPPORTED  the file is a recognised format that ptc refuses (TorchScript, tar, preview)
 *   NOTFOUND     a named record, key or tensor does not exist
 *   CRC          a record's bytes do not match its CRC-32
 *   RANGE        a value does not fit the requested type (an int beyond 64 bits, say)
 *   NOTZIP       the input is neither a zip checkpoint nor a legacy stream
 *   COMM         a collective between processes failed (MPI's message in the detail)
 */
#define PTC_ERRNO_MAP(XX)                                                                          \
    XX(NOMEM, -1, "out of memory")                                                                 \
    XX(INVAL, -2, "invalid argument")                                                              \
    XX(IO, -3, "input/output error")                                                               \
    XX(FORMAT, -4, "malformed checkpoint")                                                         \
    XX(UNSAFE, -5, "content outside the allowlist")                                                \
    XX(LIMIT, -6, "resource limit exceeded")                                                       \
    XX(UNSUPPORTED, -7, "unsupported format")                                                      \
    XX(NOTFOUND, -8, "not found")                                                                  \
    XX(CRC, -9, "checksum mismatch")                                                               \
    XX(RANGE, -10, "value out of range")                                                           \
    XX(NOTZIP, -11, "not a checkpoint")                                                            \
    XX(COMM, -12, "communication failure")

typedef enum ptc_errno {
#define PTC_XX_ENUM(name, value, text) PTC_E##name = value,
    PTC_ERRNO_MAP(PTC_XX_ENUM)
#undef PTC_XX_ENUM
        PTC_OK = 0
} ptc_errno;

/* Detail of a failure. member is the record the problem was found in ("data.pkl", "data/3",
 * "byteorder", or "" for the container itself); offset is the byte offset inside that member (or
 * inside the file when member is ""), -1 when no offset applies. message is complete and printable:
 * every byte that came from the file is escaped. flags says more about the refusal:
 * PTC_ERR_STRICTER marks a rule where ptc is deliberately stricter than torch 2.6, whose
 * torch.load(weights_only=True) accepts what this error refuses (bytes after STOP, an unchecked CRC,
 * an ambiguous zip, a cycle...). Without it, torch 2.6 refuses the file for the same reason. */
typedef struct ptc_error {
    int code;
    int64_t offset;
    char member[128];
    char message[512];
    unsigned flags;
} ptc_error;

#define PTC_ERR_STRICTER 0x1u

/* The text and the name of a code: "malformed checkpoint", "EFORMAT" ("success"/"OK" for 0,
 * "unknown error"/"EUNKNOWN" for any other value). Static strings, never NULL; never fail; any
 * thread. */
PTC_API const char *ptc_strerror(int code);
PTC_API const char *ptc_err_name(int code);

/* ---------------------------------------------------------------------------------------------
 * Allocation. Every allocation of the library goes through one allocator (tests use it to fail the
 * Nth allocation). The default wraps malloc/realloc/free. The function must behave like realloc:
 * fn(ctx, NULL, n) allocates, fn(ctx, p, n) resizes, fn(ctx, p, 0) frees and returns NULL; it
 * returns NULL when it cannot allocate (the library then fails with PTC_ENOMEM), and it may be
 * called from every thread that uses the library, at once: it must be thread safe when handles
 * are used from several threads. Module code (oneDNN, MPI, CUDA) allocates its own memory.
 */
typedef void *(*ptc_realloc_fn)(void *ctx, void *ptr, size_t size);
/* Sets the process-wide allocator (one of the three global things above); fn NULL restores the
 * default (ctx is then ignored). Never fails. Call it before the first handle is created, from one
 * thread, and never while anything the library allocated still exists (memory is freed through
 * the allocator that is set when it is freed): it is not synchronised. ctx is kept until the
 * next call. */
PTC_API void ptc_set_allocator(ptc_realloc_fn fn, void *ctx);

/* ---------------------------------------------------------------------------------------------
 * Data types, with torch's names (ptc_dtype_name returns "float32", "bfloat16", "float8_e4m3fn" ...).
 */
typedef enum ptc_dtype {
    PTC_FLOAT64,
    PTC_FLOAT32,
    PTC_FLOAT16,
    PTC_BFLOAT16,
    PTC_INT64,
    PTC_INT32,
    PTC_INT16,
    PTC_INT8,
    PTC_UINT8,
    PTC_BOOL,
    PTC_COMPLEX128,
    PTC_COMPLEX64,
    PTC_COMPLEX32,
    PTC_QINT8,
    PTC_QINT32,
    PTC_QUINT8,
    PTC_QUINT4X2,
    PTC_QUINT2X4,
    PTC_FLOAT8_E4M3FN,
    PTC_FLOAT8_E5M2,
    PTC_FLOAT8_E4M3FNUZ,
    PTC_FLOAT8_E5M2FNUZ,
    PTC_BITS8,
    PTC_BITS16,
    PTC_BITS1X8,
    PTC_BITS2X4,
    PTC_BITS4X2,
    PTC_UINT16,
    PTC_UINT32,
    PTC_UINT64,
    PTC_DTYPE_COUNT
} ptc_dtype;

/* Functions of a dtype keep no state: any thread, never fail except as said. */
PTC_API const char *ptc_dtype_name(ptc_dtype dt); /* static; NULL for an invalid value */
PTC_API size_t ptc_dtype_size(ptc_dtype dt);      /* bytes per element; 0 for an invalid value */
/* torch's name ("float32", "bfloat16") to the dtype: 0; PTC_ENOTFOUND when unknown; PTC_EINVAL
 * when name or out is NULL. */
PTC_API int ptc_dtype_from_name(const char *name, ptc_dtype *out);

/* ---------------------------------------------------------------------------------------------
 * Limits. Every size in a file is checked against what the file holds and against these limits
 * before anything is allocated. ptc_limits_default() fills the defaults listed beside each field.
 */
typedef struct ptc_limits {
    uint32_t max_depth;          /* nesting of containers and MARKs: 1000 */
    uint64_t max_memo;           /* pickle memo entries: 1 << 20 */
    uint64_t max_objects;        /* values built by one pickle: 1 << 24 */
    uint64_t max_pickle_bytes;   /* size of one pickle: 1 GiB */
    uint64_t max_heap_bytes;     /* heap used by one load, mapped data excluded: 1 GiB; also the
                                  * most bytes read whole from a path that cannot be mapped (a
                                  * pipe, a device such as /dev/zero): PTC_ELIMIT past them */
    uint64_t max_records;        /* members of a zip archive: 1 << 20 */
    uint64_t max_inflated_bytes; /* one deflated record once inflated: 16 GiB */
    uint32_t max_inflate_ratio;  /* uncompressed / compressed for deflated records: 1000 */
    uint32_t max_ndim;           /* dimensions of one tensor: 64 */
} ptc_limits;

/* Fills *l with the defaults above; l must not be NULL. Never fails; any thread. A ptc_limits is
 * copied by the functions that take one: it need not outlive the call. */
PTC_API void ptc_limits_default(ptc_limits *l);

/* ---------------------------------------------------------------------------------------------
 * Values: the object tree a checkpoint's pickle describes. Values are borrowed from the checkpoint
 * that produced them and live until it is closed (or from the document that made them, until
 * ptc_doc_free). The tree may share nodes (the same tensor or list referenced twice); ptc rejects
 * cycles at load time, so every walk terminates.
 *
 * Every function of this section accepts v NULL (as a value of no kind: the getters fail with
 * PTC_EINVAL, the others return 0 / NULL / PTC_VALUE_NONE), never allocates, and only reads: any
 * number of threads may call them on the same tree. The typed getters return 0, or PTC_EINVAL when
 * v is not of their kind (out is then untouched); their out pointers must not be NULL. Pointers
 * they give (strings, bytes, items, keys) are borrowed from the tree.
 */
typedef struct ptc_value ptc_value;
typedef struct ptc_tensor ptc_tensor;
typedef struct ptc_storage ptc_storage;

typedef enum ptc_value_kind {
    PTC_VALUE_NONE,
    PTC_VALUE_BOOL,
    PTC_VALUE_INT, /* any size; ptc_value_int answers PTC_ERANGE beyond 64 bits */
    PTC_VALUE_FLOAT,
    PTC_VALUE_STR,   /* UTF-8, may contain NUL and, as Python reads pickles, lone surrogates */
    PTC_VALUE_BYTES, /* bytes / bytearray */
    PTC_VALUE_TUPLE,
    PTC_VALUE_LIST,
    PTC_VALUE_DICT, /* dict, collections.OrderedDict or collections.Counter; insertion order */
    PTC_VALUE_SET,
    PTC_VALUE_COMPLEX,
    PTC_VALUE_TENSOR,
    PTC_VALUE_DTYPE,  /* torch.float32 ... */
    PTC_VALUE_DEVICE, /* torch.device('cuda', 0) */
    PTC_VALUE_SIZE,   /* torch.Size: a tuple of ints */
    PTC_VALUE_GLOBAL, /* a bare reference to an allowed global that was never called, or any
                       * global read symbolically (PTC_OPEN_SALVAGE) */
    PTC_VALUE_OBJECT  /* an instance of a class a policy allowed (see ptc_policy_allow_global),
                       * or, read symbolically, the result of any call */
} ptc_value_kind;

PTC_API ptc_value_kind ptc_value_kind_of(const ptc_value *v); /* PTC_VALUE_NONE for NULL */
PTC_API const char *ptc_value_kind_name(ptc_value_kind k);    /* "none", "dict", ...; static */

PTC_API int ptc_value_bool(const ptc_value *v, int *out);
/* PTC_ERANGE when the int does not fit 64 bits (ptc_value_int_bytes reads it whole). */
PTC_API int ptc_value_int(const ptc_value *v, int64_t *out);
/* Two's-complement little-endian bytes of any int (the LONG1 encoding); borrowed. */
PTC_API int ptc_value_int_bytes(const ptc_value *v, const uint8_t **bytes, size_t *len);
PTC_API int ptc_value_float(const ptc_value *v, double *out);
PTC_API int ptc_value_complex(const ptc_value *v, double *re, double *im);
/* str and bytes: pointer and length, borrowed; str data is also NUL-terminated. */
PTC_API int ptc_value_str(const ptc_value *v, const char **s, size_t *len);
PTC_API int ptc_value_bytes(const ptc_value *v, const uint8_t **b, size_t *len);

/* tuple, list, set, torch.Size: number of items and the i-th item. dict: number of pairs.
 * ptc_value_len is 0 for another kind; ptc_value_item is NULL out of range or for another kind. */
PTC_API size_t ptc_value_len(const ptc_value *v);
PTC_API const ptc_value *ptc_value_item(const ptc_value *v, size_t i);
/* dict pairs in insertion order. */
PTC_API const ptc_value *ptc_dict_key(const ptc_value *v, size_t i);
PTC_API const ptc_value *ptc_dict_value(const ptc_value *v, size_t i);
/* Lookup by string key; NULL when absent or v is not a dict. */
PTC_API const ptc_value *ptc_dict_get(const ptc_value *v, const char *key);
/* OrderedDict or Counter rather than dict. */
PTC_API int ptc_dict_is_ordered(const ptc_value *v);
/* Attributes set on a dict by BUILD (an OrderedDict's {'_metadata': ...}); NULL when none. */
PTC_API const ptc_value *ptc_dict_attrs(const ptc_value *v);

PTC_API int ptc_value_dtype(const ptc_value *v, ptc_dtype *out);
/* device: type ("cpu", "cuda"; borrowed) and index (-1 when absent). */
PTC_API int ptc_value_device(const ptc_value *v, const char **type, int64_t *index);
/* global and object: "module.name" of the global or class (borrowed; NULL for another kind);
 * object args and state (NULL when absent or for another kind). Read with PTC_OPEN_SALVAGE, any
 * of them may be the placeholder of a cut cycle (see "Cycles" under Salvage), whose name is
 * "<back-reference to an enclosing ...>". */
PTC_API const char *ptc_value_global_name(const ptc_value *v);
PTC_API const ptc_value *ptc_object_args(const ptc_value *v);
PTC_API const ptc_value *ptc_object_state(const ptc_value *v);
PTC_API const ptc_tensor *ptc_value_tensor(const ptc_value *v); /* NULL unless a tensor */

/* ---------------------------------------------------------------------------------------------
 * Tensors and storages. A tensor views a storage: element (i0, i1, ...) lives at element index
 * storage_offset + sum(i_d * stride_d) of the storage. ptc proves at load time that every element a
 * tensor can address lies inside its storage, and that every storage lies inside its record.
 *
 * The getters below cannot fail and do not check their argument: t / s must not be NULL (as with
 * strlen). What they return is borrowed from the tensor's checkpoint or document and lives as
 * long as it. They only read: any number of threads may call them, ptc_tensor_read and
 * ptc_tensor_sha256 included, on the same tensor at once.
 */
PTC_API ptc_dtype ptc_tensor_dtype(const ptc_tensor *t);
PTC_API int ptc_tensor_ndim(const ptc_tensor *t);
PTC_API const int64_t *ptc_tensor_shape(const ptc_tensor *t);   /* [ndim] */
PTC_API const int64_t *ptc_tensor_stride(const ptc_tensor *t);  /* [ndim], in elements */
PTC_API int64_t ptc_tensor_storage_offset(const ptc_tensor *t); /* in elements */
PTC_API int64_t ptc_tensor_numel(const ptc_tensor *t);
PTC_API int64_t ptc_tensor_nbytes(const ptc_tensor *t); /* numel * element size */
PTC_API int ptc_tensor_requires_grad(const ptc_tensor *t);
PTC_API int ptc_tensor_is_parameter(const ptc_tensor *t);  /* pickled as nn.Parameter */
PTC_API int ptc_tensor_is_contiguous(const ptc_tensor *t); /* row-major, no gaps */
/* conj / neg bits: the storage holds the data before conjugation / negation (torch's lazy views);
 * ptc_tensor_read applies them. */
PTC_API int ptc_tensor_is_conj(const ptc_tensor *t);
PTC_API int ptc_tensor_is_neg(const ptc_tensor *t);
PTC_API const ptc_storage *ptc_tensor_storage(const ptc_tensor *t);
/* Pointer to the element at storage_offset, in host byte order; borrowed. */
PTC_API const void *ptc_tensor_data(const ptc_tensor *t);
/* Copies the elements in row-major order, as little-endian bytes, with conj/neg applied, into dst
 * (which holds dst_len bytes, at least ptc_tensor_nbytes). 0; PTC_EINVAL when t is NULL, dst is
 * NULL for a tensor with elements, or dst_len is too small (nothing is written then). */
PTC_API int ptc_tensor_read(const ptc_tensor *t, void *dst, size_t dst_len, ptc_error *err);
/* SHA-256 of the bytes ptc_tensor_read produces, into digest, by OpenSSL's libcrypto, which libptc
 * loads on the first digest (dlopen of libcrypto.so.3) and keeps. 0; PTC_EINVAL when t or digest
 * is NULL; PTC_EUNSUPPORTED when libcrypto cannot be loaded or fails the digest (the message says
 * why); PTC_ENOMEM.
 * A contiguous tensor is hashed in place; other layouts go through a 64 KiB buffer. */
PTC_API int ptc_tensor_sha256(const ptc_tensor *t, uint8_t digest[32], ptc_error *err);

PTC_API const char *ptc_storage_key(const ptc_storage *s);      /* "0", "1", ... (borrowed) */
PTC_API const char *ptc_storage_location(const ptc_storage *s); /* "cpu", "cuda:0", ... */
PTC_API ptc_dtype ptc_storage_dtype(const ptc_storage *s);
PTC_API int64_t ptc_storage_nbytes(const ptc_storage *s);
PTC_API const void *ptc_storage_data(const ptc_storage *s); /* host byte order; borrowed */
/* 1 when the data is used in place from the file's mapping, 0 when ptc holds a copy (the record was
 * deflated, unaligned, byte-swapped, or the checkpoint was opened with PTC_OPEN_COPY). */
PTC_API int ptc_storage_is_mapped(const ptc_storage *s);

/* ---------------------------------------------------------------------------------------------
 * Policy: which globals a pickle may reference. The default is torch 2.6's weights-only allowlist.
 * "strict" allows only what torch.save emits for tensors, state dicts and plain containers.
 * ptc_policy_allow_global adds one exact "module.name" (torch's add_safe_globals); a reference to it
 * then becomes a PTC_VALUE_GLOBAL and calling it (REDUCE / NEWOBJ) builds a PTC_VALUE_OBJECT holding
 * the arguments, to which BUILD attaches the state. Modules sys, os, posix and nt can never be allowed.
 *
 * A policy is borrowed, not copied, by ptc_ckpt_open* and ptc_verify*: it must outlive every
 * checkpoint opened with it. Once made and filled it is only read: any number of threads may open
 * checkpoints with the same policy at once, as long as none calls ptc_policy_allow_global on it
 * meanwhile.
 */
typedef struct ptc_policy ptc_policy;
typedef enum ptc_policy_base { PTC_POLICY_DEFAULT, PTC_POLICY_STRICT } ptc_policy_base;

/* *out receives a new policy (free it with ptc_policy_free). PTC_EINVAL when out is NULL or base
 * is not one of the two; PTC_ENOMEM. */
PTC_API int ptc_policy_new(ptc_policy **out, ptc_policy_base base, ptc_error *err);
PTC_API void ptc_policy_free(ptc_policy *p); /* accepts NULL */
/* Allows one more global, "module.name" (copied). PTC_EINVAL when p or the name is NULL, the
 * name is not of the form module.name, its module part is 256 bytes or more, or the module can
 * never be allowed (sys, os, posix, nt); PTC_ENOMEM. */
PTC_API int ptc_policy_allow_global(ptc_policy *p, const char *module_dot_name, ptc_error *err);
/* 1 if the policy allows "module.name" (after torch's Python-2 name mapping); 0 otherwise and when
 * any argument is NULL. Never fails; only reads p. */
PTC_API int ptc_policy_allows(const ptc_policy *p, const char *module, const char *name);

/* ---------------------------------------------------------------------------------------------
 * Checkpoints.
 */
typedef struct ptc_ckpt ptc_ckpt;

typedef enum ptc_format { PTC_FORMAT_ZIP, PTC_FORMAT_LEGACY, PTC_FORMAT_SAFETENSORS } ptc_format;

enum {
    PTC_OPEN_VERIFY_CRC = 1u << 0, /* check the CRC-32 of every record (reads every byte) */
    PTC_OPEN_COPY = 1u << 1,       /* copy storages to the heap instead of using the mapping */
    PTC_OPEN_SALVAGE = 1u << 2     /* read globals outside the policy symbolically ("Salvage") */
};

typedef struct ptc_open_params {
    size_t size;              /* sizeof(ptc_open_params), set by ptc_open_params_default */
    const ptc_policy *policy; /* NULL: the default policy; borrowed: must outlive the checkpoint */
    const ptc_limits *limits; /* NULL: ptc_limits_default(); copied */
    unsigned flags;           /* PTC_OPEN_* */
} ptc_open_params;

/* Fills *p with the defaults (size included); p must not be NULL. Never fails; any thread. */
PTC_API void ptc_open_params_default(ptc_open_params *p);

/* The three ways to open a checkpoint. *out receives the checkpoint (close it with
 * ptc_ckpt_close), or NULL on failure. params NULL means ptc_open_params_default's; the struct
 * itself is read during the call only. Errors: PTC_EINVAL (out NULL, path / read NULL, buf NULL
 * with len > 0, a params size that is 0 or larger than this library's); PTC_EIO (the file cannot
 * be opened, mapped or read, or read returned an error); PTC_ENOTZIP (neither a zip checkpoint,
 * a legacy stream nor safetensors; the message says what it looks like); PTC_EFORMAT, PTC_EUNSAFE,
 * PTC_ELIMIT, PTC_EUNSUPPORTED, PTC_ECRC (with PTC_OPEN_VERIFY_CRC), PTC_ERANGE: the file, with
 * the member and offset in err; PTC_ENOMEM. Any number of threads may open checkpoints at once,
 * with the same policy too.
 *
 * ptc_ckpt_open opens a file by path. The file is mapped; stored records are used in place (the
 * file must not be truncated while the checkpoint is open). */
PTC_API int ptc_ckpt_open(ptc_ckpt **out, const char *path, const ptc_open_params *params,
                          ptc_error *err);
/* ptc_ckpt_open_memory: a checkpoint held in memory. buf is borrowed and must outlive the
 * checkpoint; it is never written. */
PTC_API int ptc_ckpt_open_memory(ptc_ckpt **out, const void *buf, size_t len,
                                 const ptc_open_params *params, ptc_error *err);
/* ptc_ckpt_open_callback: through a positional read callback: read(ctx, offset, buf, len)
 * returns the number of bytes read (short only at the end) or a negative value on error. size is
 * the total size. Records are read into memory that ptc owns; read and ctx must stay valid until
 * ptc_ckpt_close, and read is called from the thread that calls into the checkpoint. */
typedef int64_t (*ptc_read_fn)(void *ctx, uint64_t offset, void *buf, size_t len);
PTC_API int ptc_ckpt_open_callback(ptc_ckpt **out, ptc_read_fn read, void *ctx, uint64_t size,
                                   const ptc_open_params *params, ptc_error *err);
/* Frees the checkpoint and everything borrowed from it (values, tensors, storages, names);
 * accepts NULL. No other thread may be using the checkpoint. */
PTC_API void ptc_ckpt_close(ptc_ckpt *c);

/* Getters on an open checkpoint: they cannot fail, only read (any number of threads at once), and
 * what they return is borrowed and lives until ptc_ckpt_close. ptc_ckpt_root, _nstorages,
 * _storage, _nrecords, _record_name, _record_size, _file_size and _opcodes accept c NULL (NULL or
 * 0); ptc_ckpt_format, _prefix and _byteorder need c. Indices out of range give NULL or 0. */
PTC_API const ptc_value *ptc_ckpt_root(const ptc_ckpt *c);
PTC_API ptc_format ptc_ckpt_format(const ptc_ckpt *c);
PTC_API const char *ptc_ckpt_prefix(const ptc_ckpt *c);    /* zip: the archive prefix; legacy: "" */
PTC_API const char *ptc_ckpt_byteorder(const ptc_ckpt *c); /* "little" or "big" (static) */
PTC_API size_t ptc_ckpt_nstorages(const ptc_ckpt *c);
PTC_API const ptc_storage *ptc_ckpt_storage(const ptc_ckpt *c, size_t i);
/* Zip checkpoints: the records in central-directory order (name without prefix, size); other
 * formats have none (0). */
PTC_API size_t ptc_ckpt_nrecords(const ptc_ckpt *c);
PTC_API const char *ptc_ckpt_record_name(const ptc_ckpt *c, size_t i);
PTC_API uint64_t ptc_ckpt_record_size(const ptc_ckpt *c, size_t i);

/* Size of the file a checkpoint was read from (bytes) and the number of pickle opcodes its
 * pickles executed (for safetensors: the size of its JSON header). */
PTC_API uint64_t ptc_ckpt_file_size(const ptc_ckpt *c);
PTC_API uint64_t ptc_ckpt_opcodes(const ptc_ckpt *c);

/* ---- Salvage -----------------------------------------------------------------------------------
 * Opened with PTC_OPEN_SALVAGE, a checkpoint whose pickle names globals outside the policy (a
 * whole module saved with torch.save(model), a custom class, a payload) is read symbolically
 * instead of refused: such a global becomes a symbolic PTC_VALUE_GLOBAL that holds its module and
 * name and nothing else (ptc never imports, looks up or calls anything the file names); calling
 * it (REDUCE, NEWOBJ) builds a symbolic PTC_VALUE_OBJECT that holds the callable and the
 * arguments, and BUILD attaches the state to it. Allowed globals keep their meaning: tensors,
 * storages, OrderedDict, sets and the rest are real. numpy arrays (numpy.core.multiarray.
 * _reconstruct or numpy._core.multiarray._reconstruct of numpy.ndarray, with a numpy.dtype and
 * the raw bytes as BUILD state) and numpy scalars (multiarray.scalar(dtype, bytes)) become tensors
 * of their dtype and shape: bool, int8 to int64, uint8 to uint64, float16/32/64, complex64/128,
 * either byte order, C or Fortran order. A legacy stream's module classes (persistent ids
 * ('module', cls, file, source)) are their classes, as torch reads them. Every limit of a strict
 * load holds (memo, depth, expansion, sizes); opcodes outside the weights-only subset are still
 * refused. Salvage changes what the reader refuses, not what the file is: ptc_verify still calls
 * such a file unsafe.
 *
 * How a symbolic value behaves: a symbolic object is hashable by identity (a dict key or set item
 * equal only to itself, as Python hashes an instance); a second BUILD on one applies as Python's
 * default BUILD and nn.Module.__setstate__ do (inst.__dict__.update(state), slots set likewise):
 * the object's state becomes a new dict, the first's pairs updated by the second's, or a (dict,
 * slots) pair; states that are not dicts or such pairs are refused (PTC_EFORMAT), since what the
 * class would make of them is unknown; calling an object (REDUCE of getattr(...)'s result) makes another symbolic
 * object whose callable is that object; SETITEM(S) and APPEND(S) on one fill its items
 * (ptc_object_items). A numpy array whose BUILD state is malformed, of an
 * object or structured dtype, or of a dtype ptc has no tensor type for, stays a symbolic object,
 * and ptc_object_note says why. A tensor of a subclass outside the policy
 * (torch._tensor._rebuild_from_type_v2(func, Sub, args, state)) is what func(*args) makes, a
 * plain tensor or a Parameter; the subclass is in the symbol table and its Python state dropped.
 * The arrays' bytes are copied into storages the checkpoint owns, keyed "numpy.0", "numpy.1", ...
 * (no file key has a '.'), charged to max_heap_bytes like every copy. ptc_save refuses a tree
 * that holds a symbolic value (PTC_EINVAL): the file's globals are never written back.
 *
 * Cycles. Python objects may hold themselves (an OmegaConf node's _parent points to the node that
 * holds it, an object's state to the object): the pickle memo hands an object out after its
 * REDUCE / NEWOBJ and before its BUILD. A strict load refuses a cycle (PTC_EFORMAT); salvage cuts
 * it. The finished tree is walked depth-first from the root in its order (sequence items; a
 * dict's keys and values in turn, then its attributes; an object's args, state, items, then its
 * callable) and each edge that leads to a value on the walk's own path is replaced by a
 * placeholder: a symbolic PTC_VALUE_GLOBAL (ptc_value_is_symbolic 1, ptc_value_is_back_reference
 * 1) whose ptc_value_global_name is "<back-reference to an enclosing CLASS object>" (CLASS the
 * enclosing object's, as ptc_value_global_name gives it, cut after 200 bytes with "...") or
 * "<back-reference to an enclosing list>" (the kind of a container). It has no children and
 * never points into the tree, so every walk (ptc_walk, ptc_ckpt_json, ptc inspect, diff,
 * convert, ptc_salvage_state_dict) terminates, and depth and expansion limits are checked on the
 * tree after the cuts. One placeholder per value pointed back to, shared by every edge that led
 * to it; hashable by identity (equal only to itself). The edges cut are the back edges of that
 * walk, which depends on the tree alone: the same file always gives the same tree. A cut edge
 * inside a value the memo shares is cut for every path that reaches the value; the value it led
 * to still encloses it on each of them (it reaches it). Any edge may be cut: an object's args,
 * state, items or callable (ptc_value_global_name of an object whose callable was cut still
 * names its class), a dict key (the dict is re-indexed) or a dict's attributes.
 *
 * The symbolic globals met, one entry per distinct "module.name" in order of first reference, at
 * most PTC_SYMBOLS_MAX of them: ptc_ckpt_nsymbols (0 for c NULL or a checkpoint opened without
 * the flag) and ptc_ckpt_symbol (NULL out of range); ptc_ckpt_symbols_dropped counts the GLOBAL
 * opcodes that named a global the full table had no room for (0 for NULL). Borrowed from c,
 * until ptc_ckpt_close; never fail; only read (any thread). */
#define PTC_SYMBOLS_MAX 4096
typedef struct ptc_symbol {
    const char *global; /* "module.name" after torch's Python-2 mapping, escaped */
    const char *member; /* the pickle's record ("data.pkl"; "" for a legacy stream), escaped */
    int64_t offset;     /* of the first GLOBAL opcode naming it, in the member */
    uint64_t refs;      /* GLOBAL opcodes that named it */
    uint64_t calls;     /* objects built by calling it (REDUCE or NEWOBJ) */
} ptc_symbol;
PTC_API size_t ptc_ckpt_nsymbols(const ptc_ckpt *c);
PTC_API const ptc_symbol *ptc_ckpt_symbol(const ptc_ckpt *c, size_t i);
PTC_API uint64_t ptc_ckpt_symbols_dropped(const ptc_ckpt *c);
/* 1 for a symbolic global or object (read through PTC_OPEN_SALVAGE), 0 otherwise and for NULL;
 * a numpy array rebuilt as a tensor is no longer symbolic. */
PTC_API int ptc_value_is_symbolic(const ptc_value *v);
/* 1 for the placeholder salvage put where it cut a cycle (a symbolic global, see "Cycles"
 * above), 0 otherwise and for NULL. Only reads: any thread. */
PTC_API int ptc_value_is_back_reference(const ptc_value *v);
/* The value an object was built by calling (a global, or, read symbolically, any value the pickle
 * called: then an object, whose own callable leads on, always ending at a global); NULL for
 * another kind and for NULL. Borrowed like v. ptc_value_global_name of an object is that of the
 * global its chain of callables ends at (raw: escape it before printing). Both only read: any
 * thread. */
PTC_API const ptc_value *ptc_object_callable(const ptc_value *v);
/* Read symbolically, the items a pickle gave an object of a dict or list subclass (a
 * collections.defaultdict, a custom list): SETITEM(S) make a dict, APPEND(S) a list, in the
 * pickle's order (one object takes one kind or the file is refused). NULL when it got none, for
 * another kind and for NULL. Borrowed like v; only reads (any thread). */
PTC_API const ptc_value *ptc_object_items(const ptc_value *v);
/* Read symbolically, why salvage left an object symbolic where it knows one reason: a numpy
 * array or scalar it could not rebuild as a tensor ("its data holds 24 bytes; its shape and dtype
 * need 32", "dtype '<U5' has no tensor dtype"); ptc_value_text prints it after the object.
 * Plain text, anything from the file in it escaped.
 * NULL when there is none (any other object), for another kind and for NULL. Lives as long as the
 * checkpoint; only reads (any thread). */
PTC_API const char *ptc_object_note(const ptc_value *v);
/* Modules back to state dicts: ptc_salvage_state_dict, after the documents below. */

/* ---------------------------------------------------------------------------------------------
 * Work budget. A tree accepted at load time may still share nodes (a memo DAG: the same list
 * referenced from two places, twenty levels deep) or hold views far larger than their storage (a
 * stride-0 expand of one element to 2^40), so that walking it, hashing it or writing it out costs
 * far more than the file. Every walk over an accepted tree charges a budget: nodes visited, and
 * bytes read (tensor data hashed, compared or copied) plus bytes written. The default scales with
 * the file: 16 x its opcodes + 1,000,000 nodes, 64 x its size + 1 GiB bytes. An exceeded budget
 * is PTC_ELIMIT with a message that names it.
 */
typedef struct ptc_budget {
    uint64_t max_nodes, nodes; /* values visited, and the most allowed */
    uint64_t max_bytes, bytes; /* bytes read and written, and the most allowed */
    int bytes_explicit;        /* max_bytes was given (--budget), not the default */
} ptc_budget;

/* The default budget for walks over c; max_bytes nonzero replaces the byte budget (ptc's
 * --budget BYTES; bytes_explicit is then set and the exceeded-budget message says so). Nothing
 * charged yet. b NULL does nothing; c NULL gives the budget of an empty file. Never fails. A
 * budget is the caller's plain struct (no allocation, nothing to free); one thread at a time. */
PTC_API void ptc_budget_init(ptc_budget *b, const ptc_ckpt *c, uint64_t max_bytes);
/* Charges nodes and bytes: 0, or PTC_ELIMIT (with the budget named in err) when either total would
 * pass its limit; the charge is then not made. b NULL charges nothing. */
PTC_API int ptc_budget_charge(ptc_budget *b, uint64_t nodes, uint64_t bytes, ptc_error *err);
/* ptc_tensor_sha256, charged first to b (may be NULL: no charge) with numel x element size bytes read,
 * whatever the strides, so that a stride-0 view of 2^40 elements is refused before a byte is
 * hashed: PTC_ELIMIT with a message "hashing tensor PATH (N bytes): ..." (path names the tensor
 * in messages; NULL or "" reads "(root)"). What `ptc inspect --hash` and ptc_ckpt_json do. Same
 * threads rule as ptc_tensor_sha256; b must not be charged from two threads at once. */
PTC_API int ptc_tensor_sha256_charged(const ptc_tensor *t, ptc_budget *b, const char *path,
                                      uint8_t digest[32], ptc_error *err);

/* The longest path a walk builds (1 MiB). A checkpoint's keys are a few dozen bytes, but a memo
 * can repeat one long str key at every level of a nested dict (a 1 MiB key 900 levels deep makes
 * a 900 MB path from a 1 MB file), so a path longer than this is refused (PTC_ELIMIT, "path
 * longer than ...") by ptc_walk_next and by ptc's commands, which build paths by the same rules,
 * before it grows further. */
#define PTC_PATH_MAX ((size_t)1 << 20)

/* Walks every tensor reachable from a value, depth-first in container order, with its path: dict
 * keys as written and list or tuple indices in decimal, joined by '.'. A tensor reached twice is
 * reported twice. The path pointer is valid until the next call. ptc_walk_new: *out receives the
 * walk (ptc_walk_free); root is borrowed and must outlive it (root NULL: an empty walk).
 * PTC_EINVAL when out is NULL; PTC_ENOMEM. A walk is a handle: one thread at a time; several
 * walks may run over the same tree in several threads at once. */
typedef struct ptc_walk ptc_walk;
PTC_API int ptc_walk_new(ptc_walk **out, const ptc_value *root, ptc_error *err);
/* Charges every container and tensor the walk visits, one node each, to b (borrowed; it must
 * outlive the walk), and the length of every path it reports to b's bytes, as bytes written (a
 * caller prints or copies each path: one tensor shared under 20,000 keys of a 1 MiB path is 20 GB
 * of paths); a walk without a budget is bounded only by the load-time tree check and
 * PTC_PATH_MAX. */
PTC_API void ptc_walk_set_budget(ptc_walk *w, ptc_budget *b); /* w NULL: does nothing */
/* 1 and the next tensor (path and tensor borrowed: the path until the next call, the tensor as
 * long as its checkpoint), 0 at the end, negative on error: PTC_ELIMIT (the budget, PTC_PATH_MAX),
 * PTC_ENOMEM; PTC_EINVAL when w is NULL or when ptc_walk_next_value already started this walk
 * (a walk is driven by one of the two). ptc_walk_error says why; after an error the walk is
 * over. */
PTC_API int ptc_walk_next(ptc_walk *w, const char **path, const ptc_tensor **t);
/* The last failure; borrowed, until ptc_walk_free; NULL for w NULL. */
PTC_API const ptc_error *ptc_walk_error(const ptc_walk *w);
PTC_API void ptc_walk_free(ptc_walk *w); /* accepts NULL */

/* A state dict entry by key ("conv1.weight"); follows nested dicts when the key is not found whole.
 * NULL if absent, not a tensor, or root or key is NULL. Borrowed from root's checkpoint; only
 * reads (any thread); never fails otherwise. */
PTC_API const ptc_tensor *ptc_state_dict_get(const ptc_value *root, const char *key);

/* ---------------------------------------------------------------------------------------------
 * Building values to write. A document owns the nodes and the storages made through it; values
 * borrowed from an open checkpoint may be placed in a document's containers as they are (the
 * checkpoint must then stay open until the document is saved). Constructors return NULL when out
 * of memory or given invalid arguments; ptc_doc_error then holds the reason (PTC_ENOMEM or
 * PTC_EINVAL). Every function here accepts d NULL and then returns NULL (or PTC_EINVAL) without
 * doing anything, so that a chain of constructors needs one check at the end; a NULL argument
 * passed where a value is needed is PTC_EINVAL. What a document makes lives until ptc_doc_free.
 * A document is a handle: one thread at a time (distinct documents in distinct threads).
 */
typedef struct ptc_doc ptc_doc;

/* *out receives an empty document (ptc_doc_free). PTC_EINVAL when out is NULL; PTC_ENOMEM. */
PTC_API int ptc_doc_new(ptc_doc **out, ptc_error *err);
PTC_API void ptc_doc_free(ptc_doc *d); /* accepts NULL; frees every node and owned storage */
/* The last failure; borrowed, until ptc_doc_free; NULL for d NULL. */
PTC_API const ptc_error *ptc_doc_error(const ptc_doc *d);

PTC_API ptc_value *ptc_doc_none(ptc_doc *d);
PTC_API ptc_value *ptc_doc_bool(ptc_doc *d, int b);
PTC_API ptc_value *ptc_doc_int(ptc_doc *d, int64_t i);
/* Any int, as two's-complement little-endian bytes (LONG1's form). */
PTC_API ptc_value *ptc_doc_int_bytes(ptc_doc *d, const uint8_t *bytes, size_t len);
PTC_API ptc_value *ptc_doc_float(ptc_doc *d, double f);
PTC_API ptc_value *ptc_doc_complex(ptc_doc *d, double re, double im);
/* str: UTF-8 (checked); len (size_t)-1 means strlen(s). */
PTC_API ptc_value *ptc_doc_str(ptc_doc *d, const char *s, size_t len);
PTC_API ptc_value *ptc_doc_bytes(ptc_doc *d, const void *b, size_t len);
PTC_API ptc_value *ptc_doc_dtype(ptc_doc *d, ptc_dtype dt);
PTC_API ptc_value *ptc_doc_device(ptc_doc *d, const char *type, int64_t index /* -1: none */);
/* Empty containers; kind is PTC_VALUE_TUPLE, PTC_VALUE_LIST, PTC_VALUE_SET or PTC_VALUE_SIZE. */
PTC_API ptc_value *ptc_doc_seq(ptc_doc *d, ptc_value_kind kind);
/* An empty dict; ordered: collections.OrderedDict (what state_dict() returns) rather than dict. */
PTC_API ptc_value *ptc_doc_dict(ptc_doc *d, int ordered);
/* Appends item to a sequence this document made: 0; PTC_EINVAL (d, seq or item NULL, seq not a
 * sequence); PTC_ENOMEM. item is borrowed (a node of this document or of an open
 * checkpoint). */
PTC_API int ptc_doc_push(ptc_doc *d, ptc_value *seq, const ptc_value *item);
/* dict[key] = val, Python semantics (an equal key keeps its place and takes the new value). 0;
 * PTC_EINVAL (a NULL argument, dict not a dict, a key Python could not hash: a list, a dict);
 * PTC_ENOMEM. key and val are borrowed as push's item. */
PTC_API int ptc_doc_set(ptc_doc *d, ptc_value *dict, const ptc_value *key, const ptc_value *val);
/* Attributes of an OrderedDict (a state dict's {'_metadata': ...}); attrs must be a dict of str.
 * 0; PTC_EINVAL (a NULL argument, dict not an OrderedDict, attrs not a dict of str). */
PTC_API int ptc_doc_set_attrs(ptc_doc *d, ptc_value *dict, const ptc_value *attrs);

/* A storage of nbytes bytes of dtype dt. data NULL and copy nonzero: zero-filled memory the document owns, to be
 * filled through ptc_storage_mutable; copy nonzero: data is copied; copy zero: data is borrowed and
 * must outlive the save. location NULL means "cpu". */
PTC_API ptc_storage *ptc_doc_storage(ptc_doc *d, ptc_dtype dt, int64_t nbytes, const void *data,
                                     int copy, const char *location);
/* Writable data of a storage the document allocated or copied; NULL for borrowed ones. */
PTC_API void *ptc_storage_mutable(ptc_storage *s);
/* A tensor viewing a storage (of this document or of an open checkpoint); the view is checked to
 * lie inside the storage. stride NULL means contiguous. */
PTC_API ptc_value *ptc_doc_tensor(ptc_doc *d, const ptc_storage *s, ptc_dtype dt, int ndim,
                                  const int64_t *shape, const int64_t *stride, int64_t offset,
                                  int requires_grad);
/* The same view as tensor (a PTC_VALUE_TENSOR), as an nn.Parameter with the given requires_grad
 * (torch.save writes it through torch._utils._rebuild_parameter). */
PTC_API ptc_value *ptc_doc_parameter(ptc_doc *d, const ptc_value *tensor, int requires_grad);
/* A new contiguous tensor with t's elements converted to dtype dt (floating and integer dtypes;
 * float to float16/bfloat16 rounds to nearest even exactly as torch's Tensor.to does, NaN and
 * infinities included). dt equal to t's dtype makes a contiguous copy. A Parameter stays one. */
PTC_API ptc_value *ptc_doc_cast(ptc_doc *d, const ptc_tensor *t, ptc_dtype dt);

/* ---- Salvage: modules back to state dicts (the reader's side is under "Salvage" above) ----
 * A module is recognised by its structure, never by its class name:
 * an object (symbolic, or allowed by a policy) whose BUILD state is a dict holding the dicts
 * _parameters, _buffers and _modules, as every pickled nn.Module's __dict__ does.
 * ptc_salvage_is_module: 1 for such a value, 0 otherwise and for NULL; only reads (any thread). */
PTC_API int ptc_salvage_is_module(const ptc_value *v);
/* The state dict module.state_dict() (torch 2.6) gives for the module that path names under
 * root, built in document d as an OrderedDict with no _metadata: for each module its parameters
 * in _parameters order, then its buffers except those in _non_persistent_buffers_set, None
 * entries skipped, then each child of _modules (None skipped) under "name." in order; a module
 * reached twice is listed twice under both names, as state_dict() does. Values are detached as
 * state_dict() detaches them: plain tensors (requires_grad false, no nn.Parameter) with the same
 * view of the same storage, so tied weights stay shared when saved. What a pickle cannot carry is
 * absent: _metadata versions (class attributes), get_extra_state() and state-dict hooks (code).
 *
 * path: a dotted path through dict keys and the _modules names of modules ("model", "ema",
 * "model.module"; a key may hold dots: every reading is tried, the whole rest as one key first,
 * and a path two readings of which reach a module or state dict, root['a.b']['c'] and
 * root['a']['b.c'] say, is refused as ambiguous, naming both; the search stops at the second
 * and after 4096 lookups); "" is root itself. NULL chooses: root when it is a module; else the
 * root dict's "model" when it is a module; else the first module among the root dict's values
 * (str keys), in order; else the root dict itself when it is a state dict already (str keys,
 * every value a tensor); else the first state dict among the root dict's values (a Lightning
 * checkpoint's "state_dict", {"model_state": ...}). When nothing is found the message names a few
 * entries to try with a path. A chosen state dict already is given back as it is (*out is that
 * borrowed node, its _metadata kept) unless its attributes hold a symbolic value (no writer
 * writes one): then *out is a copy in d without _metadata. A module gives a new dict of d.
 *
 * *out: the state dict; its nodes belong to d (until ptc_doc_free) and its tensors view storages
 * of root's checkpoint, which must stay open until d is saved. *chosen (may be NULL): the path
 * taken (the key's raw text, "" for the root: escape it before printing; a key holding a NUL byte
 * is cut there: ptc_salvage_pick gives its length), in d's memory until ptc_doc_free. budget (may
 * be NULL: ptc_budget_init(NULL)'s default for this call) is charged one node per module, entry
 * and path lookup and each key's length as bytes written: a DAG of modules sharing children
 * cannot make the walk run for ever. Module nesting is capped at 256 levels, a path at 257
 * segments, a key at PTC_PATH_MAX, and the text of all keys together at 16 bytes per node of the
 * budget's max_nodes + 16 MiB (a DAG of modules under long names multiplies key text far past
 * the file's size; resnet18's 122 keys are 3 KB).
 *
 * Returns 0. PTC_EINVAL: d, root or out NULL, a path of more than 257 segments, an ambiguous
 * path. PTC_ENOTFOUND: path names nothing, or names something neither a module nor a state dict;
 * with path NULL, no module and no state dict where the defaults look. PTC_EUNSUPPORTED: a
 * parameter or buffer that is not a tensor, a child in _modules that is not a module (a payload
 * object, say); the message names its key. PTC_EFORMAT: a non-str key in _parameters, _buffers
 * or _modules. PTC_ELIMIT: the budget, the nesting, key, key text or path lookup cap. PTC_ENOMEM.
 * err (may be NULL) says why; on failure *out and *chosen are NULL and d may hold unreachable
 * nodes. Reads root only; uses d and budget: one thread per document and budget, several
 * threads on one tree at once. */
PTC_API int ptc_salvage_state_dict(ptc_doc *d, const ptc_value *root, const char *path,
                                   ptc_budget *budget, const ptc_value **out, const char **chosen,
                                   ptc_error *err);
/* What ptc_salvage_state_dict takes for path (the same rules, the same errors but those of the
 * walk), without building the state dict: *pick the module or state dict (borrowed from root),
 * *name its path as a str of d (ptc_value_str gives its length: a root key may hold NUL bytes;
 * "" for the root), until ptc_doc_free. The class of a module is ptc_value_global_name(*pick).
 * budget may be NULL (no charge). Returns 0, or the codes above (PTC_EINVAL also for d, root,
 * pick or name NULL); on failure *pick and *name are NULL. Threads as above. */
PTC_API int ptc_salvage_pick(ptc_doc *d, const ptc_value *root, const char *path,
                             ptc_budget *budget, const ptc_value **pick, const ptc_value **name,
                             ptc_error *err);

/* ---------------------------------------------------------------------------------------------
 * Saving. ptc_save writes any value tree ptc can read, in the container torch 2.6 writes (record
 * order, archive prefix from the file stem, 64-byte aligned records, data descriptors, zip64 end
 * records) with the pickle torch's pickler would write for it; or as safetensors (a flat dict of
 * str to tensor). Saving is atomic: the bytes go to a temporary file in the same folder, which is
 * flushed to disk and renamed over the final name; on any failure the previous file under that
 * name is untouched and no temporary file is left behind. The temporary file has no name at all
 * (O_TMPFILE, linked at the end) where the file system allows, so that even a SIGKILL leaves
 * nothing; elsewhere it is ".<name>.ptc-XXXXXX", which ptc_save_remove_temporaries unlinks.
 */
typedef enum ptc_save_format {
    PTC_SAVE_AUTO, /* from the extension: .safetensors, anything else torch's zip */
    PTC_SAVE_PTH,  /* torch.save's zip format */
    PTC_SAVE_SAFETENSORS
} ptc_save_format;

typedef struct ptc_save_params {
    size_t size; /* sizeof(ptc_save_params), set by ptc_save_params_default */
    ptc_save_format format;
    const char *archive_name; /* zip prefix; NULL: the file name without its last extension */
    int serialization_id;     /* write .data/serialization_id as torch >= 2.1 does (default 1) */
    /* safetensors: dict of str to str for "__metadata__"; NULL: the root's own "__metadata__"
     * attribute when it has one (a dict read from a safetensors file), else none. */
    const ptc_value *metadata;
    /* Called now and then with bytes written so far and the total; may be NULL. */
    void (*progress)(void *ctx, uint64_t done, uint64_t total);
    void *progress_ctx;
    /* pth: the location written for every storage ("cpu", "meta", "mps", "cuda[:N]", "xpu[:N]":
     * those torch.load restores by itself), as torch.load's map_location moves them when
     * reading; NULL keeps each storage's own (ptc_storage_location). */
    const char *map_location;
    /* Charged, before anything is written, with the bytes of tensor data the file will hold
     * (safetensors: every tensor contiguous, numel x element size; pth: every storage once, as
     * it is) and one node per value written; an exceeded budget is PTC_ELIMIT and no file.
     * Borrowed; NULL: no budget. */
    ptc_budget *budget;
} ptc_save_params;

/* Fills *p with the defaults (size included); p must not be NULL. Never fails; any thread. */
PTC_API void ptc_save_params_default(ptc_save_params *p);
/* Writes root to path. params NULL: the defaults. 0; PTC_EINVAL (root or path NULL or empty, a
 * params size that is 0 or larger than this library's, an invalid map_location, a tree the format
 * cannot hold: safetensors needs a dict of str to tensors); PTC_EIO (creating, writing, syncing
 * or renaming the file failed: the previous file is untouched); PTC_ELIMIT (the budget);
 * PTC_EUNSUPPORTED (a dtype safetensors cannot hold); PTC_ENOMEM. root, the checkpoints it
 * borrows from and params are read during the call only. Several threads may save at once, to
 * distinct paths, even trees that share checkpoint values (saving only reads them); at most 16
 * saves in progress at once are listed for ptc_save_remove_temporaries. */
PTC_API int ptc_save(const ptc_value *root, const char *path, const ptc_save_params *params,
                     ptc_error *err);
/* Unlinks the named temporary files of the saves in progress in this process (none exist where
 * the file system has O_TMPFILE). Async-signal-safe: for a SIGINT/SIGTERM handler, which then
 * restores the default action and re-raises the signal; those saves cannot complete after it.
 * Never fails (errno is preserved); any thread or signal handler, at any time. */
PTC_API void ptc_save_remove_temporaries(void);

/* ---------------------------------------------------------------------------------------------
 * Verifying untrusted files. ptc_verify never executes anything: it runs the same load as
 * ptc_ckpt_open (the policy, the limits, every CRC checked) and, independently, a static scan of
 * every pickle the bytes hold under every reading of the container: data.pkl and every other
 * member, pickles after STOP, all legacy pickles, pickles inside members of a broken or ambiguous
 * zip (found by their local headers) and of tar files. The report gives one verdict, every
 * finding with its member, offset and escaped detail, every global referenced by any pickle, and
 * a prediction of what torch 2.6's torch.load(weights_only=True) does with the file.
 *
 * Verdicts: PTC_VERDICT_UNSAFE when anything would reach a callable, class or loader outside the
 * policy (a disallowed global, an opcode that imports or calls, TorchScript, a pickle hidden in
 * another member or after STOP, a payload before a parse error); PTC_VERDICT_MALFORMED when the
 * file is not a well-formed checkpoint under ptc's rules (structure, ambiguity, limits, CRC);
 * PTC_VERDICT_OK when it loads under the policy. Unsafe wins over malformed.
 */
typedef enum ptc_verdict { PTC_VERDICT_OK, PTC_VERDICT_UNSAFE, PTC_VERDICT_MALFORMED } ptc_verdict;
PTC_API const char *ptc_verdict_name(ptc_verdict v); /* "ok", "unsafe", "malformed"; static */

/* What torch 2.6 would do with torch.load(path, weights_only=True): PTC_TORCH_UNKNOWN only where
 * the container is ambiguous and the outcome depends on which member torch's zip reader picks. */
typedef enum ptc_torch_answer {
    PTC_TORCH_LOADS,
    PTC_TORCH_REFUSES,
    PTC_TORCH_UNKNOWN
} ptc_torch_answer;
/* "loads", "refuses", "unknown"; static */
PTC_API const char *ptc_torch_answer_name(ptc_torch_answer a);

typedef struct ptc_finding {
    ptc_verdict verdict; /* PTC_VERDICT_UNSAFE or PTC_VERDICT_MALFORMED */
    int code;            /* PTC_EUNSAFE, PTC_EFORMAT, PTC_ECRC, PTC_ELIMIT ... */
    const char *kind;    /* "global", "opcode", "torchscript", "hidden-pickle", "load", "crc" */
    const char *member;  /* the record or zip member ("" for the file itself), or a zip region:
                          * "<record> [local extra field]", "[central extra field]", "[comment]",
                          * "archive comment" (offsets in that region); escaped */
    int64_t offset;      /* in the member (or the file when member is ""); -1 when none applies */
    const char *detail;  /* printable, every byte from the file escaped */
    int torch_refuses;   /* torch 2.6 refuses the file for this too; false where ptc is stricter */
    int64_t file_offset; /* the same byte's offset in the file: offset for the file itself, the
                          * member's file position + offset for a stored zip record, a tar
                          * member, a zip header region or a legacy part; -1 where the member's
                          * bytes are inflated (no file byte holds them) or offset is -1 */
} ptc_finding;

typedef struct ptc_global_ref {
    const char *member; /* escaped */
    int64_t offset;     /* of the opcode in the member */
    const char *opcode; /* "GLOBAL", "INST", "STACK_GLOBAL", "EXT1" ... */
    const char *global; /* "module.name" after torch's Python-2 mapping, escaped; NULL when the name
                           is computed at run time */
    int allowed;        /* by the policy verified against */
    int torch_allows;   /* by torch 2.6's default weights-only allowlist */
} ptc_global_ref;

typedef struct ptc_verify_params {
    size_t size;              /* sizeof(ptc_verify_params), set by ptc_verify_params_default */
    const ptc_policy *policy; /* NULL: the default policy; used during the call only */
    const ptc_limits *limits; /* NULL: ptc_limits_default(); copied */
} ptc_verify_params;

/* Fills *p with the defaults (size included); p must not be NULL. Never fails; any thread. */
PTC_API void ptc_verify_params_default(ptc_verify_params *p);

typedef struct ptc_report ptc_report;

/* Verify a file by path or in memory (buf borrowed for the call only). Returns 0 with a report
 * whatever the verdict (*out: free it with ptc_report_free); < 0 only when no report could be made
 * (*out is then NULL): the path cannot be opened or read, PTC_EIO; out of memory, PTC_ENOMEM;
 * out or path NULL, buf NULL with len > 0, or a params size that is 0 or larger than this
 * library's, PTC_EINVAL. params NULL: the defaults. Any number of threads may verify at once. */
PTC_API int ptc_verify(ptc_report **out, const char *path, const ptc_verify_params *params,
                       ptc_error *err);
PTC_API int ptc_verify_memory(ptc_report **out, const void *buf, size_t len,
                              const ptc_verify_params *params, ptc_error *err);
PTC_API void ptc_report_free(ptc_report *r); /* accepts NULL */
/* Getters on a report: they cannot fail and only read (any number of threads at once); what they
 * return is borrowed and lives until ptc_report_free. ptc_report_verdict, _format and _torch need
 * r (not NULL); the counts accept NULL (0); the items are NULL for r NULL or i out of range. */
PTC_API ptc_verdict ptc_report_verdict(const ptc_report *r);
/* The container as recognised ("zip", "legacy", "safetensors", "torchscript", "tar", "7z",
 * "unknown"). */
PTC_API const char *ptc_report_format(const ptc_report *r);
PTC_API ptc_torch_answer ptc_report_torch(const ptc_report *r);
PTC_API size_t ptc_report_nfindings(const ptc_report *r);
PTC_API const ptc_finding *ptc_report_finding(const ptc_report *r, size_t i);
PTC_API size_t ptc_report_nglobals(const ptc_report *r);
PTC_API const ptc_global_ref *ptc_report_global(const ptc_report *r, size_t i);
/* Findings and global references beyond the report's caps (4096 each) are counted, not kept. */
PTC_API uint64_t ptc_report_dropped(const ptc_report *r);

/* ---------------------------------------------------------------------------------------------
 * Training torchvision's ResNet-18 (the tutorial "ResNet-18 on CIFAR-10", one process). A run is
 * one call; nothing is printed: events arrive through log (one line each) and progress. The state
 * dict saved loads with torchvision.models.resnet18(num_classes=10).load_state_dict(
 * torch.load(path, weights_only=True)); see ptc-train(1) for every field's meaning.
 */
/* ---- several processes -------------------------------------------------------------------------
 *
 * A communicator is this process's place among the processes of one data-parallel run. kind:
 * "single" (one process), "mpi" (MPI_COMM_WORLD; MPI is initialised here unless the program
 * already did, and finalised by ptc_comm_close only in that case), or NULL / "auto": "mpi" when
 * an MPI launcher (mpirun, srun) started this process, else "single". MPI lives in the module
 * comm-mpi.so (see "modules" below): PTC_ENOTFOUND when MPI is asked for and that module is not
 * installed, PTC_EUNSUPPORTED when it cannot be loaded (libmpi missing, another plugin ABI);
 * PTC_ECOMM when MPI fails to start.
 *
 * Every process of a run calls the same collective functions in the same order. A process that
 * meets an error in ptc_train must end the whole job with ptc_comm_abort (the others would wait
 * for it forever); ptc_comm_abort does not return for "mpi" and returns at once for "single".
 * Only the thread that opened a communicator may use it, and a process opens at most one "mpi"
 * communicator at a time (MPI itself is process-wide). */
typedef struct ptc_comm ptc_comm;

/* *out receives the communicator (ptc_comm_close), NULL on failure. Errors as above, and
 * PTC_EINVAL for out NULL or an unknown kind; PTC_ENOMEM. */
PTC_API int ptc_comm_open(ptc_comm **out, const char *kind, ptc_error *err);
PTC_API int ptc_comm_rank(const ptc_comm *c); /* 0 for NULL; never fails */
PTC_API int ptc_comm_size(const ptc_comm *c); /* 1 for NULL; never fails */
/* "single" or "mpi" (static); "single" for NULL */
PTC_API const char *ptc_comm_kind(const ptc_comm *c);
/* Waits for every process. 0 (at once for "single" or NULL); PTC_ECOMM when MPI fails. */
PTC_API int ptc_comm_barrier(ptc_comm *c, ptc_error *err);
/* Ends the whole job with exit status code ("mpi": does not return); NULL or "single": returns. */
PTC_API void ptc_comm_abort(ptc_comm *c, int code);
PTC_API void ptc_comm_close(ptc_comm *c); /* accepts NULL */

/* ---- modules -----------------------------------------------------------------------------------
 *
 * The backends dnnl and cuda, the communicators mpi and nccl and the PNG/JPEG decoders live in
 * loadable modules (backend-dnnl.so, backend-cuda.so, comm-mpi.so, comm-nccl.so, image-codecs.so)
 * that libptc loads only when a caller asks for one (a backend or communicator of ptc_train,
 * ptc_evaluate, ptc_comm_open; ptc_image_read for the decoders), so that programs which only read
 * checkpoints never load oneDNN, MPI, CUDA, libpng or libjpeg.
 * They are searched in the directories of PTC_PLUGIN_PATH (':'-separated) when it is set, and
 * otherwise in the directory libptc was loaded from, its ptc/ subdirectory, and the directory
 * they are installed in ($(pkglibdir), e.g. /usr/local/lib/ptc).
 *
 * ptc_plugins_list fills out[0..max) with every known module, loading those it finds and asking
 * each whether it can run on this machine (the one function here that loads every module), and
 * returns how many modules are known (7; out may be NULL to ask), or a negative PTC_E* code:
 * PTC_EINVAL when max is negative. A module that is missing or cannot be loaded is not an error:
 * its entry says why. out belongs to the caller; its strings are copies (path, summary, why) or
 * static (kind, name). Any thread (the module table is locked); the modules it loads stay loaded.
 * The search path is read when a module is first loaded (PTC_PLUGIN_PATH: the one place libptc
 * reads the environment for modules).
 * kind is "backend", "comm", "image" or "tool". */
typedef struct ptc_plugin_info {
    const char *kind;  /* "backend", "comm", "image" or "tool" (static) */
    const char *name;  /* "dnnl", "cuda", "mpi", "nccl", "codecs", "tensorboard", "plot" (static) */
    int found;         /* its file exists in the search path */
    int loaded;        /* it loaded and its ABI is this libptc's */
    int can_run;       /* its probe passed: it can run on this machine */
    int experimental;  /* it has not yet run where it is meant to run (the module says so) */
    char path[1024];   /* the file (escaped), or "" when not found */
    char summary[160]; /* the module's one-line description, or "" */
    char why[512];     /* when !loaded or !can_run: why ("no CUDA driver is installed ...") */
} ptc_plugin_info;

PTC_API int ptc_plugins_list(ptc_plugin_info *out, int max, ptc_error *err);

/* The ptc program's own modules, tool-<name>.so: "tensorboard" (the event-file writer of ptc train
 * --tensorboard, with protobuf-c) and "plot" (ptc plot's renderer, with cairo), found and checked
 * as above and loaded on first use, so that only the command that needs protobuf-c or cairo loads
 * it. *ops receives the module's table, whose layout the program and its module share
 * (tools/tensorboard/tb.h, tools/plot/plot.h in ptc's sources; each carries its own version);
 * libptc never calls it. Errors: PTC_EINVAL (name or ops NULL, name empty), PTC_ENOTFOUND (not
 * installed: the message lists where it looked), PTC_EUNSUPPORTED (found but not loadable, as for
 * backends). Any thread. */
PTC_API int ptc_tool_module(const char *name, const void **ops, ptc_error *err);

/* A caller's dataset for ptc_train and ptc_evaluate (ptc_train_params.train_source,
 * test_source): count labelled images, each h x w interleaved 8-bit RGB (HWC: row by row, R, G, B
 * per pixel), so that a C program trains on its own data without writing dataset files.
 *
 * get(ctx, i, hwc_rgb, label, err) writes image i (0 <= i < count) into hwc_rgb (h * w * 3 bytes,
 * the library's buffer, valid during the call only) and its class into *label (0 <= label <
 * the run's classes: ptc_train_params.num_classes, 10 by default), and returns 0, or a negative
 * PTC_E* code (filling err when it can: the message reaches ptc_train's caller, prefixed with the
 * source and the index) to stop the run with that code.
 *
 * When and where get runs: ptc_train and ptc_evaluate read the whole source into memory when
 * they start (the loader's thread and a device backend then work on that copy, as for the
 * built-in datasets), calling get once per index, in order 0, 1, ..., count - 1, on the thread
 * that called ptc_train / ptc_evaluate, never after it returns and never concurrently: get need
 * not be thread-safe, and ctx need only live until the call returns. (Only the first
 * max_samples images are held when ptc_train_params.max_samples is set, but every image of the
 * train source is read for the normalisation statistics.) The images must be 32 x 32 (h and w:
 * the training recipe's RandomCrop(32, padding=4) and the 32 x 32 input; other sizes are
 * refused with PTC_EUNSUPPORTED), count at least 1 and at most 2^22.
 *
 * size must be sizeof(ptc_source) or the size of an older, smaller version (ptc_source_default
 * sets it); the library reads only the first size bytes. */
typedef struct ptc_source {
    size_t size;   /* sizeof(ptc_source) */
    int64_t count; /* images */
    int h, w;      /* every image's height and width: 32, 32 */
    int (*get)(void *ctx, int64_t i, uint8_t *hwc_rgb, int64_t *label, ptc_error *err);
    void *ctx; /* passed to get */
} ptc_source;

/* Zeroes s and sets s->size (h and w 32). s NULL does nothing. Thread safe. */
PTC_API void ptc_source_default(ptc_source *s);

typedef struct ptc_train_params {
    size_t size;         /* sizeof(ptc_train_params), set by ptc_train_params_default */
    const char *dataset; /* "cifar10" or "fashion-mnist" (default) */
    /* NULL: ./data/cifar-10-batches-bin or /usr/share/datasets/fashion-mnist */
    const char *data_dir;
    int64_t max_samples; /* use only the first N images of each split; 0: all */
    const char *arch;    /* "resnet18" (default) or "resnet18-cifar" */
    const char *backend; /* "ref", "dnnl" or "cuda"; NULL or "auto": cuda when its module loads
                             and finds a GPU, else dnnl when its module loads, else ref */
    int threads;         /* 0: the backend's default */
    int device;          /* GPU ordinal; -1 (default): the local rank's (OMPI_COMM_WORLD_LOCAL_RANK,
                             SLURM_LOCALID) or 0 */
    const char *precision; /* "f32" (default, NULL) or "bf16" (torch.autocast's rules, below) */
    int tf32;              /* allow TF32 tensor cores in float32 math (device backends); 0 */
    int deterministic;     /* only algorithms whose results do not depend on scheduling; 0 */
    int epochs;            /* 10 */
    int64_t max_steps;     /* 0: no limit */
    int batch_size;        /* 128 */
    double lr, momentum, dampening, weight_decay; /* 0.01, 0.9, 0, 5e-4 */
    int nesterov;
    const char *schedule; /* "constant" (default), "step:S:G", "cosine", "cosine:W" */
    uint64_t seed;
    int shuffle, augment;                                    /* 1, 1 */
    int eval_every;                                          /* 2; 0: after the last epoch only */
    const char *init, *save, *checkpoint, *resume, *metrics; /* paths or NULL */
    /* Data parallelism (DistributedDataParallel's defaults). comm NULL: one process. With several
     * processes batch_size is per process, rank r trains on DistributedSampler's shard r, the
     * gradients are averaged, and rank 0 alone logs, writes metrics and saves. */
    ptc_comm *comm;
    const char *lr_scaling;   /* "none" (default), "sqrt" or "linear": lr x world^(0, 1/2, 1) */
    double bucket_cap_mb;     /* 25; the first bucket is 1 MiB */
    int no_broadcast_buffers; /* 0: rank 0's BatchNorm buffers go to every rank before each
                                 forward (broadcast_buffers=True) */
    int sync_bn;              /* SyncBatchNorm: training statistics over all ranks' batches */
    void (*log)(void *ctx, const char *line);
    void (*progress)(void *ctx, int epoch, int64_t done, int64_t total, double loss);
    void *ctx;
    /* With checkpoint and several processes: every rank also writes its own training checkpoint,
     * to checkpoint with ".rank<r>" appended (r = 0, 1, ...), for checking that the ranks hold the
     * same parameters and momentum buffers. 0: rank 0 alone writes checkpoint. */
    int checkpoint_all_ranks;
    /* What carries the gradients of several processes: "auto" (default; NULL is the same): nccl
     * for a GPU backend, the host communicator (comm) otherwise; "nccl": the nccl module,
     * bootstrapped over comm (refused with a CPU backend); "host": comm itself (refused with a GPU
     * backend and several processes: its gradients are in device memory). */
    const char *device_comm;
    /* Rank 0 of a GPU backend, every ~2 s while training, when NVML (libnvidia-ml.so.1) is
     * there: the GPU's state as short text for a progress display, "gpu 97% 31.2/139.8 GiB 512 W
     * 61C" (fields the GPU cannot report are left out). NULL: not called. */
    void (*device_status)(void *ctx, const char *text);
    /* The library reads no environment for these (only module search and launcher detection,
     * which the modules section describes): the caller passes what it wants. */
    int dnnl_winograd;           /* 1: the dnnl backend's 3x3 stride-1 convolutions may use Winograd
                          F(4x4, 3x3), faster with rounding a little further from torch's; 0 */
    const char *visible_devices; /* CUDA_VISIBLE_DEVICES's value in this process, which maps the
                                    training GPU to NVML's numbering for the GPU readings
                                    (device_status); NULL: CUDA numbers the GPUs as NVML does */
    /* The caller's own data instead of dataset and data_dir (see ptc_source): train_source for
     * ptc_train (required when either is set; PTC_EINVAL without it), test_source for its
     * evaluations and for ptc_evaluate (NULL: ptc_train evaluates on no images and reports
     * accuracy 0 over 0 images). ptc_evaluate reads train_source too, for the normalisation
     * statistics, unless source_mean and source_std are given. Borrowed: they and their ctx must
     * stay valid until ptc_train / ptc_evaluate returns. Both NULL (default): the dataset named by
     * dataset. */
    const ptc_source *train_source, *test_source;
    /* Classes of a source's labels and of the model's fc (1 to 256); 0 (default): 10. With a
     * built-in dataset only 0 and 10 are accepted (PTC_EINVAL otherwise). */
    int num_classes;
    /* Normalize's constants for a source: mean and standard deviation per channel (R, G, B) of
     * pixels scaled to [0, 1]. All six 0 (default): the train source's own statistics (computed
     * over every pixel of every image, as for Fashion-MNIST). */
    double source_mean[3], source_std[3];
    /* Rank 0: every number the run records, as it records it (the numbers of the metrics file's
     * records, ptc-train(1) "METRICS"): a tag, the step it is recorded at, the value. Called from
     * ptc_train's thread; NULL (default): not called.
     *   every log_every optimizer steps, at the global step (1, 2, ... counted over the run):
     *     "train/loss", "train/accuracy" (0..1; both over the images since the previous record,
     *     rank 0's own batches), "lr" (of the last step), "images_per_sec" (since the previous
     *     record, evaluations and checkpoints left out, times the processes); an epoch's steps
     *     after its last multiple of log_every go into the next epoch's first record;
     *   after each epoch, at its last global step (as SummaryWriter users log everything at the
     *     global step, so that every chart shares one x axis): "epoch/train/loss",
     *     "epoch/train/accuracy", "epoch/lr", "epoch/images_per_sec"; after an evaluation, at the
     *     same step: "test/loss", "test/accuracy";
     *   with a GPU monitor (device_status), at the global step of each reading:
     *     "gpu/utilization" (percent), "gpu/memory_used_gib".
     *   Each value is the number as the metrics file prints it (9 significant digits). */
    void (*scalar)(void *ctx, const char *tag, int64_t step, double value);
    /* The per-step records above (scalar, and "step" lines in the metrics file) every log_every
     * optimizer steps; 0 (default): none. */
    int64_t log_every;
} ptc_train_params;

typedef struct ptc_train_result {
    int epochs_done;
    int64_t steps;
    double last_loss;
    double test_accuracy, test_loss; /* of the last evaluation; -1 when none ran */
    double train_images_per_sec;     /* after this run's first 10 steps (warm-up, also when
                                        resumed), evaluations and saves left out; all
                                        processes together */
    double eval_images_per_sec;
    int world;                   /* processes */
    double allreduce_ms;         /* one step's all-reduces run alone, nothing hidden (world > 1) */
    double allreduce_exposed_ms; /* per step: waiting for all-reduces after backward ended */
} ptc_train_result;

/* Fills *p with the defaults listed above (size included); p must not be NULL. Never fails; any
 * thread. */
PTC_API void ptc_train_params_default(ptc_train_params *p);
/* One training run; *res (not NULL) receives its figures. p is read during the call only (its
 * strings, comm and callbacks are used until ptc_train returns; the callbacks are called from the
 * calling thread). Errors: PTC_EINVAL (p or res NULL, a params size that is 0 or larger than this
 * library's, an unknown dataset, arch, backend, precision, schedule or lr_scaling, a value out of
 * range); PTC_ENOTFOUND / PTC_EUNSUPPORTED (the backend's or communicator's module is not
 * installed / cannot run here; bf16 on ref, or on dnnl without AVX512_BF16 / AMX); PTC_EIO (the
 * dataset, init, resume, save, checkpoint or metrics files, a device failure; the directory of
 * save, checkpoint or metrics missing or not writable is refused before training, rank 0; and
 * when a write of the metrics file failed during the run: the failure goes to the log callback
 * as a warning at once, the file is cut back to its last whole record and no more are written,
 * the run goes on and saves its model, and ptc_train then returns PTC_EIO with *res filled, its
 * message beginning "the metrics file" and saying why it is incomplete); the load errors of
 * init and resume (PTC_EFORMAT ...); PTC_ECOMM (a collective failed: end the job with
 * ptc_comm_abort); PTC_ENOMEM. Several threads may each run ptc_train with its own params and its
 * own (or no) communicator.
 * precision "bf16" follows torch.autocast(dtype=torch.bfloat16): convolutions and the linear layer
 * in bf16 (bf16 copies of inputs and weights, float32 accumulation, bf16 outputs); batchnorm
 * statistics, the loss, master weights, momentum and the saved state dict float32. The cuda
 * backend has it, and dnnl where the processor has AVX512_BF16 or AMX (else PTC_EUNSUPPORTED,
 * naming them); ref refuses it (PTC_EUNSUPPORTED). */
PTC_API int ptc_train(const ptc_train_params *p, ptc_train_result *res, ptc_error *err);
/* Test accuracy and mean cross-entropy of a state dict on p's dataset (dataset, data_dir,
 * max_samples, arch, backend, threads and batch_size are used): *accuracy, *loss and *count (the
 * images evaluated), none of them NULL. weights is a path, opened, read and closed during the
 * call. Errors as ptc_train's, and those of opening and loading weights (PTC_EIO, PTC_EFORMAT,
 * PTC_EINVAL for a state dict that does not fit the model). Threads as ptc_train. */
PTC_API int ptc_evaluate(const ptc_train_params *p, const char *weights, double *accuracy,
                         double *loss, int64_t *count, ptc_error *err);

/* ---------------------------------------------------------------------------------------------
 * Models. A ptc_model is torchvision's ResNet-18 ("resnet18": resnet18(num_classes=N); or
 * "resnet18-cifar": the same with conv1 a 3x3 stride-1 convolution and maxpool an Identity) on a
 * backend, for a C program that runs inference or fine-tunes on its own data. Its state dict has
 * exactly torchvision's keys, order, shapes and dtypes, so that it loads from and into torch with
 * strict keys. Numerics are PyTorch's float32 (docs/numerics.md).
 *
 * Example: classify images with a state dict torch saved.
 *
 *     ptc_model_params mp; ptc_model_params_default(&mp);
 *     ptc_model *m; ptc_ckpt *c; ptc_error err;
 *     if (ptc_model_new(&m, &mp, &err) < 0 || ptc_ckpt_open(&c, "resnet18.pth", NULL, &err) < 0 ||
 *         ptc_model_load(m, ptc_ckpt_root(c), PTC_LOAD_STRICT, &err) < 0)
 *         fprintf(stderr, "%s\n", err.message);
 *     ptc_ckpt_close(c);                      // the model holds copies of the parameters
 *     ptc_model_forward(m, x, n, 32, 32, logits, &err);   // x: [n][3][32][32] normalised
 *
 * A model is one handle: it must not be used from two threads at once; distinct models may be
 * used from distinct threads (each has its own backend instance). Every function below that takes
 * an err accepts err NULL (the code is still returned).
 */
typedef struct ptc_model ptc_model;
typedef struct ptc_sgd ptc_sgd;

typedef struct ptc_model_params {
    size_t size;      /* sizeof(ptc_model_params); set by ptc_model_params_default */
    const char *arch; /* "resnet18" (default) or "resnet18-cifar" */
    int num_classes;  /* 10 */
    /* NULL or "auto": the best available (as ptc_train); "ref", "dnnl", "cuda" */
    const char *backend;
    int threads;           /* 0: the backend's default */
    int device;            /* GPU ordinal; -1: the local rank's or 0 */
    const char *precision; /* NULL or "f32"; "bf16" as ptc_train_params.precision (cuda, dnnl) */
    uint64_t seed;         /* of the initialisation, as ptc train's --seed: torch's init
                            * distributions, not torch.manual_seed(seed)'s bits */
    float mean[3],
        std[3]; /* ptc_model_classify's normalisation: the CIFAR-10 tutorial's by default */
    int input_h, input_w; /* ptc_model_classify resizes images to this size: 32 x 32 by default */
} ptc_model_params;

/* ptc_model_load's flags. */
enum {
    PTC_LOAD_STRICT = 1u << 0,         /* load_state_dict(strict=True): missing and unexpected
                                           keys are errors */
    PTC_LOAD_STRIP_PREFIX = 1u << 1,   /* remove a leading "module." (DDP) from every key that
                                           has one, as torch's consume_prefix_in_state_dict_if_present */
    PTC_LOAD_SKIP_MISMATCHED = 1u << 2 /* entries whose shape differs from the model's (a new
                                           head) are left as they are instead of being errors */
};

/* Fills p with the defaults above (size included). Never fails; p NULL does nothing. Thread safe. */
PTC_API void ptc_model_params_default(ptc_model_params *p);

/* Makes a model with freshly initialised parameters (PyTorch's initialisation in distribution,
 * drawn from p->seed) on p's backend, chosen as ptc_train chooses it. p NULL: the defaults.
 * *m is set to the model (caller frees with ptc_model_free) or to NULL on failure.
 * Errors: PTC_EINVAL (m NULL; an unknown arch, backend name or precision; num_classes outside
 * [1, 2^20]; a params struct whose size is 0 or larger than this library's; an input size outside
 * [32, 65536]; a std that is not positive or a mean or std that is not finite);
 * PTC_ENOTFOUND / PTC_EUNSUPPORTED (the backend's module is not installed / cannot run here, bf16
 * on ref or on a CPU without AVX512_BF16 / AMX); PTC_ENOMEM. Strings of p are copied: they need
 * not outlive the call. Thread safe (distinct models). */
PTC_API int ptc_model_new(ptc_model **m, const ptc_model_params *p, ptc_error *err);
/* Frees the model and its backend instance; m NULL does nothing. */
PTC_API void ptc_model_free(ptc_model *m);

/* The model's settings: a copy of the params it was made with (num_classes as it is now, after
 * ptc_model_reset_head; backend the name of the backend chosen, never NULL or "auto"). The
 * strings are the model's and live until ptc_model_free. PTC_EINVAL when m or p is NULL or p->size
 * is invalid (set p->size, e.g. with ptc_model_params_default, before the call: only that many
 * bytes are written). */
PTC_API int ptc_model_get_params(const ptc_model *m, ptc_model_params *p, ptc_error *err);
/* The number of classes (the rows of fc.weight); 0 for NULL. */
PTC_API int ptc_model_num_classes(const ptc_model *m);
/* "resnet18" or "resnet18-cifar" (static); NULL for NULL. */
PTC_API const char *ptc_model_arch(const ptc_model *m);
/* The backend the model runs on: "ref", "dnnl" or "cuda" (static); NULL for NULL. */
PTC_API const char *ptc_model_backend(const ptc_model *m);

/* Sets the model's parameters and buffers from a state dict (what ptc_ckpt_root gives for a file
 * torch.save(model.state_dict()) wrote), as torch's model.load_state_dict(state_dict, strict)
 * does: a key matches when it names an entry of the model; float tensors of any dtype are
 * converted to float32, integer ones for num_batches_tracked. The values are copied: the
 * checkpoint may be closed afterwards. On failure the model is unchanged (torch leaves the
 * entries it copied before raising; ptc checks everything first).
 * Failures (PTC_EINVAL; err->message holds torch's RuntimeError text, cut to its size; the full
 * text is ptc_model_load_text's): with PTC_LOAD_STRICT, any missing or unexpected key; with or
 * without it, a tensor whose shape differs from the entry's (unless PTC_LOAD_SKIP_MISMATCHED) or
 * a value that is not a tensor. A state dict that is not a dict, or has a key that is not a str:
 * PTC_EINVAL. PTC_ENOMEM. m or state_dict NULL: PTC_EINVAL.
 * Whatever the outcome, the lists of the load (missing, unexpected and skipped keys) are kept by
 * the model for ptc_model_load_nkeys / ptc_model_load_key / ptc_model_load_text. */
PTC_API int ptc_model_load(ptc_model *m, const ptc_value *state_dict, unsigned flags,
                           ptc_error *err);

/* The keys of the latest ptc_model_load, in torch's order. */
typedef enum ptc_load_keys {
    PTC_LOAD_MISSING,    /* entries of the model the state dict lacks (torch's missing_keys) */
    PTC_LOAD_UNEXPECTED, /* keys of the state dict that name no entry (torch's unexpected_keys) */
    PTC_LOAD_MISMATCHED  /* entries whose tensor had another shape (skipped, or the error) */
} ptc_load_keys;
/* How many keys of that kind; 0 for m NULL or before any load. */
PTC_API size_t ptc_model_load_nkeys(const ptc_model *m, ptc_load_keys kind);
/* The i-th key of that kind (as in the file, after PTC_LOAD_STRIP_PREFIX; bytes that are not
 * printable escaped); NULL when out of range. Borrowed: lives until the next ptc_model_load or
 * ptc_model_free. */
PTC_API const char *ptc_model_load_key(const ptc_model *m, ptc_load_keys kind, size_t i);
/* What torch prints for the latest load: "<All keys matched successfully>", the repr of its
 * result "_IncompatibleKeys(missing_keys=[...], unexpected_keys=[...])" (a non-strict load with
 * missing or unexpected keys), or the text of the RuntimeError it raises ("Error(s) in loading
 * state_dict for ResNet:\n\tMissing key(s) in state_dict: ..."), uncut. "" before any load or for
 * m NULL. Borrowed: lives until the next ptc_model_load or ptc_model_free. */
PTC_API const char *ptc_model_load_text(const ptc_model *m);

/* Forward in eval mode (BatchNorm uses its running statistics): x is [n][3][h][w] float32,
 * already normalised, with h, w >= 32 (any size: the network ends with adaptive average pooling);
 * logits receives [n][num_classes] float32. x and logits belong to the caller and are used during
 * the call only. Errors: PTC_EINVAL (m, x or logits NULL, n < 1, h or w < 32, or a size whose
 * activations would exceed 2^31 elements per tensor); PTC_ENOMEM; a backend's error (PTC_EIO for
 * a device failure). Blocks until the logits are on the host. */
PTC_API int ptc_model_forward(ptc_model *m, const float *x, int n, int h, int w, float *logits,
                              ptc_error *err);
/* Interleaved 8-bit RGB images [n][h][w][3] resized to the params' input_h x input_w as
 * torchvision's Resize does on a uint8 tensor (bilinear, antialias; not resized when already that
 * size; ptc_image_resize says exactly how), normalised with the params' mean and std as ToTensor +
 * Normalize do (v / 255, minus mean, divided by std, in float32), then the forward: classes
 * receives the k best classes of each image, best first ([n][k]; ties: the lower class first),
 * probs (may be NULL) their softmax probabilities ([n][k], computed in double from the float32
 * logits). rgb, classes and probs are the caller's, used during the call only; the images go
 * through the network 32 at a time, so memory does not grow with n. Errors: PTC_EINVAL (NULL m,
 * rgb or classes, n < 1, h or w < 1, k < 1 or k > num_classes); PTC_ELIMIT (images of more than
 * 2^28 pixels); PTC_ENOMEM; a backend's error. */
PTC_API int ptc_model_classify(ptc_model *m, const uint8_t *rgb, int n, int h, int w, int k,
                               int *classes, float *probs, ptc_error *err);

/* Replaces fc with a new nn.Linear(512, num_classes) initialised exactly as torch initialises
 * one: the weight and bias are bit-equal to those of
 *     torch.manual_seed(seed); torch.nn.Linear(512, num_classes)
 * (torch's CPU generator, an mt19937 seeded with the low 32 bits of seed, as torch.manual_seed
 * seeds it; kaiming_uniform_(a=sqrt(5)) on the weight, uniform(-1/sqrt(512), 1/sqrt(512)) on the
 * bias). The new head is trainable (not frozen) whatever was frozen before; every other parameter
 * and buffer is unchanged. An optimizer made before continues over the new head with no momentum
 * for it (unlike torch, where an optimizer made before model.fc is replaced keeps the old fc's
 * tensors: make the optimizer after this call to match a torch script). On PTC_EINVAL and
 * PTC_ENOMEM the model is unchanged; a backend's failure to write the new values leaves a head of
 * num_classes rows whose values are undefined. Errors: PTC_EINVAL (m NULL, num_classes < 1 or above 2^20, as ptc_model_new); PTC_ENOMEM; a backend's
 * error. Not thread safe for one model (a model is one handle). */
PTC_API int ptc_model_reset_head(ptc_model *m, int num_classes, uint64_t seed, ptc_error *err);
/* requires_grad off (frozen 1) or back on (0) for every parameter whose name starts with prefix
 * (torchvision's names; "" is all, "layer4" matches "layer4.0.conv1.weight", "fc" the head).
 * Buffers (running statistics, num_batches_tracked) are not parameters and are not affected. A
 * frozen parameter is left entirely alone by ptc_model_train_step: no gradient, no weight decay,
 * no momentum update (its optimizer state, if any, is kept for when it is unfrozen), as torch
 * skips a parameter whose grad is None. As in torch, BatchNorm layers whose parameters are frozen
 * still normalise with batch statistics and update their running statistics in training steps
 * (the model is in training mode; freezing is not eval()). Backward stops below the last
 * trainable parameter, so training the head alone costs about one forward. Errors: PTC_EINVAL (m
 * or prefix NULL); PTC_ENOTFOUND (no parameter's name starts with prefix; nothing changes). Not
 * thread safe for one model. */
PTC_API int ptc_model_freeze(ptc_model *m, const char *prefix, int frozen, ptc_error *err);

/* torch.optim.SGD(model.parameters(), lr, momentum, dampening, weight_decay, nesterov) over m's
 * parameters: each step, for every parameter not frozen at that step, g = grad + weight_decay *
 * p; with momentum, buf = g on the parameter's first step, else buf = momentum * buf + (1 -
 * dampening) * g, and g = buf (or g + momentum * buf with nesterov); p -= lr * g. Frozen
 * parameters are skipped entirely (see ptc_model_freeze).
 * The momentum buffers belong to the optimizer, as in torch: a new optimizer starts without
 * them, two optimizers of one model keep separate ones, and ptc_sgd_free releases them. They live
 * in the model's backend (device memory for cuda), hence the lifetime rule: *opt must be freed
 * before m, and used with m only. *opt is NULL on failure.
 * Errors (torch's refusals, in its words): PTC_EINVAL (opt or m NULL, lr < 0, momentum < 0,
 * weight_decay < 0, a dampening or any value that is NaN, nesterov with momentum <= 0 or
 * dampening != 0); PTC_ENOMEM. Not thread safe with other calls on m. */
PTC_API int ptc_sgd_new(ptc_sgd **opt, ptc_model *m, double lr, double momentum, double dampening,
                        double weight_decay, int nesterov, ptc_error *err);
/* Frees the optimizer and its momentum buffers; before its model is freed. NULL does nothing. */
PTC_API void ptc_sgd_free(ptc_sgd *opt);
/* The learning rate of the following steps (param_groups[0]["lr"] = lr in torch: a schedule).
 * PTC_EINVAL (opt NULL, lr < 0 or NaN). */
PTC_API int ptc_sgd_set_lr(ptc_sgd *opt, double lr, ptc_error *err);
/* One training step, as a torch loop does it: model.train(); loss =
 * F.cross_entropy(model(x), labels) (the mean over the batch); optimizer.zero_grad();
 * loss.backward(); optimizer.step(). x is [n][3][h][w] float32, normalised, h, w >= 32 (any size,
 * as ptc_model_forward); labels [n], each in [0, num_classes). BatchNorm uses batch statistics and
 * updates its running statistics (momentum 0.1, unbiased variance) and num_batches_tracked.
 * PyTorch's float32 numerics, as ptc train's step (docs/numerics.md); the loss is computed in
 * double from the float32 logits. loss (may be NULL) receives the mean cross-entropy before the
 * step. x, labels and loss are the caller's, used during the call only. Blocks until the step is
 * done. Errors: PTC_EINVAL (m, opt, x or labels NULL; opt made for another model; n < 1; h or w
 * < 32 or activations too large; a label outside the classes, checked before anything changes;
 * every parameter frozen); PTC_ENOMEM; a backend's error (then the step may be partly applied).
 * Not thread safe for one model. */
PTC_API int ptc_model_train_step(ptc_model *m, ptc_sgd *opt, const float *x, const int64_t *labels,
                                 int n, int h, int w, double *loss, ptc_error *err);

/* The model's state dict built in doc (an OrderedDict with torchvision's keys, float32 tensors and
 * int64 num_batches_tracked, and nn.Module's _metadata), for ptc_save: torch loads the file
 * strictly into torchvision.models.resnet18(num_classes=N). *root belongs to doc and lives as long
 * as it; the tensors hold copies of the current values. Errors: PTC_EINVAL (NULL m, doc or root);
 * PTC_ENOMEM; a backend's error. */
PTC_API int ptc_model_state_dict(ptc_model *m, ptc_doc *doc, ptc_value **root, ptc_error *err);

/* ---------------------------------------------------------------------------------------------
 * Images, for ptc_model_classify. An image here is interleaved 8-bit RGB, [h][w][3], rows top to
 * bottom. PNG and JPEG decoding is what torchvision.io.decode_image(mode=ImageReadMode.RGB) of
 * torchvision 0.21 gives: grey replicated to three channels, palettes expanded, alpha dropped
 * (not composited), 16-bit samples reduced to their high byte (torchvision's ToDtype(uint8,
 * scale=True) of its uint16 output), JPEG through libjpeg-turbo's defaults (islow IDCT), CMYK as
 * torchvision converts it; no gamma, colour profile or EXIF orientation applied. The decoders
 * (libpng, libjpeg-turbo) live in the module image-codecs.so ("modules" above), loaded by the
 * first decode; without it the decoding functions fail with PTC_ENOTFOUND (not installed) or
 * PTC_EUNSUPPORTED (cannot be loaded), and nothing else here needs it.
 * Every function below may be called from several threads at once.
 */

/* Decodes the PNG or JPEG file at path (told apart by content, not by name) into a new image:
 * *rgb (free it with ptc_image_free; it lives until then), *h, *w. Errors, each message naming
 * the file and the reason: PTC_ENOTFOUND (no such file; or the codec module is not installed),
 * PTC_EIO (cannot be read, not a regular file), PTC_EFORMAT (empty, truncated or corrupt: libpng's
 * or libjpeg's message), PTC_EUNSUPPORTED (neither PNG nor JPEG; a colour space that cannot be
 * converted; the codec module cannot be loaded), PTC_ELIMIT (a file over 1 GiB, an image over
 * 2^28 pixels, or a PNG declaring more pixels than its compressed size can hold: checked before
 * anything is allocated for the pixels; a JPEG whose decoding needs more than 1 GiB of libjpeg's
 * working memory, as a huge progressive one does), PTC_ENOMEM, PTC_EINVAL (an argument NULL).
 * On failure *rgb is NULL. Peak memory: the file, plus 3 bytes per pixel, plus (progressive
 * JPEG) at most 1 GiB. */
PTC_API int ptc_image_read(const char *path, uint8_t **rgb, int *h, int *w, ptc_error *err);
/* The same from size bytes at data (the caller's, read during the call only); name is what
 * messages call the input (NULL: "(image)"). */
PTC_API int ptc_image_decode(const void *data, size_t size, const char *name, uint8_t **rgb, int *h,
                             int *w, ptc_error *err);
/* Frees an image of ptc_image_read / ptc_image_decode; NULL does nothing. */
PTC_API void ptc_image_free(uint8_t *rgb);

/* Resizes src ([h][w][3]) into dst ([oh][ow][3], the caller's) as torchvision 0.21's
 * Resize((oh, ow)) (bilinear, antialias=True) does to a uint8 image tensor on a CPU that is not
 * AVX2-only (where torchvision resamples in float32 and rounds half to even; on an AVX2-only CPU
 * it takes ATen's fixed-point uint8 path, which can differ by one level). The same size copies.
 * Errors: PTC_EINVAL (NULL image, a size < 1), PTC_ELIMIT (more than 2^28 pixels), PTC_ENOMEM. */
PTC_API int ptc_image_resize(const uint8_t *src, int h, int w, uint8_t *dst, int oh, int ow,
                             ptc_error *err);

/* Record index (from 0) of a dataset file as a 32x32 RGB image, into rgb ([32][32][3], the
 * caller's): a CIFAR-10 binary file (3073-byte records: label, R, G, B planes) or an IDX images
 * file, plain or gzip (told apart by content: the IDX magic 0x00000803 or gzip's), whose 28x28
 * grey image is zero-padded by 2 pixels on each side and replicated to three channels exactly as
 * ptc train presents it. *label (may be NULL) receives a CIFAR-10 record's label, -1 for IDX.
 * Only the records up to index are read. Errors: PTC_ERANGE (no such record: the message says
 * how many the file has), PTC_EINVAL (index < 0, NULL path or rgb), and the dataset readers'
 * (PTC_ENOTFOUND, PTC_EIO, PTC_EFORMAT, PTC_ELIMIT, PTC_ENOMEM), each naming the file. */
PTC_API int ptc_image_record(const char *path, int64_t index, uint8_t *rgb, int *label,
                             ptc_error *err);

/* The preprocessing a state dict records, and the model it fits. ptc train records, in the state
 * dict's _metadata (which torch's load_state_dict ignores), the entry "ptc.preprocess": a dict
 * {"dataset": "cifar10" | "fashion-mnist", "mean": [3 floats], "std": [3 floats],
 * "input_size": [32, 32]} (for fashion-mnist also "source_size": [28, 28], "pad": 2 and
 * "channels": "grey replicated to RGB", what ptc_image_record does). This fills p from root (a
 * state dict, or a training checkpoint holding one under "model_state_dict"): num_classes from
 * fc.weight's rows, arch from conv1.weight's shape (7x7: "resnet18", 3x3: "resnet18-cifar"),
 * mean, std, input_h and input_w from the record when there is one (the rest of p is left as it
 * is). *dataset (may be NULL) receives the recorded dataset name, borrowed from root (it lives as
 * long as root), or NULL when nothing is recorded. Errors: PTC_EINVAL (p or root NULL, p->size
 * invalid), PTC_ENOTFOUND (no fc.weight or conv1.weight), PTC_EFORMAT (either is not a tensor of
 * the shape ResNet-18 gives it; a record whose values are not numbers of the right count). */
PTC_API int ptc_model_params_from_state_dict(ptc_model_params *p, const ptc_value *root,
                                             const char **dataset, ptc_error *err);

/* The number of classes a state dict's head has: the rows of its 2-dimensional fc.weight (or
 * DDP's module.fc.weight; in a training checkpoint, under "model_state_dict"), 0 when there is
 * none. A file is untrusted: torch.save keeps an expanded view's shape over its one-element
 * storage, so a 36 KB file can claim a million classes, and building that model takes gigabytes.
 * So a head whose float32 size passes 64 x the bytes its storage holds + 64 MiB is refused
 * (PTC_ELIMIT, naming the classes and bytes): a caller who wants that model anyway gives the
 * number of classes itself. PTC_EINVAL when root is NULL. ptc_model_params_from_state_dict
 * applies the same rule. Any thread; it only reads root. */
PTC_API int64_t ptc_model_classes_of(const ptc_value *root, ptc_error *err);

/* =============================================================================================
 * What ptc's commands print, for embedders (issue 15, section 4): the text of file values, the
 * elements of a tensor as numbers, renaming a state dict's keys and the `ptc verify --json`
 * object. The commands call exactly these, so a C program shows and reports the same bytes.
 * Every function in this block keeps no state: any thread may call any of them at any time, on
 * distinct outputs (inputs borrowed from a checkpoint or a document may be shared between
 * threads as long as nothing frees them meanwhile).
 * ============================================================================================= */

/* ---- text from a file, made safe to show ------------------------------------------------------
 * ptc_escape: printable ASCII and valid UTF-8 pass through; backslash becomes "\\" (unless
 * PTC_ESC_RAW_BACKSLASH); '"' becomes "\"" with PTC_ESC_QUOTE; newline, tab and carriage return
 * become "\n", "\t", "\r"; every other control byte (C0, DEL), every byte of invalid UTF-8 and
 * every byte of a character that acts on a terminal or hides text (C1 controls, soft hyphen,
 * U+061C, zero-width spaces and joiners U+200B..U+200F, U+2028, U+2029, bidi overrides and
 * isolates, U+2060..U+2064, the byte order mark U+FEFF, tags U+E0000..U+E007F) becomes "\xNN".
 * Without PTC_ESC_RAW_BACKSLASH distinct inputs give distinct outputs. src[0..n) is read (src
 * NULL reads nothing); the output is written as snprintf does: at most size - 1 bytes and a NUL
 * into dst (nothing when size is 0; dst may then be NULL), and the full length is returned
 * (never more than 4 * n), so that a caller sizes dst with a first call or allocates 4 * n + 1.
 * Never fails. */
enum {
    PTC_ESC_QUOTE = 1u << 0,        /* also escape '"' (text shown between double quotes) */
    PTC_ESC_RAW_BACKSLASH = 1u << 1 /* leave '\\' alone: for text libptc already escaped */
};
PTC_API size_t ptc_escape(char *dst, size_t size, const void *src, size_t n, unsigned flags);

/* JSON text json[0..n) (valid UTF-8, as a JSON library writes it) with each hidden character
 * listed at ptc_escape replaced by its \uXXXX escape (a surrogate pair past U+FFFF). JSON
 * libraries escape only C0 controls; hidden characters can occur only inside strings, where the
 * escape means the same, so the document parses to the same value and stays readable UTF-8.
 * Output as ptc_escape's (snprintf's rules; the full length returned, at most 3 * n). Never
 * fails. */
PTC_API size_t ptc_json_escape_hidden(char *dst, size_t size, const char *json, size_t n);

/* 1 when s[0..n) is valid UTF-8 (no overlong forms, no surrogates, nothing past U+10FFFF), else
 * 0. s NULL: 1 when n is 0. Never fails. */
PTC_API int ptc_utf8_valid(const void *s, size_t n);

/* The path segment ptc_walk_next writes for a dict key: a str as it is (raw bytes, possibly with
 * NULs and control bytes: escape the whole path before showing it), an int in decimal (past
 * PTC_KEY_INT_MAX bytes "<int of N bytes>"), True/False/None, a float as ptc_float_text writes it
 * ("0.5", "100.0", "1e-05", "nan", "-inf"), torch.<dtype> ("torch.?" for an unknown one), and
 * "<kind>" (ptc_value_kind_name) for anything else; key NULL gives "?". Output as ptc_escape's:
 * snprintf's rules into dst, the full length returned; one call with size 0 costs no copy of a
 * str. Never fails. */
#define PTC_KEY_INT_MAX 256
PTC_API size_t ptc_key_text(const ptc_value *key, char *dst, size_t size);

/* The decimal text of an int value of any length ("-12", "340282366920938463463374607431768211456"),
 * or "<int of N bytes>" when its two's-complement form is longer than max_bytes bytes (at most
 * PTC_INT_TEXT_MAX; 0 or more means PTC_INT_TEXT_MAX; the conversion costs O(max_bytes^2)). v NULL
 * or not an int: "?". Output as ptc_escape's (snprintf's rules, full length returned; at most
 * 2,470 bytes). Uses no heap. Never fails. */
#define PTC_INT_TEXT_MAX 1024
PTC_API size_t ptc_value_int_text(const ptc_value *v, size_t max_bytes, char *dst, size_t size);

/* A double as Python's repr writes it: the fewest significant digits that read back exactly, in
 * fixed notation for decimal exponents -4..15 ("0.1", "100.0", "-0.0") and in scientific
 * notation otherwise ("1e-05", "1.5e+16"); "nan", "inf", "-inf". Output as ptc_escape's
 * (snprintf's rules, the full length returned; at most 24 bytes). Never fails. */
PTC_API size_t ptc_float_text(double x, char *dst, size_t size);

/* ---- walking every value ----------------------------------------------------------------------
 * ptc_walk_next_value, the other way to step a walk made by ptc_walk_new: every value, not only
 * tensors, depth-first in container order and each container before its items: the root first
 * (path "", depth 0), then the items of each dict, list and tuple (their values; keys are path
 * segments, ptc_key_text's, joined by '.' as ptc_walk_next joins them), a value reached twice
 * reported twice. Sets and objects are reported but not entered; dict attributes (ptc_dict_attrs)
 * are not walked (a caller reads them off each dict it is given).
 * Returns 1 with *value (and, where the pointers are not NULL, *path, *len and *depth: the path,
 * NUL-terminated but possibly holding NUL bytes of a str key, valid until the next call; its
 * length; how many containers enclose the value), 0 at the end, or a negative code with
 * ptc_walk_error saying why: PTC_EINVAL (w or value NULL, or a walk ptc_walk_next started: a
 * walk is stepped one way only), PTC_ELIMIT (a path past PTC_PATH_MAX, or the budget), PTC_ENOMEM.
 * A budget set with ptc_walk_set_budget is charged one node and the path's length in bytes for
 * every value reported (what `ptc diff` charges for its listing); a caller that charges by its
 * own rules walks without one. One walk must not be stepped from two threads at once. */
PTC_API int ptc_walk_next_value(ptc_walk *w, const ptc_value **value, const char **path,
                                size_t *len, size_t *depth);

/* ---- tensor elements as numbers ----------------------------------------------------------------
 * ptc_dtype_element_f64: the element at elem (its bytes little-endian, as ptc_tensor_read lays
 * them out) as doubles: *re its value, *im the imaginary part of a complex dtype (0 otherwise).
 * Exact for every floating dtype (float64 .. float8 variants, complex); int64 and uint64 round to
 * nearest; bool is 0 or 1. float8_e4m3fn's and the fnuz forms' NaN patterns give NaN. Returns 0;
 * PTC_EINVAL when elem or re is NULL (im may be NULL); PTC_EUNSUPPORTED for dtypes that have no
 * numeric value here (quantized, bits, invalid values). */
PTC_API int ptc_dtype_element_f64(ptc_dtype dt, const void *elem, double *re, double *im);

/* Every element of t in row-major order (views, conj and neg applied) as doubles, decoded as
 * ptc_dtype_element_f64 does: numel values, or 2 * numel (real, imaginary, ...) for a complex
 * dtype, into out (capacity n doubles). Returns 0; PTC_EINVAL when t or out is NULL or n is
 * smaller than needed; PTC_EUNSUPPORTED for a dtype without numeric value; ptc_tensor_read's
 * errors (PTC_EIO, PTC_ECRC, PTC_ENOMEM...). err (may be NULL) says why. Only reads the open
 * checkpoint: any number of threads at once, as ptc_tensor_read. */
PTC_API int ptc_tensor_read_f64(const ptc_tensor *t, double *out, size_t n, ptc_error *err);

/* ---- renaming a state dict's keys --------------------------------------------------------------
 * A new root in document d whose str keys have strip removed and then add put in front, as torch
 * 2.6's consume_prefix_in_state_dict_if_present does for strip (DDP's "module."), applied to the
 * root dict and to its _metadata attribute (where '' names the wrapper module: strip keeps it,
 * and add gives the wrapper its name and keeps a copy under ''). strip and add may be NULL (no
 * change); keys that are not str are kept. *out is root itself when no key changed, else a new
 * dict of d whose values are borrowed from root (root must outlive the save of d); root is never
 * modified. *stripped (may be NULL) is set to 1 when some key of the root dict started with strip.
 * Returns 0; PTC_EINVAL when d, root or out is NULL or root is not a dict; PTC_ENOMEM. err (may
 * be NULL) says why. Uses d: one thread per document. */
PTC_API int ptc_state_dict_rename(ptc_doc *d, const ptc_value *root, const char *strip,
                                  const char *add, const ptc_value **out, int *stripped,
                                  ptc_error *err);

/* ---- `ptc verify --json` ----------------------------------------------------------------------
 * Writes the JSON object `ptc verify --json` lists for one file under "files" (ptc-verify(1)):
 *   {"path": PATH, "verdict": "ok"|"unsafe"|"malformed", "format": ptc_report_format,
 *    "torch_loads": true|false|null (null: depends on which duplicate torch's zip reader picks),
 *    "findings": [{"verdict", "code" (ptc_err_name), "kind", "member", "offset" (null: none),
 *                  "file_offset" (null: none), "detail", "torch_refuses"}...],
 *    "globals": [{"member", "offset", "opcode", "global" (null: computed at run time),
 *                 "allowed", "torch_allows"}...],
 *    "dropped": findings and references not listed}
 * or, when r is NULL (the file could not be verified), {"path", "verdict": "error", "error":
 * ptc_err_name(failure->code), "message"}. Keys in that order, two spaces per level, each line
 * after the first indented by indent more spaces (4 in ptc verify, whose "files" array is one
 * level deep); no newline at the end. Strings are the escaped text of the report; a path that is
 * not valid UTF-8 is escaped as ptc_escape does; hidden characters are written as \uXXXX
 * (ptc_json_escape_hidden). path NULL is written as "". The bytes go to write(ctx, p, n), which
 * returns 0 or a negative PTC_E* code that stops the writing and is returned. Returns 0;
 * PTC_EINVAL when write is NULL, or r and failure are both NULL; PTC_ENOMEM. err (may be NULL)
 * says why. Reads r only: several threads may write one report at once. */
typedef int (*ptc_write_fn)(void *ctx, const void *p, size_t n);
PTC_API int ptc_report_json(const char *path, const ptc_report *r, const ptc_error *failure,
                            unsigned indent, ptc_write_fn write, void *ctx, ptc_error *err);

/* ---- `ptc verify --sarif` ---------------------------------------------------------------------
 * One SARIF 2.1.0 log (OASIS Static Analysis Results Interchange Format) for the reports of any
 * number of files, written as they come: ptc_sarif_begin writes the head (the "$schema",
 * "version" and a single run whose tool.driver is {"name": "ptc", "version" and
 * "semanticVersion": ptc_version(), "rules": one per finding kind}), ptc_sarif_file writes one
 * result per finding of one file, ptc_sarif_end the rest. Memory does not grow with the
 * findings; the artifacts and notifications SARIF puts after the results are kept, a few hundred
 * bytes per file. The mapping (ptc-verify(1) lists it):
 *   rule ids   PTC-GLOBAL, PTC-OPCODE, PTC-TORCHSCRIPT, PTC-HIDDEN-PICKLE, PTC-LOAD, PTC-CRC for
 *              the kinds "global", "opcode", "torchscript", "hidden-pickle", "load", "crc";
 *              PTC-OTHER for a kind this writer does not know; each result has ruleId and
 *              ruleIndex into tool.driver.rules;
 *   level      "error" for an unsafe finding, "warning" for a malformed one;
 *   message    {"text": "MEMBER+0xOFFSET: detail"} ("MEMBER: " without an offset, no prefix for
 *              the file itself);
 *   locations  one: physicalLocation.artifactLocation {"uri", "index" into run.artifacts} and,
 *              when the finding has a file offset (ptc_finding.file_offset), region
 *              {"byteOffset": file_offset, "byteLength": 1, or 0 where the offset is the
 *              file's end (it was cut short there)}; a finding in a member adds
 *              logicalLocations [{"name": member}];
 *   properties the finding as ptc_report_json gives it ("verdict", "code", "kind", "member",
 *              "offset", "file_offset", "torch_refuses") and, where the report lists globals at
 *              the finding's member and offset, "globals": [{"global", "opcode", "allowed",
 *              "torch_allows"}].
 * The uri is the path as a URI reference: an absolute path a "file://" URI, a relative one a
 * relative reference; every byte but ASCII letters, digits, "-._~" and "/" is percent-encoded, so
 * any byte string gives a valid URI. Each distinct uri is one run.artifacts entry {"location":
 * {"uri"}, "roles": ["analysisTarget"], "properties": {"verdict", "format", "torch_loads",
 * "dropped"} or {"verdict": "error", "error"}}. A file that could not be verified (r NULL) gives
 * an "error" toolExecutionNotification in invocations[0] with failure's message and code, and
 * makes executionSuccessful false; a report that dropped findings past its caps gives a
 * "warning" notification with the count. run.properties: {"policy": params->policy or null,
 * "summary": {"files", "ok", "unsafe", "malformed", "error"}}. Text from files is escaped as
 * ptc_report_json escapes it.
 * The bytes go to write(ctx, p, n), which returns 0 or a negative PTC_E* code; the first failure
 * of write or of memory is kept: nothing more is written and every later call returns it (the
 * log is then incomplete). */
typedef struct ptc_sarif ptc_sarif;
typedef struct ptc_sarif_params {
    size_t size;        /* sizeof(ptc_sarif_params), set by ptc_sarif_params_default */
    const char *policy; /* the policy's name for run.properties ("default"), or NULL; copied */
} ptc_sarif_params;
/* Fills *p with the defaults (size included); p must not be NULL. Never fails; any thread. */
PTC_API void ptc_sarif_params_default(ptc_sarif_params *p);
/* Starts a log: writes its head and sets *out (free it with ptc_sarif_end, or ptc_sarif_free to
 * abandon it). params NULL: the defaults. Returns 0; PTC_EINVAL when out or write is NULL or
 * params->size is 0 or larger than this library's; PTC_ENOMEM; or write's code (*out is then
 * NULL). err (may be NULL) says why. */
PTC_API int ptc_sarif_begin(ptc_sarif **out, const ptc_sarif_params *params, ptc_write_fn write,
                            void *ctx, ptc_error *err);
/* Adds one file: path (NULL is written as "") and its report r, or, when r is NULL, failure:
 * the error ptc_verify gave for it. r and failure are read during the call only. Returns 0;
 * PTC_EINVAL when s is NULL or r and failure are both NULL; PTC_ENOMEM; or the kept failure. */
PTC_API int ptc_sarif_file(ptc_sarif *s, const char *path, const ptc_report *r,
                           const ptc_error *failure, ptc_error *err);
/* Writes the end of the log and frees s, whatever it returns. Returns 0; PTC_EINVAL when s is
 * NULL; PTC_ENOMEM; or the kept failure. */
PTC_API int ptc_sarif_end(ptc_sarif *s, ptc_error *err);
/* Frees s without writing more (the log stays incomplete); accepts NULL. */
PTC_API void ptc_sarif_free(ptc_sarif *s);
/* One ptc_sarif is one thread's at a time; separate logs may be written by separate threads. */

/* ---- `ptc inspect --json` ----------------------------------------------------------------------
 * Writes the JSON object `ptc inspect --json` prints for open checkpoint c (ptc-inspect(1)), keys
 * in this order, two spaces per level, ending in "}\n":
 *   {"file": p->file (null when NULL), "format": "zip"|"legacy"|"safetensors",
 *    "prefix": the zip's record prefix or null, "byteorder": "little"|"big" or null,
 *    "records": [{"name", "size"}...] (zip only),
 *    "storages": [{"key", "dtype", "nbytes", "location", "mapped"}...],
 *    "tensors": [{"path", "dtype", "shape", "stride", "storage_offset", "storage" (null: none),
 *                 "numel", "nbytes", "requires_grad", "parameter", "sha256" (p->hash only)}
 *                or {"path", "$ref": the path where a shared container was listed}...],
 *    "values": [{"path", "type", "value"} or {"path", "$ref"}...]          (p->values only),
 *    "metadata": [{"path", "modules" (null: no _metadata), "attributes"}...] (p->values only),
 *    "values_truncated": true   (only when the values listing stopped after 2^22 nodes),
 *    "totals": {"tensors", "elements", "nbytes"} (each $ref counted as if written out)}
 * Paths are ptc_walk_next's. A container the tree reaches more than once is listed once, at its
 * first path; later meetings are {"path", "$ref"} entries. "type" is one of none, bool, int,
 * float, complex, str, bytes, tuple, list, set, dict, size, tensor, dtype, device, global,
 * object; "value" is the JSON form of the value where it has one (an int beyond 64 bits, and
 * what has none, as its one-line Python-like text; floats nan/inf as "nan", "inf", "-inf";
 * complex as {"real", "imag"}; bytes as {"len", "hex", "truncated"} (64 KiB shown)). Text from
 * the file that is not valid UTF-8 is given as ptc_escape writes it; hidden characters are
 * written as \uXXXX (ptc_json_escape_hidden). Integers past 2^63 - 1 in "records" and "totals"
 * are decimal strings.
 * Every walk, rendering and hash is charged to a budget of p->budget bytes (0: the default of
 * ptc_budget_init) before the first byte is written: a file whose listing would exceed it writes
 * nothing and fails with PTC_ELIMIT. The bytes go to write(ctx, p, n), which returns 0 or a
 * negative PTC_E* code that stops the writing and is returned (what was written stays written).
 * p->progress (may be NULL) is called with (progress_ctx, 0, n) before p->hash reads the n
 * tensors, then after each. p NULL: the defaults of ptc_ckpt_json_params_default (values on,
 * hash off, file null, default budget).
 * Returns 0; PTC_EINVAL when c or write is NULL or p->size is wrong; PTC_ELIMIT (the budget, a
 * path longer than PTC_PATH_MAX); PTC_ENOMEM; with p->hash the errors of ptc_tensor_sha256; or
 * write's code. err (may be NULL) says why. Reads c only, and keeps no state between calls:
 * several threads may write documents of one checkpoint at once, as they may walk it. */
typedef struct ptc_ckpt_json_params {
    size_t size;      /* sizeof(ptc_ckpt_json_params), set by ptc_ckpt_json_params_default */
    const char *file; /* the "file" member's text (the path the checkpoint came from), or NULL */
    int values;       /* 1 (default): the "values" and "metadata" arrays; 0: not listed */
    int hash;         /* 1: each tensor's "sha256" (reads every tensor's data); default 0 */
    uint64_t budget;  /* bytes the listing may take, see ptc_budget_init; 0: the default */
    void (*progress)(void *progress_ctx, uint64_t done, uint64_t total); /* or NULL */
    void *progress_ctx;
} ptc_ckpt_json_params;
/* Fills p with the defaults above (p NULL: does nothing). Any thread. */
PTC_API void ptc_ckpt_json_params_default(ptc_ckpt_json_params *p);
PTC_API int ptc_ckpt_json(const ptc_ckpt *c, const ptc_ckpt_json_params *p, ptc_write_fn write,
                          void *ctx, ptc_error *err);

/* ---- one value as one line of text ------------------------------------------------------------
 * Writes v as `ptc inspect` shows it after "PATH = " (and ptc_ckpt_json gives it as the "value"
 * of what has no JSON form), in Python's notation where it has one: None, True, 3, 0.5, 1e-05,
 * (1+2j), "text", b'ab\x00', (1,), [1, 2], set({1}), set(), {"k": 1}, torch.Size([3, 4]),
 * tensor(float32, [3, 4]), torch.float16, device(type='cuda', index=0), <global NAME>,
 * <NAME object>; "?" for what cannot be read. Bounded however large v is: containers nested more
 * than 4 levels inside v show as "...", a container shows its first 16 items then
 * "... (N items)", a str its first 256 bytes and a bytes value its first 32 then "... (N bytes)",
 * an int longer than 1024 bytes "<int of N bytes>" (ptc_value_int_text). flags:
 * PTC_TEXT_ESCAPE escapes the text of strs ("\"" as well), device types and global names as
 * ptc_escape does, so that the line is safe to print; without it they are copied raw (for a dict
 * key that becomes a path segment and is escaped once with the whole path). Bytes values are
 * always escaped as Python shows them.
 * Each value rendered (v and each item shown) is charged one node to budget (NULL: nothing
 * charged); when the budget runs out nothing is written. The text is built whole (up to 1 GiB)
 * and then given to write(ctx, p, n) in one call, with no newline and no NUL; write returns 0 or
 * a negative PTC_E* code, which is returned.
 * Returns 0; PTC_EINVAL when v or write is NULL; PTC_ELIMIT (budget, err names it); PTC_ENOMEM;
 * or write's code. err (may be NULL) says why. Reads v only and keeps no state: several threads
 * may render values of one checkpoint at once, each with its own budget (a budget is one
 * thread's at a time). */
enum {
    PTC_TEXT_ESCAPE = 1u << 0 /* escape text from the file for printing (ptc_escape) */
};
PTC_API int ptc_value_text(const ptc_value *v, unsigned flags, ptc_budget *budget,
                           ptc_write_fn write, void *ctx, ptc_error *err);
/* ============================================================================================= */

#ifdef __cplusplus
}
#endif
#endif /* PTC_PTC_H */
