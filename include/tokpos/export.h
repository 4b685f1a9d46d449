/* tokpos/export.h: which declarations libtokpos.so exports.
 *
 * The library is built with hidden visibility: only what is marked TOKPOS_API
 * (the C functions, and the documented C++ API in namespace tokpos) is
 * visible to programs that link it. Plain C, so tokpos.h can include it. */
#ifndef TOKPOS_EXPORT_H
#define TOKPOS_EXPORT_H

#if defined(__GNUC__)
#define TOKPOS_API __attribute__((visibility("default")))
#else
#define TOKPOS_API
#endif

#endif /* TOKPOS_EXPORT_H */
