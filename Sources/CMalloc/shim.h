// The C library's heap statistics, for benchmarks (`syncsim bench reconnect`).
#if defined(__linux__)
#include <malloc.h>
#elif defined(__APPLE__)
#include <malloc/malloc.h>
#endif
