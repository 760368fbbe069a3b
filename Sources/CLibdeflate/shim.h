// libdeflate (Debian's libdeflate-dev): whole-buffer DEFLATE in zlib format,
// what frames are compressed with where it is available (Linux).
#include <libdeflate.h>
