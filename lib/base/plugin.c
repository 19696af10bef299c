/*
 * plugin.c - the libptc side of lib/base/plugin.h: finding a module file, loading it, checking
 * its descriptor, and listing the known modules for `ptc --version` (ptc_plugins_list).
 *
 * Process state: the table of loaded modules below (g_mods, under g_lock) is the one piece of
 * mutable global state in libptc. It exists because a module, once dlopen()ed, cannot be safely
 * unloaded (oneDNN, OpenMPI and the CUDA runtime keep threads and atexit handlers in it), so
 * every later request for the same module must get the same handle rather than a second load.
 * Entries are added, never removed; only successful loads are kept, so a module installed while
 * the process runs is found on the next request.
 *
 * Nothing here runs unless a caller asks for a module by name: reading, verifying, diffing or
 * converting checkpoints never reaches this file.
 */
#include "config.h"

#include "base/plugin.h"
#include "base/base.h"
#include "base/env.h"

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef PTC_PKGLIBDIR
#error "PTC_PKGLIBDIR must be defined (Makefile.am passes $(pkglibdir))"
#endif

#define MAX_MODS 16
#define PATH_CAP 4096

/* The ELF class of this process: the only one whose files check_file reads further. */
#if UINTPTR_MAX > 0xffffffffu
#define NATIVE_CLASS ELFCLASS64
#else
#define NATIVE_CLASS ELFCLASS32
#endif

typedef struct loaded {
    ptc__plugin_kind kind;
    char name[32];
    const ptc__plugin *desc;
} loaded;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static loaded g_mods[MAX_MODS];
static int g_nmods;

static const ptc__host g_host = {
    .abi = PTC__PLUGIN_ABI,
    .realloc = ptc__realloc,
    .verr = ptc__verr,
    .verr_prefix = ptc__verr_prefix,
    .getenv = ptc__getenv,
};

static const char *kind_name(ptc__plugin_kind kind)
{
    return kind == PTC__PLUGIN_BACKEND ? "backend"
           : kind == PTC__PLUGIN_COMM  ? "comm"
           : kind == PTC__PLUGIN_IMAGE ? "image"
           : kind == PTC__PLUGIN_TOOL  ? "tool"
                                       : "?";
}

static const char *kind_word(ptc__plugin_kind kind)
{
    return kind == PTC__PLUGIN_BACKEND ? "backend"
           : kind == PTC__PLUGIN_COMM  ? "communicator"
           : kind == PTC__PLUGIN_TOOL  ? "tool module"
                                       : "image codec module";
}

static char *esc(char *dst, size_t cap, const char *s)
{
    return ptc__escape(dst, cap, s, strlen(s), true);
}

/* The directories to search, ':'-separated: PTC_PLUGIN_PATH itself when it is set and not
 * empty (walked in place, so that a long one is never cut short and a directory at its end
 * silently dropped), else the defaults, written into buf. */
static const char *search_dirs(char *buf, size_t cap)
{
    const char *env = ptc__getenv("PTC_PLUGIN_PATH");
    if (env && *env)
        return env;
    /* The directory libptc was loaded from: a build tree's lib/.libs (or, for a program linked
     * with libptc_core statically, the program's own directory). */
    Dl_info info;
    char self[PATH_CAP] = "";
    if (dladdr((void *)(uintptr_t)ptc__plugin_load, &info) && info.dli_fname &&
        strchr(info.dli_fname, '/')) {
        snprintf(self, sizeof self, "%s", info.dli_fname);
        *strrchr(self, '/') = '\0';
        if (!*self)
            snprintf(self, sizeof self, "/");
    }
    if (*self)
        snprintf(buf, cap, "%s:%s/ptc:%s", self, self, PTC_PKGLIBDIR);
    else
        snprintf(buf, cap, "%s", PTC_PKGLIBDIR);
    return buf;
}

/* The first <dir>/<kind>-<name>.so that is there, into path; 0 when none (*dirs then says where
 * it looked). A symlink loop of that name counts as there, so that load_file reports it rather
 * than "not installed". */
static int find_file(ptc__plugin_kind kind, const char *name, char *path, size_t cap,
                     const char **dirs, char *buf, size_t bcap)
{
    *dirs = search_dirs(buf, bcap);
    const char *p = *dirs;
    while (*p) {
        const char *e = strchr(p, ':');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n > 0 && n < cap) {
            int w = snprintf(path, cap, "%.*s/%s-%s.so", (int)n, p, kind_name(kind), name);
            if (w > 0 && (size_t)w < cap && (access(path, F_OK) == 0 || errno == ELOOP))
                return 1;
        }
        p += n + (e ? 1 : 0);
    }
    *path = '\0';
    return 0;
}

static int not_installed(ptc_error *err, ptc__plugin_kind kind, const char *name, const char *dirs)
{
    char en[64], ed[1024];
    esc(en, sizeof en, name);
    return ptc__err(err, PTC_ENOTFOUND, "", -1, "the %s \"%s\" is not installed: no %s-%s.so in %s",
                    kind_word(kind), en, kind_name(kind), en, esc(ed, sizeof ed, dirs));
}

/* What dlopen cannot be trusted with: it blocks forever opening a FIFO, and it maps a truncated
 * ELF file's segments past the end of the file, so that the first touch of them is a SIGBUS
 * inside the loader. So the file must be a regular file, and every segment its program headers
 * name must lie within it. Anything else about the file (another ELF class or machine, missing
 * libraries) dlopen reports itself. ep: the path, escaped. */
static int check_file(const char *path, const char *ep, ptc_error *err)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return ptc__err(err, PTC_EUNSUPPORTED, "", -1, "%s: cannot be opened: %s", ep,
                        strerror(errno));
    struct stat st;
    ElfW(Ehdr) eh;
    int rc = 0;
    if (fstat(fd, &st) != 0)
        rc = ptc__err(err, PTC_EUNSUPPORTED, "", -1, "%s: cannot be read: %s", ep, strerror(errno));
    else if (!S_ISREG(st.st_mode))
        rc = ptc__err(err, PTC_EUNSUPPORTED, "", -1,
                      "%s: not a regular file (a module is a shared object file)", ep);
    else if (pread(fd, &eh, sizeof eh, 0) != (ssize_t)sizeof eh ||
             memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0)
        rc = ptc__err(err, PTC_EUNSUPPORTED, "", -1,
                      "%s: not a shared object (no ELF header in its first %zu bytes)", ep,
                      sizeof eh);
    else if (eh.e_ident[EI_CLASS] == NATIVE_CLASS && eh.e_phentsize == sizeof(ElfW(Phdr))) {
        uint64_t size = (uint64_t)st.st_size;
        uint64_t table = (uint64_t)eh.e_phnum * sizeof(ElfW(Phdr));
        if (eh.e_phoff > size || table > size - eh.e_phoff)
            rc = ptc__err(err, PTC_EUNSUPPORTED, "", -1,
                          "%s: truncated: its program headers end past its %llu bytes", ep,
                          (unsigned long long)size);
        for (unsigned i = 0; rc == 0 && i < eh.e_phnum; i++) {
            ElfW(Phdr) ph;
            ssize_t got = pread(fd, &ph, sizeof ph, (off_t)(eh.e_phoff + i * sizeof ph));
            if (got != (ssize_t)sizeof ph) /* short: the file shrank since fstat */
                rc = ptc__err(err, PTC_EUNSUPPORTED, "", -1,
                              "%s: cannot read its program header %u%s%s", ep, i,
                              got < 0 ? ": " : " (the file is shorter than it was)",
                              got < 0 ? strerror(errno) : "");
            else if (ph.p_offset > size || ph.p_filesz > size - ph.p_offset)
                rc = ptc__err(err, PTC_EUNSUPPORTED, "", -1,
                              "%s: truncated: segment %u ends at byte %llu, the file has %llu "
                              "bytes",
                              ep, i, (unsigned long long)ph.p_offset + ph.p_filesz,
                              (unsigned long long)size);
        }
    }
    close(fd);
    return rc;
}

/* Loads and checks the module at path; called under g_lock. */
static int load_file(ptc__plugin_kind kind, const char *name, const char *path,
                     const ptc__plugin **out, ptc_error *err)
{
    char ep[1024], em[512];
    esc(ep, sizeof ep, path);
    int rc = check_file(path, ep, err);
    if (rc < 0)
        return rc;
    dlerror();
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        return ptc__err(err, PTC_EUNSUPPORTED, "", -1, "%s: cannot be loaded: %s", ep,
                        esc(em, sizeof em, why ? why : "dlopen failed"));
    }
    const ptc__plugin *d = NULL;
    ptc__plugin_entry_fn entry;
    void *sym = dlsym(h, PTC__PLUGIN_ENTRY);
    memcpy(&entry, &sym, sizeof entry); /* object pointer to function pointer, as POSIX allows */
    if (!sym) {
        rc = ptc__err(err, PTC_EUNSUPPORTED, "", -1,
                      "%s: not a ptc module (it has no entry point %s); rebuild the module with "
                      "this version of ptc",
                      ep, PTC__PLUGIN_ENTRY);
        goto fail;
    }
    d = entry(&g_host);
    if (!d)
        rc = ptc__err(err, PTC_EUNSUPPORTED, "", -1, "%s: its entry point returned no descriptor",
                      ep);
    else if (d->abi != PTC__PLUGIN_ABI)
        rc = ptc__err(err, PTC_EUNSUPPORTED, "", -1,
                      "%s: built for plugin ABI %d, this libptc has ABI %d (rebuild the module "
                      "with this version of ptc)",
                      ep, d->abi, PTC__PLUGIN_ABI);
    else if (d->kind != kind || !d->name || strcmp(d->name, name) != 0) {
        char en[64];
        rc = ptc__err(err, PTC_EUNSUPPORTED, "", -1,
                      "%s: the module says it is the %s \"%s\", not the %s \"%s\" its name "
                      "promises",
                      ep,
                      d->kind == PTC__PLUGIN_BACKEND ? "backend"
                      : d->kind == PTC__PLUGIN_COMM  ? "communicator"
                      : d->kind == PTC__PLUGIN_IMAGE ? "image codec module"
                      : d->kind == PTC__PLUGIN_TOOL  ? "tool module"
                                                     : "module of an unknown kind",
                      esc(em, sizeof em, d->name ? d->name : "(none)"), kind_word(kind),
                      esc(en, sizeof en, name));
    } else if (!d->ops)
        rc = ptc__err(err, PTC_EUNSUPPORTED, "", -1,
                      "%s: the module gives no operations table (a broken build of it?)", ep);
    if (rc < 0)
        goto fail;
    *out = d;
    return 0;
fail:
    /* A module that ran its entry point may have started threads or registered handlers:
     * closing it is only safe when it never got that far. It stays loaded, unused. */
    if (!d)
        dlclose(h);
    return rc;
}

int ptc__plugin_load(ptc__plugin_kind kind, const char *name, const ptc__plugin **out,
                     ptc_error *err)
{
    *out = NULL;
    if (!name || !*name || strlen(name) >= sizeof g_mods[0].name || strchr(name, '/'))
        return ptc__err(err, PTC_EINVAL, "", -1, "invalid module name");
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < g_nmods; i++)
        if (g_mods[i].kind == kind && strcmp(g_mods[i].name, name) == 0) {
            *out = g_mods[i].desc;
            pthread_mutex_unlock(&g_lock);
            return 0;
        }
    char path[PATH_CAP], buf[PATH_CAP];
    const char *dirs;
    int rc;
    if (!find_file(kind, name, path, sizeof path, &dirs, buf, sizeof buf))
        rc = not_installed(err, kind, name, dirs);
    else
        rc = load_file(kind, name, path, out, err);
    if (rc == 0 && g_nmods < MAX_MODS) {
        g_mods[g_nmods].kind = kind;
        snprintf(g_mods[g_nmods].name, sizeof g_mods[0].name, "%s", name);
        g_mods[g_nmods].desc = *out;
        g_nmods++;
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

int ptc__plugin_probe(const ptc__plugin *d, ptc_error *err)
{
    ptc__err_clear(err);
    if (!d->probe)
        return 0;
    int rc = d->probe(err);
    if (rc >= 0)
        return 0;
    /* A probe that fails must say why; one that does not still gets a message that names it. */
    if (!err || !err->message[0])
        rc = ptc__err(err, PTC_EUNSUPPORTED, "", -1,
                      "the %s module \"%s\" failed its check of this machine without saying why "
                      "(code %d)",
                      kind_name(d->kind), d->name ? d->name : "?", rc);
    return rc;
}

/* ---- public: the list for `ptc --version` ------------------------------------------------------
 */

int ptc_plugins_list(ptc_plugin_info *out, int max, ptc_error *err)
{
    static const struct {
        ptc__plugin_kind kind;
        const char *name;
    } known[] = {{PTC__PLUGIN_BACKEND, "dnnl"}, {PTC__PLUGIN_BACKEND, "cuda"},
                 {PTC__PLUGIN_COMM, "mpi"},     {PTC__PLUGIN_COMM, "nccl"},
                 {PTC__PLUGIN_IMAGE, "codecs"}, {PTC__PLUGIN_TOOL, "tensorboard"},
                 {PTC__PLUGIN_TOOL, "plot"}};
    ptc__err_clear(err);
    int n = (int)(sizeof known / sizeof *known);
    if (!out)
        return n;
    if (max < 0)
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc_plugins_list: max is negative");
    for (int i = 0; i < n && i < max; i++) {
        ptc_plugin_info *pi = &out[i];
        memset(pi, 0, sizeof *pi);
        pi->kind = kind_name(known[i].kind);
        pi->name = known[i].name;
        char buf[PATH_CAP], path[PATH_CAP];
        const char *dirs;
        ptc_error e;
        ptc__err_clear(&e);
        if (!find_file(known[i].kind, known[i].name, path, sizeof path, &dirs, buf, sizeof buf)) {
            not_installed(&e, known[i].kind, known[i].name, dirs);
            snprintf(pi->why, sizeof pi->why, "%s", e.message);
            continue;
        }
        pi->found = 1;
        esc(pi->path, sizeof pi->path, path);
        const ptc__plugin *d;
        if (ptc__plugin_load(known[i].kind, known[i].name, &d, &e) < 0) {
            snprintf(pi->why, sizeof pi->why, "%s", e.message);
            continue;
        }
        pi->loaded = 1;
        pi->experimental = d->experimental;
        if (d->summary)
            esc(pi->summary, sizeof pi->summary, d->summary);
        if (ptc__plugin_probe(d, &e) < 0)
            snprintf(pi->why, sizeof pi->why, "%s", e.message);
        else
            pi->can_run = 1;
    }
    return n;
}

/* ---- public: a tool module's table -------------------------------------------------------------
 */

int ptc_tool_module(const char *name, const void **ops, ptc_error *err)
{
    ptc__err_clear(err);
    if (!name || !*name || !ops)
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc_tool_module: missing argument");
    *ops = NULL;
    const ptc__plugin *d;
    int rc = ptc__plugin_load(PTC__PLUGIN_TOOL, name, &d, err);
    if (rc == 0)
        rc = ptc__plugin_probe(d, err);
    if (rc == 0)
        *ops = d->ops;
    return rc;
}
