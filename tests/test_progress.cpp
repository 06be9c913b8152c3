// The progress state machine with a fake clock: phases, ETA, the bar fitted to the width, the lines
// written off a terminal, and log lines printed above the bar.
#include <catch2/catch.hpp>

#include <string>

#include "util/progress.h"

using namespace swavg;

namespace {

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

// The last bar drawn in `out` ("\r" + text + padding).
std::string last_bar(const std::string& out) {
  std::string text = out.substr(out.rfind('\r') + 1);
  while (!text.empty() && text.back() == ' ') text.pop_back();
  return text;
}

}  // namespace

TEST_CASE("human_bytes and clock_text", "[progress]") {
  CHECK(human_bytes(0) == "0 B");
  CHECK(human_bytes(999) == "999 B");
  CHECK(human_bytes(1000) == "1.00 kB");
  CHECK(human_bytes(1'620'000'000) == "1.62 GB");
  CHECK(human_bytes(99'940'000) == "99.9 MB");
  CHECK(human_bytes(999'400'000) == "999 MB");
  CHECK(human_bytes(999'500'000) == "1.00 GB");  // not "1000 MB"
  CHECK(human_bytes(UINT64_MAX) == "18.4 EB");
  CHECK(clock_text(0) == "0:00");
  CHECK(clock_text(59.9) == "0:59");
  CHECK(clock_text(61) == "1:01");
  CHECK(clock_text(3599) == "59:59");
  CHECK(clock_text(3600) == "1:00:00");
  CHECK(clock_text(-1) == "0:00");
}

TEST_CASE("bar: done/total in bytes and items, rate, elapsed and ETA", "[progress]") {
  progress_meter m(progress_style::bar);
  std::string out = m.begin("folding", 3'000'000'000, 780, "tensor", 10.0, 120);
  CHECK(last_bar(out).rfind("folding   0% [", 0) == 0);
  // 1.5 GB in 2 s: 750 MB/s, half done, 2 s to go.
  out = m.advance(1'500'000'000, 390, 12.0, 120);
  const std::string bar = last_bar(out);
  CHECK(bar.find(" 50% [") != std::string::npos);
  CHECK(bar.find("1.50/3.00 GB") != std::string::npos);
  CHECK(bar.find("390/780 tensors") != std::string::npos);
  CHECK(bar.find("750 MB/s") != std::string::npos);
  CHECK(bar.find("0:02 ETA 0:02") != std::string::npos);
  CHECK(bar.size() <= 119);
}

TEST_CASE("bar: no ETA before a second has passed, none at 100%, none without a total", "[progress]") {
  progress_meter m(progress_style::bar);
  m.begin("folding", 100, 0, "", 0.0, 100);
  CHECK(last_bar(m.advance(50, 0, 0.5, 100)).find("ETA") == std::string::npos);
  CHECK(last_bar(m.advance(0, 0, 1.0, 100)).find("ETA 0:01") != std::string::npos);
  CHECK(last_bar(m.advance(50, 0, 2.0, 100)).find("ETA") == std::string::npos);
  progress_meter open_ended(progress_style::bar);
  const std::string bar = last_bar(open_ended.begin("syncing swa.pt", 0, 0, "", 0.0, 100));
  CHECK(bar == "syncing swa.pt  0:00");
  // The whole line, in order.
  progress_meter whole(progress_style::bar);
  whole.begin("folding", 3'000'000'000, 780, "tensor", 0.0, 200);
  CHECK(last_bar(whole.advance(1'500'000'000, 390, 2.0, 200)) ==
        "folding  50% [" + std::string(20, '#') + std::string(20, '-') +
            "]  1.50/3.00 GB  390/780 tensors  750 MB/s  0:02 ETA 0:02");
}

TEST_CASE("bar: redrawn at most ten times a second, and as time passes with no work", "[progress]") {
  progress_meter m(progress_style::bar);
  m.begin("folding", 1000, 0, "", 0.0, 100);
  CHECK(!m.advance(1, 0, 0.15, 100).empty());
  CHECK(m.advance(1, 0, 0.2, 100).empty());  // 0.05 s after the last draw
  CHECK(!m.advance(1, 0, 0.26, 100).empty());
  // A blocked phase: the ticker's calls move the elapsed time, and only when the text changes.
  CHECK(last_bar(m.tick(5.0, 100)).find("0:05") != std::string::npos);
  progress_meter sync(progress_style::bar);
  sync.begin("syncing", 0, 0, "", 0.0, 100);
  CHECK(last_bar(sync.tick(5.0, 100)) == "syncing  0:05");
  CHECK(sync.tick(5.3, 100).empty());  // still 0:05
}

TEST_CASE("bar: fitted to the terminal's width, the least telling parts left out first", "[progress]") {
  for (int width : {200, 120, 100, 80, 60, 50, 40, 30, 20, 10}) {
    progress_meter m(progress_style::bar);
    m.begin("folding", 3'000'000'000, 780, "tensor", 0.0, width);
    const std::string bar = last_bar(m.advance(1'500'000'000, 390, 2.0, width));
    INFO("width " << width << ": " << bar);
    CHECK(bar.size() <= static_cast<size_t>(std::max(width, 20) - 1));
    CHECK(bar.rfind("folding", 0) == 0);
    if (width >= 100) CHECK(bar.find("390/780 tensors") != std::string::npos);
    if (width >= 60) CHECK(bar.find("[") != std::string::npos);
    if (width <= 60) CHECK(bar.find("tensors") == std::string::npos);
    if (width >= 40) CHECK(bar.find("50%") != std::string::npos);
  }
  // The bar grows with the width, up to 40 columns.
  progress_meter wide(progress_style::bar);
  const std::string bar = last_bar(wide.begin("folding", 10, 0, "", 0.0, 300));
  CHECK(count(bar, "-") == 40);
}

TEST_CASE("bar: phases follow each other, a long one leaves its last line, never frozen at 100%", "[progress]") {
  progress_meter m(progress_style::bar);
  m.begin("opening 8 inputs", 0, 8, "checkpoint", 0.0, 100);
  std::string out = m.advance(0, 8, 0.5, 100);
  out = m.end(0.5, 100);  // half a second: erased
  CHECK(out.find('\n') == std::string::npos);
  CHECK(!m.active());
  m.begin("folding", 100, 0, "", 0.5, 100);
  m.advance(100, 0, 3.0, 100);
  out = m.end(3.0, 100);  // 2.5 s: left on its own line
  CHECK(out.find("folding 100% [") != std::string::npos);
  CHECK(out.back() == '\n');
  // The writing phase replaces the full bar, and a nested syncing phase shows while it runs.
  out = m.begin("writing swa.pt", 0, 0, "", 3.0, 100);
  CHECK(last_bar(out) == "writing swa.pt  0:00");
  out = m.begin("syncing swa.pt", 0, 0, "", 3.2, 100);
  CHECK(last_bar(out) == "syncing swa.pt  0:00");
  CHECK(m.depth() == 2);
  out = m.end(6.0, 100);  // nested: erased, however long, and the outer phase drawn again
  CHECK(out.find('\n') == std::string::npos);
  CHECK(last_bar(out) == "writing swa.pt  0:03");
}

TEST_CASE("bar: a log line erases the bar, prints, and draws it again", "[progress]") {
  progress_meter m(progress_style::bar);
  const std::string drawn = m.begin("folding", 100, 0, "", 0.0, 100);
  const std::string cleared = m.clear();
  CHECK(cleared == "\r" + std::string(drawn.size() - 1, ' ') + "\r");
  CHECK(m.clear().empty());  // nothing left to erase
  CHECK(last_bar(m.redraw(0.1, 100)).rfind("folding   0%", 0) == 0);
  // A shorter bar pads over the longer one it replaces.
  progress_meter n(progress_style::bar);
  const std::string long_bar = n.begin("a long phase name", 0, 0, "", 0.0, 100);
  n.end(0.1, 100);
  const std::string next = n.begin("short", 0, 0, "", 0.1, 100);
  CHECK(next.find('\r') != std::string::npos);
  CHECK(n.abandon() == "\r" + std::string(std::string("short  0:00").size(), ' ') + "\r");
  CHECK(!n.active());
  CHECK(long_bar.size() > next.size());
}

TEST_CASE("lines: one when each phase starts and ends, one per interval between", "[progress]") {
  progress_meter m(progress_style::lines, 15.0);
  CHECK(m.begin("folding", 3'000'000'000, 780, "tensor", 0.0, 80) ==
        "swavg: progress: folding started: 3.00 GB, 780 tensors\n");
  CHECK(m.advance(1'000'000'000, 260, 10.0, 80).empty());
  CHECK(m.tick(14.9, 80).empty());
  CHECK(m.advance(500'000'000, 130, 15.0, 80) ==
        "swavg: progress: folding 50%, 1.50/3.00 GB, 390/780 tensors, 100 MB/s, 0:15 elapsed, ETA 0:15\n");
  CHECK(m.tick(29.9, 80).empty());
  CHECK(!m.tick(30.0, 80).empty());
  CHECK(m.clear().empty());  // lines are never erased
  CHECK(m.redraw(30.0, 80).empty());
  m.advance(1'500'000'000, 390, 30.0, 80);
  CHECK(m.end(30.0, 80) == "swavg: progress: folding done in 0:30: 3.00 GB, 780 tensors, 100 MB/s\n");
}

TEST_CASE("lines: the unit is counted, singular for one", "[progress]") {
  progress_meter m(progress_style::lines);
  CHECK(m.begin("opening 1 input", 0, 1, "checkpoint", 0.0, 80) ==
        "swavg: progress: opening 1 input started: 1 checkpoint\n");
  m.advance(0, 1, 0.0, 80);
  CHECK(m.end(0.0, 80) == "swavg: progress: opening 1 input done in 0:00: 1 checkpoint\n");
  m.begin("opening 2 inputs", 0, 2, "checkpoint", 0.0, 80);
  CHECK(m.advance(0, 1, 20.0, 80) ==
        "swavg: progress: opening 2 inputs 50%, 1/2 checkpoints, 0:20 elapsed, ETA 0:20\n");
}

TEST_CASE("lines: a nested phase is announced once it has lasted a second, an abandoned one ends silently",
          "[progress]") {
  progress_meter m(progress_style::lines, 15.0);
  m.begin("writing", 0, 0, "", 0.0, 80);
  CHECK(m.begin("syncing shard 1", 0, 0, "", 0.0, 80).empty());
  CHECK(m.end(0.5, 80).empty());  // short: never shown
  m.begin("syncing shard 2", 0, 0, "", 1.0, 80);
  CHECK(m.tick(1.9, 80).empty());
  CHECK(m.tick(2.0, 80) == "swavg: progress: syncing shard 2 started\n");
  CHECK(m.end(2.5, 80) == "swavg: progress: syncing shard 2 done in 0:01\n");
  CHECK(m.abandon().empty());
  CHECK(!m.active());
}
