// The CPU allocator keeps freed blocks for reuse (core/allocator.cpp); this gives them back to the
// heap. A measurement that must not depend on what earlier work left cached starts with it.
#pragma once

namespace fathom {

void release_cached_host_memory();

}  // namespace fathom
