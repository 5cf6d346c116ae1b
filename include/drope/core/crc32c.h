// CRC-32C (Castagnoli polynomial, reflected 0x82F63B78; RFC 3720 §B.4) and the "masked" form that
// TFRecord / TensorBoard event files store next to each length and payload.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace drope {

// CRC-32C of `data`, continuing from `crc` (the CRC-32C of whatever came before; 0 to start).
uint32_t crc32c(std::string_view data, uint32_t crc = 0);

// The masked CRC of TFRecord files: rotate right by 15 bits, add 0xa282ead8 (so that a CRC over data
// that itself holds CRCs is not degenerate).
uint32_t mask_crc32c(uint32_t crc);

}  // namespace drope
