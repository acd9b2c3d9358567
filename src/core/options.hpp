// The options of dmuon.h's DMUON_OPTIONS_LIST as the library reads them:
// the caller's struct (of this or an older layout) taken in, and every
// field checked by the rule the list gives it.
#pragma once
#include <cstddef>

#include "dmuon/dmuon.h"

namespace dmuon {

// Throws DMUON_ERR_INVALID_VALUE naming the first field that breaks its rule.
// Shared by the constructor, every setter and the restore.
void validate_options(const dmuon_options_t& o);

// The caller's options (NULL: the defaults) as this library's struct: the
// fields of the caller's layout version copied, later ones at their
// defaults. Throws DMUON_ERR_OPTIONS_VERSION for a struct not made by
// DMUON_OPTIONS_INIT, or made by a newer dmuon.h (version or size larger
// than this library knows), as docs/errors.md says.
dmuon_options_t read_options(const dmuon_options_t* given, const char* call);

// Bytes of dmuon_options_t at layout version v (1..DMUON_OPTIONS_VERSION).
std::size_t options_size_of_version(uint32_t v);

// Same for dmuon_checkpoint_options_t (NULL: the defaults).
dmuon_checkpoint_options_t read_checkpoint_options(const dmuon_checkpoint_options_t* given, const char* call);

}  // namespace dmuon
