// The screenshot PNG writer/reader and the screenshot check.
#include "gui/png.h"

#include <gtest/gtest.h>

#include <cstring>

namespace oomb::gui {
namespace {

Image gradient(int w, int h) {
  Image img{w, h, std::vector<uint8_t>(static_cast<size_t>(w) * h * 3)};
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      uint8_t* p = &img.rgb[(static_cast<size_t>(y) * w + x) * 3];
      p[0] = static_cast<uint8_t>(x * 7);
      p[1] = static_cast<uint8_t>(y * 13);
      p[2] = static_cast<uint8_t>((x ^ y) * 3);
    }
  return img;
}

TEST(Png, KnownChecksums) {
  const char* s = "123456789";
  EXPECT_EQ(crc32(reinterpret_cast<const uint8_t*>(s), 9), 0xCBF43926u);
  EXPECT_EQ(adler32(reinterpret_cast<const uint8_t*>("Wikipedia"), 9), 0x11E60398u);
}

TEST(Png, RoundTripsEdgeSizes) {
  for (auto [w, h] : {std::pair{1, 1}, {3, 7}, {17, 1}, {300, 257}}) {
    const Image img = gradient(w, h);
    const auto bytes = encode_png(img);
    const Image back = decode_png(bytes, "memory");
    EXPECT_EQ(back.width, w);
    EXPECT_EQ(back.height, h);
    EXPECT_EQ(back.rgb, img.rgb) << w << "x" << h;
  }
}

TEST(Png, RejectsCorruption) {
  auto bytes = encode_png(gradient(5, 5));
  bytes[20] ^= 0xFF;  // inside IHDR: CRC no longer matches
  EXPECT_THROW(decode_png(bytes, "memory"), std::exception);
  EXPECT_THROW(decode_png({1, 2, 3}, "memory"), std::exception);
}

TEST(Png, ScreenshotCheckFindsBlankAndUniformRegions) {
  Image blank{64, 48, std::vector<uint8_t>(64 * 48 * 3, 30)};
  EXPECT_NE(check_screenshot(blank, 64, 48), "");
  EXPECT_NE(check_screenshot(gradient(64, 48), 65, 48), "");  // size
  EXPECT_EQ(check_screenshot(gradient(64, 48), 64, 48), "");
  Image half = gradient(64, 48);
  for (int y = 0; y < 16; ++y) std::memset(&half.rgb[static_cast<size_t>(y) * 64 * 3], 0, 64 * 3);  // top band flat
  EXPECT_NE(check_screenshot(half, 64, 48), "");
}

}  // namespace
}  // namespace oomb::gui
