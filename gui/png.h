#pragma once
// Minimal PNG (8-bit RGB) writer and reader for screenshots: zlib-compressed when zlib is built in,
// otherwise stored (uncompressed) deflate blocks with our own CRC-32 / Adler-32. The reader reads
// what the writer writes (filter 0 or any standard filter, non-interlaced RGB/RGBA).
#include <cstdint>
#include <string>
#include <vector>

namespace oomb::gui {

struct Image {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> rgb;  // [height][width][3], top row first
  const uint8_t* pixel(int x, int y) const { return &rgb[(static_cast<size_t>(y) * width + x) * 3]; }
};

uint32_t crc32(const uint8_t* data, size_t n, uint32_t crc = 0);
uint32_t adler32(const uint8_t* data, size_t n, uint32_t adler = 1);

std::vector<uint8_t> encode_png(const Image& img);
void write_png(const Image& img, const std::string& path);  // throws oomb::Error on I/O failure
Image decode_png(const std::vector<uint8_t>& bytes, const std::string& where);  // throws oomb::Error
Image read_png(const std::string& path);

// Screenshot sanity: not blank (many distinct colours) and no large region of one flat colour
// spanning the layout's panels. Returns "" when fine, otherwise what is wrong.
std::string check_screenshot(const Image& img, int expect_width, int expect_height);

}  // namespace oomb::gui
