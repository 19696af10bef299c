/*
 * train_watch.h - the progress line, the --tensorboard event file and the end-of-run summary of
 * `ptc train` (train_watch.c), for cmd_train.c.
 */
#ifndef PTC_TOOLS_TRAIN_WATCH_H
#define PTC_TOOLS_TRAIN_WATCH_H

#include "cli.h"

typedef struct train_watch train_watch;

/* A watcher whose progress line is drawn per mode (CLI_PROGRESS_AUTO, _ALWAYS, _NEVER); NULL when
 * out of memory. */
train_watch *train_watch_new(int mode);
/* p's log, progress, device_status and scalar callbacks (and ctx) become u's; call after every
 * option is parsed (the ETA reads epochs, batch_size and max_steps). */
void train_watch_attach(train_watch *u, ptc_train_params *p);
/* Rank 0 of --tensorboard DIR: loads tool-tensorboard.so, opens the event file in dir and prints
 * its path. 0, or the exit status of the failure (reported). */
int train_watch_tensorboard(train_watch *u, const char *dir);
/* Erases the progress line (the run has ended). */
void train_watch_end_progress(train_watch *u);
/* Rank 0 of a run that resumes and appends to its metrics file: reads the earlier evaluations
 * there (bounded, junk skipped), so that the summary's best covers the whole run. */
void train_watch_history(train_watch *u, const char *metrics);
/* Rank 0, after a run: the summary table on stdout (wall: the command's seconds; failure: the
 * run's error, NULL for none: a failed run is marked, with the files it did not write; a metrics
 * file whose writing failed is marked incomplete). */
void train_watch_summary(const train_watch *u, const ptc_train_params *p,
                         const ptc_train_result *res, int world, double wall,
                         const ptc_error *failure);
/* Seconds on the monotonic clock. */
double train_watch_now(void);
/* Closes the event file (also after a failed run: what was written stays readable) and frees u
 * (NULL accepted). 0, or the exit status of a failed write or close (reported). */
int train_watch_free(train_watch *u);

#endif /* PTC_TOOLS_TRAIN_WATCH_H */
