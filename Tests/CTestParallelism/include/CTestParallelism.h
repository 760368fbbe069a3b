#ifndef SYNCENGINE_CTESTPARALLELISM_H
#define SYNCENGINE_CTESTPARALLELISM_H

/// How many tests Swift Testing runs at once in this test process: the
/// value of SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH as the process
/// started (set by `scripts/test` or by the caller), or four per core, which
/// this library sets before `main` when it was unset; 0 when it is not a
/// number.
long syncengine_test_parallelism_width(void);

/// Whether the width was set by this library (the variable was unset).
int syncengine_test_parallelism_was_defaulted(void);

#endif
