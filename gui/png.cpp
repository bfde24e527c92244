#include "gui/png.h"

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <set>

#include "core/error.h"

#ifdef OOMB_GUI_HAVE_ZLIB
#include <zlib.h>
#endif

namespace oomb::gui {
namespace {

const std::array<uint32_t, 256>& crc_table() {
  static const std::array<uint32_t, 256> t = [] {
    std::array<uint32_t, 256> r{};
    for (uint32_t n = 0; n < 256; ++n) {
      uint32_t c = n;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      r[n] = c;
    }
    return r;
  }();
  return t;
}

void put_u32(std::vector<uint8_t>& out, uint32_t v) {
  out.push_back(static_cast<uint8_t>(v >> 24));
  out.push_back(static_cast<uint8_t>(v >> 16));
  out.push_back(static_cast<uint8_t>(v >> 8));
  out.push_back(static_cast<uint8_t>(v));
}

uint32_t get_u32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

void put_chunk(std::vector<uint8_t>& out, const char* type, const std::vector<uint8_t>& data) {
  put_u32(out, static_cast<uint32_t>(data.size()));
  const size_t start = out.size();
  out.insert(out.end(), type, type + 4);
  out.insert(out.end(), data.begin(), data.end());
  put_u32(out, crc32(out.data() + start, out.size() - start));
}

// zlib stream of stored deflate blocks (no compression), the fallback without zlib.
std::vector<uint8_t> zlib_stored(const std::vector<uint8_t>& raw) {
  std::vector<uint8_t> z = {0x78, 0x01};
  size_t pos = 0;
  do {
    const size_t n = std::min<size_t>(65535, raw.size() - pos);
    const bool last = pos + n == raw.size();
    z.push_back(last ? 1 : 0);
    z.push_back(static_cast<uint8_t>(n));
    z.push_back(static_cast<uint8_t>(n >> 8));
    z.push_back(static_cast<uint8_t>(~n));
    z.push_back(static_cast<uint8_t>(~n >> 8));
    z.insert(z.end(), raw.begin() + static_cast<ptrdiff_t>(pos), raw.begin() + static_cast<ptrdiff_t>(pos + n));
    pos += n;
  } while (pos < raw.size());
  put_u32(z, adler32(raw.data(), raw.size()));
  return z;
}

#ifndef OOMB_GUI_HAVE_ZLIB
std::vector<uint8_t> inflate_stored(const std::vector<uint8_t>& z, size_t expect, const std::string& where) {
  if (z.size() < 6 || (z[0] & 0x0F) != 8) throw Error(where, "IDAT", "not a zlib stream");
  std::vector<uint8_t> out;
  out.reserve(expect);
  size_t pos = 2;
  for (;;) {
    if (pos + 5 > z.size()) throw Error(where, "IDAT", "truncated deflate stream");
    const uint8_t hdr = z[pos];
    if ((hdr >> 1) != 0)
      throw Error(where, "IDAT", "compressed deflate block", "this build reads stored blocks only (no zlib)");
    const size_t n = z[pos + 1] | (size_t{z[pos + 2]} << 8);
    pos += 5;
    if (pos + n > z.size()) throw Error(where, "IDAT", "truncated stored block");
    out.insert(out.end(), z.begin() + static_cast<ptrdiff_t>(pos), z.begin() + static_cast<ptrdiff_t>(pos + n));
    pos += n;
    if (hdr & 1) break;
  }
  if (pos + 4 > z.size() || get_u32(&z[pos]) != adler32(out.data(), out.size()))
    throw Error(where, "IDAT", "Adler-32 mismatch");
  return out;
}
#endif

uint8_t paeth(int a, int b, int c) {
  const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
  return static_cast<uint8_t>(pa <= pb && pa <= pc ? a : pb <= pc ? b : c);
}

}  // namespace

uint32_t crc32(const uint8_t* data, size_t n, uint32_t crc) {
  uint32_t c = crc ^ 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) c = crc_table()[(c ^ data[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t adler32(const uint8_t* data, size_t n, uint32_t adler) {
  uint32_t a = adler & 0xFFFF, b = adler >> 16;
  for (size_t i = 0; i < n; ++i) {
    a = (a + data[i]) % 65521;
    b = (b + a) % 65521;
  }
  return (b << 16) | a;
}

std::vector<uint8_t> encode_png(const Image& img) {
  OOMB_ASSERT(img.width > 0 && img.height > 0 && img.rgb.size() == static_cast<size_t>(img.width) * img.height * 3);
  const size_t stride = static_cast<size_t>(img.width) * 3;
  // Filter "Sub" (1) on every row: flat UI colours become runs of zeros that deflate well.
  std::vector<uint8_t> raw;
  raw.reserve((stride + 1) * img.height);
  for (int y = 0; y < img.height; ++y) {
    const uint8_t* row = &img.rgb[y * stride];
    raw.push_back(1);
    for (size_t i = 0; i < stride; ++i) raw.push_back(static_cast<uint8_t>(row[i] - (i >= 3 ? row[i - 3] : 0)));
  }
  std::vector<uint8_t> z;
#ifdef OOMB_GUI_HAVE_ZLIB
  uLongf zn = compressBound(static_cast<uLong>(raw.size()));
  z.resize(zn);
  if (compress2(z.data(), &zn, raw.data(), static_cast<uLong>(raw.size()), 6) != Z_OK) z = zlib_stored(raw);
  else z.resize(zn);
#else
  z = zlib_stored(raw);
#endif
  std::vector<uint8_t> out = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  std::vector<uint8_t> ihdr;
  put_u32(ihdr, static_cast<uint32_t>(img.width));
  put_u32(ihdr, static_cast<uint32_t>(img.height));
  ihdr.insert(ihdr.end(), {8, 2, 0, 0, 0});  // 8-bit, RGB, deflate, adaptive filters, no interlace
  put_chunk(out, "IHDR", ihdr);
  put_chunk(out, "IDAT", z);
  put_chunk(out, "IEND", {});
  return out;
}

void write_png(const Image& img, const std::string& path) {
  const auto bytes = encode_png(img);
  std::ofstream f(path, std::ios::binary);
  if (!f) throw Error(path, "", "cannot open for writing");
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!f) throw Error(path, "", "write failed");
}

Image decode_png(const std::vector<uint8_t>& b, const std::string& where) {
  static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  if (b.size() < 8 || !std::equal(sig, sig + 8, b.begin())) throw Error(where, "", "not a PNG file");
  Image img;
  int channels = 0;
  std::vector<uint8_t> z;
  size_t pos = 8;
  while (pos + 12 <= b.size()) {
    const uint32_t n = get_u32(&b[pos]);
    const std::string type(reinterpret_cast<const char*>(&b[pos + 4]), 4);
    if (pos + 12 + n > b.size()) throw Error(where, type, "truncated chunk");
    const uint8_t* d = &b[pos + 8];
    if (get_u32(d + n) != crc32(&b[pos + 4], n + 4)) throw Error(where, type, "CRC mismatch");
    if (type == "IHDR") {
      img.width = static_cast<int>(get_u32(d));
      img.height = static_cast<int>(get_u32(d + 4));
      if (d[8] != 8 || (d[9] != 2 && d[9] != 6) || d[12] != 0)
        throw Error(where, "IHDR", "unsupported format", "8-bit RGB or RGBA, not interlaced");
      channels = d[9] == 2 ? 3 : 4;
    } else if (type == "IDAT") {
      z.insert(z.end(), d, d + n);
    } else if (type == "IEND") {
      break;
    }
    pos += 12 + n;
  }
  if (img.width <= 0 || img.height <= 0 || channels == 0) throw Error(where, "IHDR", "missing or empty");
  const size_t stride = static_cast<size_t>(img.width) * channels;
  const size_t expect = (stride + 1) * img.height;
  std::vector<uint8_t> raw;
#ifdef OOMB_GUI_HAVE_ZLIB
  raw.resize(expect);
  uLongf rn = static_cast<uLongf>(expect);
  if (uncompress(raw.data(), &rn, z.data(), static_cast<uLong>(z.size())) != Z_OK || rn != expect)
    throw Error(where, "IDAT", "cannot inflate image data");
#else
  raw = inflate_stored(z, expect, where);
#endif
  if (raw.size() != expect) throw Error(where, "IDAT", "image data has the wrong size");
  std::vector<uint8_t> cur(stride), prev(stride, 0);
  img.rgb.resize(static_cast<size_t>(img.width) * img.height * 3);
  for (int y = 0; y < img.height; ++y) {
    const uint8_t* line = &raw[y * (stride + 1)];
    const uint8_t f = line[0];
    for (size_t i = 0; i < stride; ++i) {
      const int a = i >= static_cast<size_t>(channels) ? cur[i - channels] : 0;
      const int up = prev[i], c = i >= static_cast<size_t>(channels) ? prev[i - channels] : 0;
      const uint8_t x = line[1 + i];
      switch (f) {
        case 0: cur[i] = x; break;
        case 1: cur[i] = static_cast<uint8_t>(x + a); break;
        case 2: cur[i] = static_cast<uint8_t>(x + up); break;
        case 3: cur[i] = static_cast<uint8_t>(x + (a + up) / 2); break;
        case 4: cur[i] = static_cast<uint8_t>(x + paeth(a, up, c)); break;
        default: throw Error(where, "IDAT", "bad filter type " + std::to_string(f));
      }
    }
    for (int x = 0; x < img.width; ++x)
      for (int k = 0; k < 3; ++k) img.rgb[(static_cast<size_t>(y) * img.width + x) * 3 + k] = cur[x * channels + k];
    std::swap(cur, prev);
  }
  return img;
}

Image read_png(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(path, "", "cannot open");
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return decode_png(bytes, path);
}

std::string check_screenshot(const Image& img, int expect_width, int expect_height) {
  if (img.width != expect_width || img.height != expect_height)
    return "size " + std::to_string(img.width) + "x" + std::to_string(img.height) + ", expected " +
           std::to_string(expect_width) + "x" + std::to_string(expect_height);
  auto colours = [&](int x0, int y0, int x1, int y1) {
    std::set<uint32_t> s;
    for (int y = y0; y < y1; y += 2)
      for (int x = x0; x < x1; x += 2) {
        const uint8_t* p = img.pixel(x, y);
        s.insert((uint32_t{p[0]} << 16) | (uint32_t{p[1]} << 8) | p[2]);
        if (s.size() > 64) return s.size();
      }
    return s.size();
  };
  if (colours(0, 0, img.width, img.height) < 16) return "blank: fewer than 16 distinct colours";
  // A 4 x 3 grid over the dashboard: every cell holds part of some panel (text, chart or bar).
  constexpr int kCols = 4, kRows = 3;
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < kCols; ++c) {
      const int x0 = c * img.width / kCols, x1 = (c + 1) * img.width / kCols;
      const int y0 = r * img.height / kRows, y1 = (r + 1) * img.height / kRows;
      if (colours(x0, y0, x1, y1) < 3)
        return "region (" + std::to_string(x0) + "," + std::to_string(y0) + ")-(" + std::to_string(x1) + "," +
               std::to_string(y1) + ") is uniform";
    }
  return "";
}

}  // namespace oomb::gui
