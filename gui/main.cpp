// oomb-gui: the what-if front end. A fixed dashboard of panels over one ViewModel:
//   left: inputs, summary; right: memory breakdown | curves, timeline, pool occupancy | feasibility.
// `--screenshot out.png` renders N frames (headless under Xvfb), reads the framebuffer and writes
// a PNG, for tests and docs.
#include <GLFW/glfw3.h>
#include <imgui.h>
#include <imgui_impl_glfw.h>
#include <imgui_impl_opengl3.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <optional>
#include <string>

#include "core/error.h"
#include "core/files.h"
#include "core/units.h"
#include "gui/panels/chart.h"
#include "gui/panels/panels.h"
#include "gui/png.h"
#include "gui/view_model.h"
#include "models/specs.h"

namespace {

using namespace oomb;
using namespace oomb::gui;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string screenshot;
  int frames = 3;
  int width = 1280;
  int height = 800;
  std::string model, gpu, host, context, attention, trace;
  std::optional<int> rank;  // --rank: which rank of a multi-rank --trace to overlay
  std::optional<int> gpus;  // --gpus: tensor-parallel GPUs (several: the multi-GPU layouts tab)
};

// No display or no OpenGL 3.0 context: not bad input (2) nor out of memory (3); README's table.
constexpr int kExitNoDisplay = 5;

void glfw_error(int code, const char* what) { std::fprintf(stderr, "oomb-gui: GLFW error %d: %s\n", code, what); }

// A fixed-position, non-movable panel window.
bool panel(const char* title, float x, float y, float w, float h) {
  ImGui::SetNextWindowPos({x, y}, ImGuiCond_Always);
  ImGui::SetNextWindowSize({w, h}, ImGuiCond_Always);
  return ImGui::Begin(title, nullptr, ImGuiWindowFlags_NoMove | ImGuiWindowFlags_NoResize | ImGuiWindowFlags_NoCollapse |
                                          ImGuiWindowFlags_NoSavedSettings | ImGuiWindowFlags_NoBringToFrontOnFocus);
}

void draw_dashboard(ViewModel& vm, UiState& ui) {
  const ImVec2 d = ImGui::GetIO().DisplaySize;
  const float left_w = std::max(300.0f, d.x * 0.24f);
  const float rx = left_w, rw = d.x - left_w;
  const float summary_h = std::max(250.0f, d.y * 0.31f);
  const float inputs_h = d.y - summary_h;
  const float row1 = d.y * 0.34f, row2 = d.y * 0.33f, row3 = d.y - row1 - row2;
  if (panel("Inputs", 0, 0, left_w, inputs_h)) draw_inputs_panel(vm, ui);
  ImGui::End();
  if (panel("Summary (hover a number for its formula)", 0, inputs_h, left_w, summary_h)) draw_summary_panel(vm);
  ImGui::End();
  const float mem_w = rw * 0.46f;  // the memory table's buffer, tier, bytes and share columns whole at 1280 wide
  if (panel("Memory breakdown", rx, 0, mem_w, row1)) draw_memory_panel(vm);
  ImGui::End();
  if (panel("Memory and time vs context", rx + mem_w, 0, rw - mem_w, row1)) draw_curves_panel(vm);
  ImGui::End();
  if (panel("Timeline (wheel: zoom, drag: pan)", rx, row1, rw, row2)) draw_timeline_panel(vm, ui);
  ImGui::End();
  // A multi-rank run overlaid: its ranks between the pool and the feasibility map.
  const Overlay* ov = vm.overlay();
  const bool ranks = ov && !ov->ranks.empty();
  const float ranks_w = ranks ? rw * 0.29f : 0.0f;
  const float pool_w = ranks ? rw * 0.27f : rw * 0.5f;
  if (panel("Pool occupancy", rx, row1 + row2, pool_w, row3)) draw_pool_panel(vm);
  ImGui::End();
  if (ranks_w > 0) {
    if (panel("Ranks of the measured run", rx + pool_w, row1 + row2, ranks_w, row3)) draw_ranks_panel(vm, ui);
    ImGui::End();
  }
  if (panel("Feasibility map (click a cell)", rx + pool_w + ranks_w, row1 + row2, rw - pool_w - ranks_w, row3))
    draw_feasibility_panel(vm);
  ImGui::End();
}

Image read_framebuffer(int w, int h) {
  Image img{w, h, std::vector<uint8_t>(static_cast<size_t>(w) * h * 3)};
  std::vector<uint8_t> raw(img.rgb.size());
  glPixelStorei(GL_PACK_ALIGNMENT, 1);
  glReadBuffer(GL_BACK);
  glReadPixels(0, 0, w, h, GL_RGB, GL_UNSIGNED_BYTE, raw.data());
  // OpenGL's first row is the bottom one; PNG's is the top one.
  const size_t stride = static_cast<size_t>(w) * 3;
  for (int y = 0; y < h; ++y) std::memcpy(&img.rgb[static_cast<size_t>(y) * stride], &raw[static_cast<size_t>(h - 1 - y) * stride], stride);
  return img;
}

int run(const Options& opt) {
  // The screenshot's path is checked before anything is computed or rendered (exit 2).
  check_writable(opt.screenshot, "--screenshot");
  check_distinct_paths({{"--model", opt.model}, {"--gpu", opt.gpu}, {"--host", opt.host}, {"--trace", opt.trace}},
                       {{"--screenshot", opt.screenshot}});
  if (opt.rank && opt.trace.empty())
    throw Error("--rank", std::to_string(*opt.rank), "picks a rank of the measured run given by --trace",
                "add --trace t.json (rank 0's trace of an `mpirun -np N oomb run --trace t.json` run)");
  // Bad specs are refused here, by flag, file and key (exit 2), not rendered as the default scenario.
  if (!opt.model.empty()) models::load_model(opt.model);
  if (!opt.gpu.empty()) models::load_gpu(opt.gpu);
  if (!opt.host.empty()) models::load_host(opt.host);
  Inputs in;
  if (!opt.model.empty()) in.model = opt.model;
  if (!opt.gpu.empty()) in.gpu = opt.gpu;
  if (!opt.host.empty()) in.host = opt.host;
  if (!opt.context.empty()) in.config.context_tokens = parse_tokens(opt.context, "--context");
  if (!opt.attention.empty()) in.config.attention = step::attention_from_string(opt.attention, "--attention");
  if (opt.gpus) in.config.gpus = *opt.gpus;
  ViewModel vm(in);
  UiState ui;
  std::snprintf(ui.context_text, sizeof(ui.context_text), "%lld", static_cast<long long>(in.config.context_tokens));
  if (!opt.trace.empty()) {
    std::snprintf(ui.trace_path, sizeof(ui.trace_path), "%s", opt.trace.c_str());
    const std::string msg = vm.load_trace(opt.trace, /*adopt_run_config=*/true);
    if (!msg.empty()) throw Error("--trace", opt.trace, msg);
    ui.trace_message = "loaded";
    if (opt.rank) {
      const std::string why = vm.select_rank(*opt.rank);
      if (!why.empty()) throw Error("--rank", std::to_string(*opt.rank), why);
    }
    std::snprintf(ui.context_text, sizeof(ui.context_text), "%lld",
                  static_cast<long long>(vm.inputs().config.context_tokens));
  }
  if (!vm.results().ok) throw Error(vm.results().error);
  // A screenshot shows the finished timeline: one too large to simulate is refused as the CLI's
  // --timeline is, before a window opens (interactively the timeline panel says why instead).
  if (!opt.screenshot.empty() && !vm.results().timeline_refused.empty())
    throw Error("--screenshot", opt.screenshot, "cannot show the timeline: " + vm.results().timeline_refused);
  std::printf("oomb-gui: recompute %.3f ms\n", vm.results().compute_ms);
  if (const Overlay* ov = vm.overlay(); ov && !ov->ranks.empty())
    std::printf("oomb-gui: overlay rank %d of %d (%s)\n", ov->rank, ov->world, ov->path.c_str());

  glfwSetErrorCallback(glfw_error);
  if (!glfwInit()) {
    std::fprintf(stderr, "oomb-gui: cannot open a display (DISPLAY=%s); run under a desktop session or "
                         "`xvfb-run -a -s \"-screen 0 1280x800x24\" oomb-gui ...`\n",
                 std::getenv("DISPLAY") ? std::getenv("DISPLAY") : "unset");
    return kExitNoDisplay;
  }
  glfwWindowHint(GLFW_CONTEXT_VERSION_MAJOR, 3);
  glfwWindowHint(GLFW_CONTEXT_VERSION_MINOR, 0);
  GLFWwindow* window = glfwCreateWindow(opt.width, opt.height, "oomb what-if", nullptr, nullptr);
  if (!window) {
    std::fprintf(stderr, "oomb-gui: cannot create an OpenGL 3.0 window\n");
    glfwTerminate();
    return kExitNoDisplay;
  }
  glfwMakeContextCurrent(window);
  glfwSwapInterval(opt.screenshot.empty() ? 1 : 0);

  IMGUI_CHECKVERSION();
  ImGui::CreateContext();
  ImGuiIO& io = ImGui::GetIO();
  io.IniFilename = nullptr;
  ImGui::StyleColorsDark();
  ImGuiStyle& style = ImGui::GetStyle();
  style.WindowRounding = 0;
  style.FramePadding = {5, 2};
  style.ItemSpacing = {6, 3};
  style.WindowPadding = {6, 4};
  ImGui_ImplGlfw_InitForOpenGL(window, true);
  ImGui_ImplOpenGL3_Init("#version 130");

  const bool shot = !opt.screenshot.empty();
  // Screenshots show the finished timeline: wait for the background simulation first.
  if (shot) vm.wait_timeline(120);

  int frame = 0;
  double frame_total_s = 0, frame_cpu_s = 0;
  int timed_frames = 0;
  int rc = 0;
  while (!glfwWindowShouldClose(window)) {
    const auto t0 = Clock::now();
    glfwPollEvents();
    vm.poll_timeline();
    ImGui_ImplOpenGL3_NewFrame();
    ImGui_ImplGlfw_NewFrame();
    ImGui::NewFrame();
    chart::reset_cut_cells();
    draw_dashboard(vm, ui);
    ImGui::Render();
    const double cpu_s = std::chrono::duration<double>(Clock::now() - t0).count();
    int fw = 0, fh = 0;
    glfwGetFramebufferSize(window, &fw, &fh);
    glViewport(0, 0, fw, fh);
    glClearColor(0.08f, 0.08f, 0.10f, 1.0f);
    glClear(GL_COLOR_BUFFER_BIT);
    ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
    ++frame;
    if (shot) {
      glFinish();
      const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
      if (frame > 1) {  // the first frame builds the font atlas and shaders
        frame_total_s += dt;
        frame_cpu_s += cpu_s;
        ++timed_frames;
      }
      if (frame >= opt.frames) {
        try {
          write_png(read_framebuffer(fw, fh), opt.screenshot);
          const double n = std::max(timed_frames, 1);
          std::printf("oomb-gui: wrote %s (%dx%d) after %d frames; frame time %.2f ms (UI build %.2f ms + GL "
                      "render; mean of %d)\n",
                      opt.screenshot.c_str(), fw, fh, frame, 1e3 * frame_total_s / n, 1e3 * frame_cpu_s / n, timed_frames);
          // The layout check: table cells narrower than their text in the frame written.
          std::printf("oomb-gui: layout: %d table cells cut\n", chart::cut_cells());
          if (const Overlay* ov = vm.overlay(); ov && ui.rank_combo_drawn)
            std::printf("oomb-gui: the ranks panel shows rank %d of %d in its combo\n", ov->rank, ov->world);
        } catch (const std::exception& e) {
          std::fprintf(stderr, "oomb-gui: error: --screenshot: %s\n", e.what());
          rc = 2;  // a failed write, as every oomb output
        }
        break;
      }
    }
    glfwSwapBuffers(window);
  }
  ImGui_ImplOpenGL3_Shutdown();
  ImGui_ImplGlfw_Shutdown();
  ImGui::DestroyContext();
  glfwDestroyWindow(window);
  glfwTerminate();
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"oomb-gui: what-if explorer for chunk-recurrent long-context training"};
  app.footer("Exit status: 0 done, 2 bad input (a flag, a file, an unwritable --screenshot path, a timeline too large "
             "to simulate for --screenshot) or a failed write, 4 internal error, 5 no display (no X display or no "
             "OpenGL 3.0 context: run under a desktop session or xvfb-run)");
  Options opt;
  app.add_option("--screenshot", opt.screenshot, "Render --frames frames, write the window as a PNG and exit");
  // Bounded: X refuses windows beyond its maximum size (BadValue), and frames are rendered one by one.
  app.add_option("--frames", opt.frames, "Frames to render before the screenshot (1..10000)")
      ->capture_default_str()
      ->check(CLI::Range(1, 10000));
  app.add_option("--width", opt.width, "Window width (64..8192)")->capture_default_str()->check(CLI::Range(64, 8192));
  app.add_option("--height", opt.height, "Window height (64..8192)")->capture_default_str()->check(CLI::Range(64, 8192));
  app.add_option("--model", opt.model, "Initial model (catalog id, oomb.model/1 JSON, or Hugging Face config.json / model folder; "
                 "default qwen2.5-7b)");
  app.add_option("--gpu", opt.gpu, "Initial GPU (default h200)");
  app.add_option("--host", opt.host, "Initial host (default: the GPU's usual host)");
  app.add_option("--context", opt.context, "Initial context: 4M, 128K, 100000 (default 4M)");
  app.add_option("--attention", opt.attention, "Initial attention: dense or sparse");
  app.add_option("--gpus", opt.gpus,
                 "Initial tensor-parallel GPUs (1..64; several show the multi-GPU layouts: FSDP2 / ZeRO-3 with context "
                 "parallelism over them, beside the feasibility map)")
      ->check(CLI::Range(1, 64));
  app.add_option("--trace", opt.trace, "Measured trace (oomb.trace/1 JSON, from `oomb run --trace`) to overlay on the timeline; the inputs take the run's model and configuration");
  app.add_option("--rank", opt.rank,
                 "With --trace of rank 0 of a multi-rank run (mpirun): overlay rank K's trace (t.rank<K>.json beside "
                 "it) instead of rank 0's; the ranks panel lists them all")
      ->check(CLI::Range(0, 1 << 20));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help exits 0; every other parse error is bad input: exit 2 (not CLI11's own codes).
    if (e.get_exit_code() == 0) return app.exit(e);
    std::fprintf(stderr, "oomb-gui: error: %s\n(see oomb-gui --help)\n", e.what());
    return 2;
  }
  try {
    return run(opt);
  } catch (const Error& e) {
    std::fprintf(stderr, "oomb-gui: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "oomb-gui: internal error (a bug in oomb, please report it): %s\n", e.what());
    return 4;
  }
}
