// Swift Testing runs every test at once unless the environment variable
// SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH bounds it. All ~1,000 of
// this package's tests together, on two cores with anything else running,
// wait past their deadlines (README, Tests). `scripts/test` sets the
// variable; so that a plain `swift test` runs bounded too, this constructor
// sets it to four tests per core before `main`, when it is unset, and
// before Swift Testing reads it.
#include "CTestParallelism.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static const char *const widthVariable = "SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH";
static int defaulted = 0;

__attribute__((constructor))
static void syncengine_bound_test_parallelism(void) {
    if (getenv(widthVariable) != NULL) return;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores < 1) cores = 2;
    char width[32];
    snprintf(width, sizeof width, "%ld", cores * 4);
    if (setenv(widthVariable, width, 0) == 0) defaulted = 1;
}

long syncengine_test_parallelism_width(void) {
    const char *value = getenv(widthVariable);
    if (value == NULL) return 0;
    char *end = NULL;
    long width = strtol(value, &end, 10);
    return (end != value && *end == '\0') ? width : 0;
}

int syncengine_test_parallelism_was_defaulted(void) {
    return defaulted;
}
