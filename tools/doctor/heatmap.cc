// chorus-doctor: the pairwise bandwidth matrix as a PNG heatmap, written without any image library: an RGB image,
// stored (uncompressed) deflate blocks in a zlib stream, CRC-32 and Adler-32 by hand. Rank numbers label the rows
// and columns in a 3x5 digit font; a colour bar runs from the slowest pair (dark) to the fastest (bright), its ends
// labelled in MB/s.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tools/doctor/doctor.h"

namespace chorus {
namespace doctor {
namespace {

struct Rgb {
  uint8_t r, g, b;
};

// Dark purple through teal to yellow (three stops of the viridis map).
Rgb colorOf(double t) {
  const Rgb stops[3] = {{68, 1, 84}, {33, 145, 140}, {253, 231, 37}};
  t = t < 0 ? 0 : t > 1 ? 1 : t;
  int i = t < 0.5 ? 0 : 1;
  double u = t < 0.5 ? t * 2 : (t - 0.5) * 2;
  auto mix = [&](uint8_t a, uint8_t b) { return static_cast<uint8_t>(a + (b - a) * u); };
  return {mix(stops[i].r, stops[i + 1].r), mix(stops[i].g, stops[i + 1].g), mix(stops[i].b, stops[i + 1].b)};
}

// 3x5 digits, one row a byte, the high three bits of five used.
constexpr uint8_t kDigits[10][5] = {{7, 5, 5, 5, 7}, {2, 6, 2, 2, 7}, {7, 1, 7, 4, 7}, {7, 1, 7, 1, 7},
                                    {5, 5, 7, 1, 1}, {7, 4, 7, 1, 7}, {7, 4, 7, 5, 7}, {7, 1, 1, 1, 1},
                                    {7, 5, 7, 5, 7}, {7, 5, 7, 1, 7}};

class Image {
 public:
  Image(int w, int h) : w_(w), h_(h), px_(static_cast<size_t>(w) * h, {255, 255, 255}) {}
  void fill(int x, int y, int w, int h, Rgb c) {
    for (int j = y; j < y + h && j < h_; j++)
      for (int i = x; i < x + w && i < w_; i++) px_[static_cast<size_t>(j) * w_ + i] = c;
  }
  void number(int x, int y, int v, int scale) {
    std::string s = std::to_string(v);
    for (char ch : s) {
      const uint8_t* d = kDigits[ch - '0'];
      for (int row = 0; row < 5; row++)
        for (int col = 0; col < 3; col++)
          if (d[row] & (4 >> col)) fill(x + col * scale, y + row * scale, scale, scale, {0, 0, 0});
      x += 4 * scale;
    }
  }
  std::vector<uint8_t> png() const;

 private:
  int w_, h_;
  std::vector<Rgb> px_;
};

uint32_t crc32(const uint8_t* p, size_t n, uint32_t c = 0xffffffffu) {
  static uint32_t table[256];
  static bool ready = false;
  if (!ready) {
    for (uint32_t i = 0; i < 256; i++) {
      uint32_t k = i;
      for (int j = 0; j < 8; j++) k = k & 1 ? 0xedb88320u ^ (k >> 1) : k >> 1;
      table[i] = k;
    }
    ready = true;
  }
  for (size_t i = 0; i < n; i++) c = table[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c;
}

void put32(std::vector<uint8_t>* o, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) o->push_back(static_cast<uint8_t>(v >> s));
}

void chunk(std::vector<uint8_t>* o, const char* type, const std::vector<uint8_t>& data) {
  put32(o, static_cast<uint32_t>(data.size()));
  size_t start = o->size();
  o->insert(o->end(), type, type + 4);
  o->insert(o->end(), data.begin(), data.end());
  put32(o, crc32(o->data() + start, o->size() - start) ^ 0xffffffffu);
}

std::vector<uint8_t> Image::png() const {
  std::vector<uint8_t> raw;  // scanlines, each with filter type 0
  for (int y = 0; y < h_; y++) {
    raw.push_back(0);
    for (int x = 0; x < w_; x++) {
      const Rgb& c = px_[static_cast<size_t>(y) * w_ + x];
      raw.insert(raw.end(), {c.r, c.g, c.b});
    }
  }
  std::vector<uint8_t> z = {0x78, 0x01};  // zlib header: deflate, no preset dictionary
  for (size_t off = 0; off < raw.size() || off == 0; off += 65535) {
    size_t len = std::min<size_t>(65535, raw.size() - off);
    bool last = off + len >= raw.size();
    z.push_back(last ? 1 : 0);  // a stored block
    z.push_back(static_cast<uint8_t>(len));
    z.push_back(static_cast<uint8_t>(len >> 8));
    z.push_back(static_cast<uint8_t>(~len));
    z.push_back(static_cast<uint8_t>(~len >> 8));
    z.insert(z.end(), raw.begin() + static_cast<long>(off), raw.begin() + static_cast<long>(off + len));
    if (last) break;
  }
  uint32_t a = 1, b = 0;  // Adler-32 of the uncompressed data
  for (uint8_t v : raw) {
    a = (a + v) % 65521;
    b = (b + a) % 65521;
  }
  put32(&z, (b << 16) | a);
  std::vector<uint8_t> out = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  std::vector<uint8_t> ihdr;
  put32(&ihdr, static_cast<uint32_t>(w_));
  put32(&ihdr, static_cast<uint32_t>(h_));
  ihdr.insert(ihdr.end(), {8, 2, 0, 0, 0});  // 8 bits, RGB, deflate, adaptive filters, no interlace
  chunk(&out, "IHDR", ihdr);
  chunk(&out, "IDAT", z);
  chunk(&out, "IEND", {});
  return out;
}

}  // namespace

bool writeHeatmap(const Report& r, const std::string& path, std::string* err) {
  int n = static_cast<int>(r.facts.size());
  int cell = std::max(12, std::min(48, 640 / std::max(1, n)));
  int margin = 28, bar = 16;
  Image img(margin + n * cell + 12 + bar + 8 + 48, margin + n * cell + 8);
  double lo = 1e300, hi = 0;
  std::vector<double> bw(static_cast<size_t>(n) * n, -1);
  for (const PairResult& p : r.pairs) {
    bw[static_cast<size_t>(p.a) * n + p.b] = bw[static_cast<size_t>(p.b) * n + p.a] = p.gbps;
    lo = std::min(lo, p.gbps);
    hi = std::max(hi, p.gbps);
  }
  for (int i = 0; i < n; i++) {
    if (n <= 64 || i % 8 == 0) {
      img.number(margin + i * cell + 2, 6, i, 2);
      img.number(4, margin + i * cell + 2, i, 2);
    }
    for (int j = 0; j < n; j++) {
      double v = bw[static_cast<size_t>(i) * n + j];
      Rgb c = i == j ? Rgb{220, 220, 220} : v < 0 ? Rgb{0, 0, 0} : colorOf(hi > lo ? (v - lo) / (hi - lo) : 1.0);
      img.fill(margin + j * cell, margin + i * cell, cell - 1, cell - 1, c);
    }
  }
  int barX = margin + n * cell + 12, barH = n * cell;
  for (int y = 0; y < barH; y++) img.fill(barX, margin + y, bar, 1, colorOf(1.0 - double(y) / std::max(1, barH - 1)));
  // The bar's ends in MB/s: the fastest pair at the top, the slowest at the bottom.
  if (hi > 0) {
    img.number(barX + bar + 4, margin, static_cast<int>(hi * 1000 + 0.5), 2);
    img.number(barX + bar + 4, margin + barH - 10, static_cast<int>(lo * 1000 + 0.5), 2);
  }
  std::vector<uint8_t> data = img.png();
  FILE* f = fopen(path.c_str(), "wb");
  if (f == nullptr || fwrite(data.data(), 1, data.size(), f) != data.size()) {
    *err = "cannot write " + path + ": " + strerror(errno);
    if (f) fclose(f);
    return false;
  }
  fclose(f);
  return true;
}

}  // namespace doctor
}  // namespace chorus
