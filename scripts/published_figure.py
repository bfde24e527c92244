#!/usr/bin/env python3
"""Read the published peak-memory figure and compare it with `oomb simulate --preset oomb-published`.

The only published H200 memory measurements of the method are a chart: the lower right panel of
docs/teaser.png in github.com/wenhaoli-xmu/OOMB ("Peak Memory Usage (GB) on a single H200"; the file
was added in commit 25ee979, git blob 87241ed4855d0bbf90c12797041b6dae3c8faeed). This script does
not ship or download that image: fetch it yourself, e.g.
    git -C OOMB show 87241ed4855d0bbf90c12797041b6dae3c8faeed > teaser.png
and run
    python3 scripts/published_figure.py teaser.png --oomb build/oomb

How the chart is read (pure Python: PNG decoding with zlib, no imaging library):
- the panel's horizontal grid lines are the rows of the panel with more than 250 light-grey pixels;
  the axis labels are 141, 113.25, 85.5, 57.75 and 30 from the top, one grid step (27.75 units) apart
  (the 113.25 line is hidden behind the legend), so a least-squares line through the visible lines
  maps a pixel row to axis units;
- each series is a marker colour (standard: brown, OOMB dense: dark red, OOMB sparse: dark blue);
  the markers are discs of one diameter (the tallest marker seen), drawn in the order sparse,
  dense, standard (where two overlap, the later one's disc is whole). A marker's centre is the middle of its visible rows when
  nothing covers it, else its uncovered edge minus (or plus) the radius; a marker covered whole is
  is reported as hidden (its centre is then within a pixel or two of the covering marker's). The
  standard series has no marker from 128K on (its line ends at 64K: out of memory).
- one pixel is about 0.24 axis units; the readings are good to about +-0.25.
- a marker of which no more than a rim shows (fewer than 3 rows) is reported hidden, whichever
  series it is.
The upper right panel ("Time / Iteration (sec) on a single H200", 8K..128K, 0..300 s, about 0.66 s
per pixel) is read the same way; its markers at 8K and 16K lie on top of each other, so several are
hidden. With --oomb the script also prints the published time per iteration against the step time
`oomb simulate` predicts for the same run (`step_s`).

The axis says "GB". The published code reports memory as `torch.cuda.max_memory_allocated() /
1024**2` and prints it with the unit "MB" (test_efficiency/test.py, chunkoptim/utils.py
History.summary), so the chart's unit is one of: GiB (2^30 bytes), thousands of those "MB" (1000 x
2^20 bytes) or GB (10^9 bytes). The comparison is printed under each; docs/model.md discusses which.
"""
import argparse
import functools
import hashlib
import json
import subprocess
import sys
import zlib

EXPECTED_BLOB = "87241ed4855d0bbf90c12797041b6dae3c8faeed"
PANEL = (1700, 840, 2468, 1486)  # x0, y0, x1, y1 of the memory panel in the 2468 x 1486 image
LEGEND = (1830, 870, 2300, 1010)  # the legend box inside it (its markers are not data)
TICKS = [141.0, 113.25, 85.5, 57.75, 30.0]
CONTEXTS = ["8K", "16K", "32K", "64K", "128K", "256K"]
DRAW_ORDER = ["sparse", "dense", "standard"]  # later series are drawn over earlier ones
# The upper right panel, "Time / Iteration (sec) on a single H200": the same series and markers over
# 8K..128K, axis 0..300 s (the 225 line hidden behind the legend).
TIME_PANEL = (1700, 70, 2468, 716)
TIME_LEGEND = (1830, 160, 2300, 310)
TIME_TICKS = [300.0, 225.0, 150.0, 75.0, 0.0]
TIME_CONTEXTS = ["8K", "16K", "32K", "64K", "128K"]
UNITS = {"GiB": 1.0, "1000 MiB": 1000 * 2**20 / 2**30, "GB": 1e9 / 2**30}  # GiB per axis unit


def decode_png(data):
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        sys.exit("not a PNG file")
    pos, idat, width = 8, b"", None
    while pos < len(data):
        n = int.from_bytes(data[pos:pos + 4], "big")
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            width, height, depth, ctype, _, _, interlace = (int.from_bytes(body[0:4], "big"),
                                                            int.from_bytes(body[4:8], "big"), *body[8:13])
            if depth != 8 or ctype not in (2, 6) or interlace:
                sys.exit("expected an 8-bit RGB or RGBA, non-interlaced PNG")
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw, stride = zlib.decompress(idat), width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], (prev[i - bpp] if i >= bpp else 0)
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return width, height, bpp, rows


def series_of(r, g, b):
    if 90 <= r <= 140 and g <= 45 and b <= 40:
        return "dense"
    if 90 <= r <= 140 and 50 <= g <= 90 and b <= 45:
        return "standard"
    if r <= 60 and b >= 90 and b > r + 40:
        return "sparse"
    return None


def read_figure(path):
    data = open(path, "rb").read()
    blob = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    if blob != EXPECTED_BLOB:
        sys.exit(f"{path}: git blob {blob}, expected {EXPECTED_BLOB} (the published docs/teaser.png)")
    memory = read_panel(data, PANEL, LEGEND)
    memory["time"] = read_panel(data, TIME_PANEL, TIME_LEGEND, TIME_TICKS, TIME_CONTEXTS)
    return memory


def read_panel(png, panel, legend_box, ticks_of=TICKS, contexts=CONTEXTS):
    width, height, bpp, rows = decode_png(png)
    px = lambda x, y: tuple(rows[y][x * bpp:x * bpp + 3])
    x0, y0, x1, y1 = panel
    # Grid lines: light grey rows across the panel; the last run of such rows is the panel's frame.
    grey = [y for y in range(y0, y1) if sum(1 for x in range(x0, x1) if 180 <= px(x, y)[0] <= 238 and
                                            max(px(x, y)) - min(px(x, y)) < 6) > 250]
    lines = [y for i, y in enumerate(grey) if i == 0 or y != grey[i - 1] + 1]
    lines = lines[:-1]  # the frame
    step = min(b - a for a, b in zip(lines, lines[1:]))
    ticks = [(y, ticks_of[round((y - lines[0]) / step)]) for y in lines]
    n = len(ticks)
    my, mv = sum(y for y, _ in ticks) / n, sum(v for _, v in ticks) / n
    slope = sum((y - my) * (v - mv) for y, v in ticks) / sum((y - my) ** 2 for y, _ in ticks)
    value = lambda y: mv + slope * (y - my)
    # Marker pixels per series, outside the legend box.
    lx0, ly0, lx1, ly1 = legend_box
    pts = {s: [] for s in DRAW_ORDER}
    for y in range(y0, y1):
        for x in range(x0, x1):
            s = series_of(*px(x, y))
            if s and not (lx0 <= x < lx1 and ly0 <= y < ly1):
                pts[s].append((x, y))
    # Columns: every series' markers sit on the contexts' columns (the lines between them are drawn
    # in lighter colours than the markers).
    cols = []
    for x, _ in sorted(p for s in DRAW_ORDER for p in pts[s]):
        if not cols or x - cols[-1][-1] > 3:
            cols.append([x])
        else:
            cols[-1].append(x)
    centres_x = [(c[0] + c[-1]) / 2 for c in cols if len(c) > 10]
    if len(centres_x) != len(contexts):
        sys.exit(f"found {len(centres_x)} marker columns, expected {len(contexts)}")
    def marker_rows(s, cx):
        # The rows of a series' marker in column cx: the longest run of rows holding at least 3 of
        # its pixels (single pixels of a marker colour also occur in the anti-aliased rims of
        # other markers).
        count = {}
        for x, y in pts[s]:
            if abs(x - cx) <= 12:
                count[y] = count.get(y, 0) + 1
        body = sorted(y for y, k in count.items() if k >= 3)
        runs = []
        for y in body:
            if runs and y - runs[-1][-1] <= 2:
                runs[-1].append(y)
            else:
                runs.append([y])
        return max(runs, key=len) if runs else []

    # The markers' diameter: the tallest marker seen (the standard series' lone markers are whole).
    diameter = max(r[-1] - r[0] + 1 for s in DRAW_ORDER for cx in centres_x for r in [marker_rows(s, cx)] if r)
    radius = (diameter - 1) / 2
    out = {"pixel_units": abs(slope), "diameter_px": diameter, "grid_rows": lines, "series": {}}
    for s in DRAW_ORDER:
        out["series"][s] = {}
        over = DRAW_ORDER[DRAW_ORDER.index(s) + 1:]
        for ctx, cx in zip(contexts, centres_x):
            ys = marker_rows(s, cx)
            if len(ys) < 3:
                continue  # nothing, or only the rim of a marker drawn over: hidden
            top, bottom = ys[0], ys[-1]
            covered_above = any(series_of(*px(int(cx) + dx, top - 1)) in over for dx in (-1, 0, 1))
            covered_below = any(series_of(*px(int(cx) + dx, bottom + 1)) in over for dx in (-1, 0, 1))
            full = bottom - top + 1 >= diameter - 1
            centre = ((top + bottom) / 2 if full or (covered_above == covered_below)
                      else bottom - radius if covered_above else top + radius)
            out["series"][s][ctx] = round(value(centre), 2)
        for ctx in contexts:
            if ctx not in out["series"][s] and s != DRAW_ORDER[-1]:
                out["series"][s][ctx] = None  # hidden behind a marker drawn over it
        out["series"][s] = {c: out["series"][s][c] for c in contexts if c in out["series"][s]}
    return out


def encode_png(width, height, pixel):
    raw = b"".join(b"\x00" + bytes(c for x in range(width) for c in pixel(x, y)) for y in range(height))
    chunk = lambda kind, body: (len(body).to_bytes(4, "big") + kind + body +
                                (zlib.crc32(kind + body) & 0xFFFFFFFF).to_bytes(4, "big"))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", width.to_bytes(4, "big") + height.to_bytes(4, "big") +
                                              bytes([8, 2, 0, 0, 0])) + chunk(b"IDAT", zlib.compress(raw, 1)) +
            chunk(b"IEND", b""))


def self_test():
    """Draws a chart like the published one with known values (a sparse marker half under a dense
    one, another whole under it, a standard marker over a dense one, a legend), reads it back and
    checks every reading to within half a pixel."""
    W, H = 700, 560
    grid = {141.0: 40, 113.25: 140, 85.5: 240, 57.75: 340, 30.0: 440}  # 100 px per 27.75 units
    y_of = lambda v: 440 - (v - 30.0) * 100 / 27.75
    colours = {"dense": (120, 20, 10), "standard": (120, 70, 20), "sparse": (25, 64, 112)}
    xs = [60 + 110 * i for i in range(6)]
    # dense 8K lies under a standard marker 0.9 px above it: only a rim shows, so it reads as hidden.
    truth = {"dense": [33.6, 34.0, 34.2, 34.8, 36.7, 41.5], "sparse": [31.0, None, 33.1, 33.9, 31.0, 34.0],
             "standard": [33.85, 47.0, 64.0, 100.5]}
    discs = []  # drawn in this order: later ones cover earlier ones
    for s in DRAW_ORDER:
        for i, v in enumerate(truth[s]):
            if v is not None:
                discs.append((xs[i], y_of(v), colours[s]))
    discs.append((400, 70, colours["dense"]))  # a legend marker, inside the legend box
    r = 9

    def pixel(x, y):
        c = (255, 255, 255)
        if y in grid.values() or 520 <= y <= 522:  # grid lines, the panel frame
            c = (217, 217, 217)
        for cx, cy, col in discs:
            if (x - cx) ** 2 + (y - cy) ** 2 <= r * r:
                c = col
        return c

    truth["sparse"][1] = truth["dense"][1]  # hidden: read as the covering dense marker
    out = read_panel(encode_png(W, H, pixel), (0, 0, W, H), (350, 50, 450, 100))
    failures = []
    if out["series"]["dense"].get("8K", "absent") is not None:
        failures.append("the dense 8K marker, covered but for a rim, was not reported hidden")
    truth["dense"][0] = None
    for s, values in truth.items():
        for ctx, v in zip(CONTEXTS, values):
            if v is None:
                continue
            got = out["series"][s].get(ctx)
            got = out["series"]["dense"][ctx] if got is None and s == "sparse" else got
            if got is None or abs(got - v) > 0.5 * 27.75 / 100 + 0.01:
                failures.append(f"{s} {ctx}: read {got}, drawn {v}")
    if out["series"]["sparse"].get("16K", "absent") is not None:
        failures.append("the sparse 16K marker, drawn whole under the dense one, was not reported hidden")
    if failures:
        sys.exit("self-test failed:\n  " + "\n  ".join(failures))
    print(f"self-test passed: {sum(1 for v in truth.values() for x in v if x is not None)} markers read back "
          "within half a pixel, 2 hidden ones reported hidden")


@functools.lru_cache(maxsize=None)  # the memory and time tables ask for the same runs
def simulate(oomb, schedule, attention, ctx, latency_s=None):
    cmd = [oomb, "simulate", "--preset", "oomb-published", "--model", "qwen2.5-7b", "--gpu", "h200",
           "--context", ctx, "--schedule", schedule, "--attention", attention, "--json"]
    if latency_s is not None:
        cmd += ["--page-copy-latency", repr(latency_s)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed: {r.stderr.strip()}")
    return json.loads(r.stdout)


def implied_latency_s(oomb, attention, ctx, target_gib, hi_s=1e-4):
    """The --page-copy-latency at which the predicted peak reaches target_gib (bisection: the peak grows
    with the latency), or None with the bound that holds: over at 0 s, or under at hi_s."""
    peak = lambda lat: simulate(oomb, "oomb", attention, ctx, lat)["peak_device_bytes"] / 2**30
    if peak(0.0) >= target_gib:
        return None, "over at 0"
    if peak(hi_s) < target_gib:
        return None, f"under at {hi_s * 1e6:.0f} us"
    lo, hi = 0.0, hi_s
    for _ in range(24):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if peak(mid) < target_gib else (lo, mid)
    return hi, None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("png", nargs="?", help="the published docs/teaser.png (git blob " + EXPECTED_BLOB[:7] + ")")
    ap.add_argument("--self-test", action="store_true", help="read back a chart drawn with known values")
    ap.add_argument("--oomb", help="an oomb binary: also print the error table against its simulate")
    ap.add_argument("--json", action="store_true", help="print the readings (and errors) as JSON")
    ap.add_argument("--implied-latency", action="store_true",
                    help="with --oomb: for each OOMB point, the --page-copy-latency (the published write-back's "
                         "uncited per-copy cost, 10 us in the preset) at which the prediction equals the reading, "
                         "under each reading of the unit")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    if not args.png:
        ap.error("the published image is needed (or --self-test)")
    if args.implied_latency and not args.oomb:
        ap.error("--implied-latency needs --oomb (the binary whose simulate it bisects)")
    fig = read_figure(args.png)
    rows = []
    if args.oomb:
        runs = {"standard": ("standard", "dense"), "dense": ("oomb", "dense"), "sparse": ("oomb", "sparse")}
        for s in ("dense", "sparse", "standard"):
            for ctx, v in fig["series"][s].items():
                covering = fig["series"]["dense"][ctx] if v is None else None
                read = v if v is not None else covering
                gib = simulate(args.oomb, *runs[s], ctx)["peak_device_bytes"] / 2**30
                rows.append({"series": s, "context": ctx, "read": read, "hidden": v is None, "oomb_gib": round(gib, 2),
                             "error": {u: round(100 * (gib / (read * k) - 1), 1) for u, k in UNITS.items()}})
    times = []
    if args.oomb:
        # The time panel: markers drawn over by another series' are hidden (no reading).
        for s in ("dense", "sparse", "standard"):
            for ctx, v in fig["time"]["series"][s].items():
                if v is None:
                    continue
                step_s = simulate(args.oomb, *runs[s], ctx)["step_s"]
                times.append({"series": s, "context": ctx, "read_s": v, "oomb_s": round(step_s, 1),
                              "ratio": round(v / step_s, 2)})
    implied = []
    if args.oomb and args.implied_latency:
        for r in rows:
            if r["series"] == "standard" or r["hidden"]:
                continue
            row = {"series": r["series"], "context": r["context"], "error_at_preset": r["error"]}
            for u, k in UNITS.items():
                lat, why = implied_latency_s(args.oomb, r["series"], r["context"], r["read"] * k)
                row[u] = round(lat * 1e6, 1) if lat is not None else why
            implied.append(row)
    if args.json:
        print(json.dumps({"figure": fig, "comparison": rows, "time_comparison": times, "implied_latency_us": implied},
                         indent=1))
        return
    print(f"grid rows {fig['grid_rows']}, {fig['pixel_units']:.4f} axis units per pixel, markers "
          f"{fig['diameter_px']} px across")
    for s, vals in fig["series"].items():
        print(f"{s:9s}", "  ".join(f"{c} {'hidden' if v is None else v}" for c, v in vals.items()))
    t = fig["time"]
    print(f"time panel: grid rows {t['grid_rows']}, {t['pixel_units']:.4f} s per pixel")
    for s, vals in t["series"].items():
        print(f"{s:9s}", "  ".join(f"{c} {'hidden' if v is None else v}" for c, v in vals.items()))
    if rows:
        print("\n| series, context | read (axis units) | oomb GiB | error if GiB | if 1000 MiB | if GB |")
        print("|---|---|---|---|---|---|")
        for r in rows:
            read = f"{r['read']:.2f}" + (" (hidden behind dense)" if r["hidden"] else "")
            e = r["error"]
            print(f"| {r['series']} {r['context']} | {read} | {r['oomb_gib']:.2f} | {e['GiB']:+.1f}% | "
                  f"{e['1000 MiB']:+.1f}% | {e['GB']:+.1f}% |")
    if times:
        print("\n| series, context | time per iteration read (s) | oomb step_s | published / oomb |")
        print("|---|---|---|---|")
        for r in times:
            print(f"| {r['series']} {r['context']} | {r['read_s']:.1f} | {r['oomb_s']:.1f} | {r['ratio']:.2f} |")
    if implied:
        print("\n--page-copy-latency (us) at which the prediction equals the reading:")
        print("| series, context | error at the preset's 10 us (1000 MiB) | if GiB | if 1000 MiB | if GB |")
        print("|---|---|---|---|---|")
        fmt = lambda v: f"{v:.1f}" if isinstance(v, float) else v
        for r in implied:
            print(f"| {r['series']} {r['context']} | {r['error_at_preset']['1000 MiB']:+.1f}% | {fmt(r['GiB'])} | "
                  f"{fmt(r['1000 MiB'])} | {fmt(r['GB'])} |")


if __name__ == "__main__":
    main()
