/*
 * callback.c - a caller's dataset (ptc_source in ptc.h): labelled 32x32 RGB images handed over one
 * at a time through a callback, read into a split like the files of the built-in datasets.
 *
 * Why the whole source is read at open rather than by the loader's thread as batches need it:
 * the rest of the data layer works on splits held in memory (the loader's thread, the statistics
 * Normalize uses by default, and a device backend that uploads the uint8 images once and makes
 * its batches there), and reading once on the caller's thread spares the caller any thread-safety
 * duty: get is called in index order, never concurrently, never after the run returns. The cost
 * is memory, 3 KiB per image, as for CIFAR-10.
 *
 * Presentation: the caller's interleaved HWC bytes become the planes R, G, B (CHW), the layer's
 * form (data.h). The statistics, when wanted, come from the same byte histograms the file readers
 * fill (ptc__hist_stats), over every image of the train source whatever is held.
 */
#include "data/data.h"

#include <string.h>

void ptc_source_default(ptc_source *s)
{
    if (!s)
        return;
    memset(s, 0, sizeof *s);
    s->size = sizeof *s;
    s->h = PTC__DATA_H;
    s->w = PTC__DATA_W;
}

/* The caller's struct, checked: only its first size bytes are read (an older, smaller struct's
 * missing fields stay 0). */
static int take(ptc_source *dst, const ptc_source *src, const char *which, ptc_error *err)
{
    memset(dst, 0, sizeof *dst);
    if (!src)
        return ptc__err(err, PTC_EINVAL, "", -1, "the %s source is NULL", which);
    ptc_source_default(dst);
    int rc = ptc__params_read(dst, sizeof *dst, src, "ptc_source", err);
    if (rc < 0)
        return rc;
    if (!dst->get)
        return ptc__err(err, PTC_EINVAL, "", -1, "the %s source has no get callback", which);
    if (dst->count < 1)
        return ptc__err(err, PTC_EINVAL, "", -1, "the %s source: count %lld (at least 1 image)",
                        which, (long long)dst->count);
    if (dst->h != PTC__DATA_H || dst->w != PTC__DATA_W)
        return ptc__err(err, PTC_EUNSUPPORTED, "", -1,
                        "the %s source's images are %dx%d; training takes %dx%d images (the "
                        "recipe's RandomCrop(32, padding=4) and input size)",
                        which, dst->h, dst->w, PTC__DATA_H, PTC__DATA_W);
    return 0;
}

int ptc__callback_read(ptc__split *out, const ptc_source *src, const char *which, int classes,
                       const ptc__read_params *rp, ptc_error *err)
{
    memset(out, 0, sizeof *out);
    ptc_source s;
    int rc = take(&s, src, which, err);
    if (rc < 0)
        return rc;
    if (classes < 1 || classes > 256)
        return ptc__err(err, PTC_EINVAL, "", -1, "%d classes (1 to 256 for a source)", classes);
    if (rp->max_samples > 0 && s.count > rp->max_samples)
        return ptc__err(err, PTC_ELIMIT, "", -1,
                        "the %s source has %lld images, more than the limit of %lld", which,
                        (long long)s.count, (long long)rp->max_samples);
    int64_t hold = rp->keep < 0 || rp->keep > s.count ? s.count : rp->keep;
    /* Every image goes through the histograms when they are wanted, only the held ones else. */
    int64_t visit = rp->hist ? s.count : hold;
    uint8_t hwc[PTC__DATA_PIXELS];
    if (hold > 0 && (!(out->images = ptc__malloc((size_t)hold * PTC__DATA_PIXELS)) ||
                     !(out->labels = ptc__malloc((size_t)hold)))) {
        ptc__split_free(out);
        return ptc__err(err, PTC_ENOMEM, "", -1, "out of memory for the %s source's %lld images",
                        which, (long long)hold);
    }
    for (int64_t i = 0; i < visit; i++) {
        int64_t label = -1;
        ptc_error e;
        ptc__err_clear(&e);
        memset(hwc, 0, sizeof hwc); /* a get that writes less leaves zeros, never stale bytes */
        rc = s.get(s.ctx, i, hwc, &label, &e);
        if (rc < 0) {
            if (err) {
                if (e.code == 0)
                    ptc__err(err, rc, "", -1, "get returned %d (%s)", rc, ptc_strerror(rc));
                else
                    *err = e;
                err->code = rc;
                ptc__err_prefix(err, "the %s source, image %lld: ", which, (long long)i);
            }
            ptc__split_free(out);
            return rc;
        }
        if (label < 0 || label >= classes) {
            ptc__split_free(out);
            return ptc__err(err, PTC_EINVAL, "", -1,
                            "the %s source, image %lld: label %lld is not one of the %d classes",
                            which, (long long)i, (long long)label, classes);
        }
        for (int c = 0; c < PTC__DATA_C; c++) {
            uint64_t *hist = rp->hist ? rp->hist[c] : NULL;
            uint8_t *plane = i < hold ? out->images + (size_t)i * PTC__DATA_PIXELS +
                                            (size_t)c * PTC__DATA_H * PTC__DATA_W
                                      : NULL;
            for (int p = 0; p < PTC__DATA_H * PTC__DATA_W; p++) {
                uint8_t v = hwc[p * PTC__DATA_C + c];
                if (plane)
                    plane[p] = v;
                if (hist)
                    hist[v]++;
            }
        }
        if (i < hold)
            out->labels[i] = (uint8_t)label;
    }
    out->n = hold;
    return 0;
}
