// oomb-gui-check-png FILE WIDTH HEIGHT: checks a screenshot written by `oomb-gui --screenshot`
// (size, not blank, no uniform region). Exit 0 when fine, 1 with the reason otherwise.
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "gui/png.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: oomb-gui-check-png FILE WIDTH HEIGHT\n");
    return 2;
  }
  try {
    const auto img = oomb::gui::read_png(argv[1]);
    const std::string problem = oomb::gui::check_screenshot(img, std::atoi(argv[2]), std::atoi(argv[3]));
    if (!problem.empty()) {
      std::fprintf(stderr, "%s: %s\n", argv[1], problem.c_str());
      return 1;
    }
    std::printf("%s: %dx%d, ok\n", argv[1], img.width, img.height);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "oomb-gui-check-png: %s\n", e.what());
    return 1;
  }
}
