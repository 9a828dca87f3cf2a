// CRC-32 (IEEE 802.3 polynomial, as in zlib and PNG) to detect corrupted file headers.
#pragma once
#include <cstddef>
#include <cstdint>

namespace fathom {

uint32_t crc32(const void* data, size_t size);

}  // namespace fathom
