/*
 * tree.c - the check of a finished value tree (ptc__value_check_tree): no cycles, nesting at most
 * max_depth, a bounded expansion of shared subtrees; and, read with salvage, the cut of each cycle
 * (docs/internals/salvage.md "Cycles").
 *
 * The walk is iterative (a frame stack capped by max_depth) and depth-first in the tree's order.
 * Each node's mark is scratch for it: 0 unseen, 1 on the current path, 2 finished; while a node
 * is on the path, its expanded field holds its frame's index, and from its finish the size of its
 * subtree with shared parts counted each time.
 */
#include "pickle/pickle.h"

#include <stdio.h>
#include <string.h>

/* ---- tree check ------------------------------------------------------------------------------
 * Iterative depth-first walk with three colours: 0 unseen, 1 on the current path, 2 finished.
 * Meeting a node of colour 1 is a cycle: refused, or (salvage) cut. Shared subtrees are walked
 * once. */

typedef struct frame {
    ptc_value *v;
    size_t next;        /* index of the next child to visit */
    ptc_value *backref; /* salvage: the placeholder that stands for v where an edge led back */
} frame;

/* The bytes of a class name a placeholder repeats: real names are a few dozen bytes, and one
 * placeholder per node pointed back to keeps their total within the tree's size times this. */
#define BACKREF_NAME_MAX 200

static size_t nchildren(const ptc_value *v)
{
    switch (v->kind) {
    case PTC_VALUE_TUPLE:
    case PTC_VALUE_LIST:
    case PTC_VALUE_SET:
    case PTC_VALUE_SIZE:
        return v->u.seq.n;
    case PTC_VALUE_DICT:
        return 2 * v->u.dict.n + 1;
    case PTC_VALUE_OBJECT:
        /* Read symbolically, an object may also hold items and a callable that is not a global,
         * each a subtree of its own (child() gives NULL for what it lacks). */
        return v->u.obj.items || (v->u.obj.cls && v->u.obj.cls->kind != PTC_VALUE_GLOBAL) ? 4 : 2;
    default:
        return 0;
    }
}

static const ptc_value *child(const ptc_value *v, size_t i)
{
    switch (v->kind) {
    case PTC_VALUE_DICT:
        if (i == 2 * v->u.dict.n)
            return v->u.dict.attrs;
        return (i & 1) ? v->u.dict.vals[i / 2] : v->u.dict.keys[i / 2];
    case PTC_VALUE_OBJECT:
        return i == 0                                                   ? v->u.obj.args
               : i == 1                                                 ? v->u.obj.state
               : i == 2                                                 ? v->u.obj.items
               : v->u.obj.cls && v->u.obj.cls->kind != PTC_VALUE_GLOBAL ? v->u.obj.cls
                                                                        : NULL;
    default:
        return v->u.seq.items[i];
    }
}

/* Makes child i of v (as child() numbers them) the value c. */
static void set_child(ptc_value *v, size_t i, ptc_value *c)
{
    switch (v->kind) {
    case PTC_VALUE_DICT:
        if (i == 2 * v->u.dict.n)
            v->u.dict.attrs = c;
        else if (i & 1)
            v->u.dict.vals[i / 2] = c;
        else
            v->u.dict.keys[i / 2] = c;
        return;
    case PTC_VALUE_OBJECT:
        if (i == 0)
            v->u.obj.args = c;
        else if (i == 1)
            v->u.obj.state = c;
        else if (i == 2)
            v->u.obj.items = c;
        else
            v->u.obj.cls = c;
        return;
    default:
        v->u.seq.items[i] = c;
        return;
    }
}

/* The placeholder for an edge back to target: "<back-reference to an enclosing CLASS object>"
 * (CLASS as ptc_value_global_name gives it, cut at BACKREF_NAME_MAX bytes on a UTF-8 boundary)
 * or "<back-reference to an enclosing KIND>" for a container. NULL when out of memory. */
static ptc_value *backref_new(ptc__arena *a, const ptc_value *target)
{
    bool object = target->kind == PTC_VALUE_OBJECT;
    const char *name =
        object ? ptc_value_global_name(target) : ptc_value_kind_name((ptc_value_kind)target->kind);
    if (!name)
        name = "?";
    size_t n = strlen(name);
    bool cut = n > BACKREF_NAME_MAX;
    if (cut) {
        n = BACKREF_NAME_MAX;
        while (n > 0 && ((uint8_t)name[n] & 0xC0) == 0x80)
            n--;
    }
    static const char head[] = "<back-reference to an enclosing ";
    const char *tail = object ? " object>" : ">";
    size_t len = sizeof head - 1 + n + (cut ? 3 : 0) + strlen(tail);
    ptc_value *v = ptc__value_new(a, PTC_VALUE_GLOBAL);
    char *full = ptc__arena_alloc(a, len + 1);
    char *short_name = ptc__arena_alloc(a, n + 4);
    if (!v || !full || !short_name)
        return NULL;
    memcpy(short_name, name, n);
    memcpy(short_name + n, cut ? "..." : "", cut ? 4 : 1);
    snprintf(full, len + 1, "%s%s%s", head, short_name, tail);
    v->flags = PTC__V_SYMBOLIC | PTC__V_BACKREF;
    v->u.g.module = "<back-reference>";
    v->u.g.name = short_name;
    v->u.g.full = full;
    v->u.g.id = 0;
    v->mark = 2; /* a finished leaf of one node */
    v->expanded = 1;
    return v;
}

static void finish(ptc_value *v, bool reindex)
{
    uint64_t total = 1;
    size_t n = nchildren(v);
    for (size_t i = 0; i < n; i++) {
        const ptc_value *c = child(v, i);
        if (c && !ptc__add_u64_ok(total, c->expanded, &total))
            total = UINT64_MAX;
    }
    /* Every cut inside this dict's keys was made before it finishes (its keys finish first). */
    if (reindex && v->kind == PTC_VALUE_DICT)
        ptc__dict_reindex(v);
    v->expanded = total;
    v->mark = 2;
}

int ptc__value_check_tree(ptc_value *root, uint32_t max_depth, uint64_t max_expanded,
                          ptc__arena *cut, const char *member, ptc_error *err)
{
    if (!root)
        return 0;
    /* torch 2.6 returns what it unpickled, storages, cycles and all, and has no limits: every
     * refusal here is ptc's own. */
    if (root->kind == PTC__VALUE_OPAQUE)
        return ptc__err_stricter(err, PTC_EUNSUPPORTED, member, -1,
                                 "a bare storage is not a value ptc can return (save tensors "
                                 "instead)");
    size_t cap = 64, n = 0;
    uint64_t cuts = 0;
    frame *st = ptc__malloc(cap * sizeof *st);
    if (!st)
        return ptc__err(err, PTC_ENOMEM, member, -1, "out of memory checking the object tree");
    int rc = 0;
    root->mark = 1;
    root->expanded = 0; /* its frame, while it is on the path */
    st[n++] = (frame){root, 0, NULL};
    while (n > 0) {
        frame *f = &st[n - 1];
        if (f->next >= nchildren(f->v)) {
            finish(f->v, cuts > 0);
            if (f->v->expanded > max_expanded) {
                rc = ptc__err_stricter(err, PTC_ELIMIT, member, -1,
                                       "shared references expand the object tree beyond %llu nodes",
                                       (unsigned long long)max_expanded);
                break;
            }
            n--;
            continue;
        }
        size_t i = f->next++;
        ptc_value *c = (ptc_value *)child(f->v, i);
        if (!c || c->mark == 2)
            continue;
        if (c->kind == PTC__VALUE_OPAQUE) {
            rc = ptc__err_stricter(err, PTC_EUNSUPPORTED, member, -1,
                                   "a bare storage is not a value ptc can return (save tensors "
                                   "instead)");
            break;
        }
        if (c->mark == 1 && cut) {
            /* A back edge: c is on the path, at frame c->expanded. One placeholder per node
             * pointed back to, shared by every edge that led to it (as the node was). */
            frame *t = &st[c->expanded];
            if (!t->backref && !(t->backref = backref_new(cut, c))) {
                rc = ptc__err(err, PTC_ENOMEM, member, -1,
                              "out of memory cutting a cycle of the object tree");
                break;
            }
            set_child(f->v, i, t->backref);
            cuts++;
            continue;
        }
        if (c->mark == 1) {
            rc = ptc__err_stricter(err, PTC_EFORMAT, member, -1,
                                   "the object tree contains a cycle (a %s contains itself)",
                                   ptc_value_kind_name((ptc_value_kind)c->kind));
            break;
        }
        if (n > max_depth) {
            rc = ptc__err_stricter(err, PTC_ELIMIT, member, -1,
                                   "containers nest deeper than the limit %u", max_depth);
            break;
        }
        /* n <= max_depth + 1 here (checked above): the frame stack is capped by max_depth. */
        if (n == cap) {
            frame *ns = ptc__realloc(st, 2 * cap * sizeof *st);
            if (!ns) {
                rc =
                    ptc__err(err, PTC_ENOMEM, member, -1, "out of memory checking the object tree");
                break;
            }
            st = ns;
            cap *= 2;
        }
        c->mark = 1;
        c->expanded = n;
        st[n++] = (frame){c, 0, NULL};
    }
    ptc__free(st);
    return rc;
}
