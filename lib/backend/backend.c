/*
 * backend.c - finding a backend's table by name: ref is built into libptc, every other backend
 * (dnnl, cuda) is a module (lib/base/plugin.h) loaded on first use.
 */
#include "backend/backend.h"

#include "base/plugin.h"

#include <string.h>

/* The module's ops, loaded if needed; its descriptor into *desc. */
static int load(const char *name, const ptc__plugin **desc, ptc_error *err)
{
    int rc = ptc__plugin_load(PTC__PLUGIN_BACKEND, name, desc, err);
    if (rc == 0 && strcmp(((const ptc__backend_ops *)(*desc)->ops)->name, name) != 0)
        rc = ptc__err(err, PTC_EUNSUPPORTED, "", -1,
                      "the module of backend \"%s\" carries the backend \"%s\"", name,
                      ((const ptc__backend_ops *)(*desc)->ops)->name);
    return rc;
}

const ptc__backend_ops *ptc__backend_find(const char *name)
{
    if (!name)
        return NULL;
    if (strcmp(name, ptc__backend_ref.name) == 0)
        return &ptc__backend_ref;
    const ptc__plugin *d;
    ptc_error e;
    return load(name, &d, &e) == 0 ? d->ops : NULL;
}

/* Loads the module and asks it whether it can run here. */
static int get_module(const char *name, const ptc__backend_ops **out, ptc_error *err)
{
    const ptc__plugin *d;
    int rc = load(name, &d, err);
    if (rc < 0)
        return rc;
    if ((rc = ptc__plugin_probe(d, err)) < 0) {
        ptc__err_prefix(err, "backend \"%s\" cannot run here: ", name);
        return rc;
    }
    *out = d->ops;
    return 0;
}

int ptc__backend_get(const char *name, const ptc__backend_ops **out, ptc_error *err)
{
    *out = NULL;
    if (name && strcmp(name, "auto") != 0) {
        if (strcmp(name, ptc__backend_ref.name) == 0) {
            *out = &ptc__backend_ref;
            return 0;
        }
        if (strcmp(name, "dnnl") != 0 && strcmp(name, "cuda") != 0)
            return ptc__err(err, PTC_EINVAL, "", -1,
                            "unknown backend \"%s\" (auto, ref, dnnl, cuda)", name);
        return get_module(name, out, err);
    }
    /* auto: a GPU when one can be used, else oneDNN, else the plain C backend. The reasons why a
     * module was passed over are dropped: auto is documented to fall back. */
    ptc_error e;
    if (get_module("cuda", out, &e) == 0 || get_module("dnnl", out, &e) == 0)
        return 0;
    *out = &ptc__backend_ref;
    return 0;
}
