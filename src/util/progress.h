/*
 * Progress of long work on stderr, as tqdm, pip and mergekit show it: named phases (opening the
 * inputs, folding, writing, syncing), each with what is done of its total in bytes and in items
 * (checkpoints, tensors), the rate, the time elapsed and an ETA.
 *
 * On a terminal (the `bar` style): one line redrawn in place, at most ten times a second, fitted
 * to the terminal's width; a log line erases it, prints, and draws it again, so the two never
 * interleave. A phase that lasted a second or more leaves its last line, as tqdm does; a shorter
 * one is erased. Off a terminal (the `lines` style, for Slurm, CI and pipes): plain lines, one when
 * each phase starts, one every 15 s while it runs, one when it ends.
 *
 * A phase started while another runs (syncing one shard while folding) is nested: the bar shows it
 * until it ends, then the outer one again; in lines it is announced only once it has lasted a second.
 *
 * progress_meter is the state machine, fed the time and the width (tests drive it with a fake
 * clock); the console behind `progress` owns stderr, the real clock and a thread that keeps the
 * elapsed time of a phase blocked in one call (an fsync) moving.
 */
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace swavg {

enum class progress_mode { automatic, bar, lines, off };
enum class progress_style { bar, lines };

const char* progress_mode_name(progress_mode m);

// "1.62 GB", "512 B", "3.00 MB": decimal units, three significant digits.
std::string human_bytes(uint64_t bytes);
// "0:07", "12:03", "1:02:03".
std::string clock_text(double seconds);

class progress_meter {
 public:
  explicit progress_meter(progress_style style, double line_interval = 15.0);

  // Each returns the text to write to stderr now (empty: nothing). `now` is in seconds, on any
  // clock that only moves forward; `width` is the terminal's columns.
  std::string begin(const std::string& name, uint64_t total_bytes, uint64_t total_items, const std::string& unit,
                    double now, int width);
  std::string advance(uint64_t bytes, uint64_t items, double now, int width);
  std::string tick(double now, int width);  // time passed with no work done (a blocking call)
  std::string end(double now, int width);   // the innermost phase finished
  std::string abandon();                    // the innermost phase stopped on an error: no end line
  std::string clear();                      // before another line: the bar erased
  std::string redraw(double now, int width);

  bool active() const { return !phases_.empty(); }
  size_t depth() const { return phases_.size(); }

 private:
  struct phase {
    std::string name, unit;
    uint64_t total_bytes = 0, total_items = 0, done_bytes = 0, done_items = 0;
    double start = 0, last_line = 0;
    bool announced = false;  // its start line was printed (lines), or it drew (bar)
  };
  std::string bar_text(const phase& p, double now, int width) const;
  std::string line_text(const phase& p, double now) const;
  std::string start_line(const phase& p) const;
  std::string end_line(const phase& p, double now) const;
  std::string draw(double now, int width, bool force);
  std::string lines_due(double now);

  progress_style style_;
  double line_interval_;
  std::vector<phase> phases_;
  size_t drawn_ = 0;  // the length of the bar on screen (0: none)
  double last_draw_ = -1;
  std::string last_text_;
};

// Chooses the style and turns progress on or off for the process: `automatic` is a bar when stderr
// is a terminal and lines otherwise; nothing is shown with `off` or when `shown` is false (-q).
void configure_progress(progress_mode mode, bool shown);

// Writes `text` (whole lines) to stderr so that it does not run into the bar: the bar is erased,
// the text written, and the bar drawn again. Every log line goes through it.
void print_above_progress(const std::string& text);

// One phase of the work, from construction to destruction (an end line), or to an exception
// unwinding through it (the bar erased, no end line). `total_bytes` and `total_items` may be 0
// (unknown: no percentage, no ETA); `unit` names one item ("tensor"), counted as "780 tensors".
class progress {
 public:
  progress(std::string name, uint64_t total_bytes, uint64_t total_items = 0, std::string unit = "");
  // The older form: bytes only.
  progress(uint64_t total_bytes, std::string name) : progress(std::move(name), total_bytes) {}
  ~progress();
  progress(const progress&) = delete;
  progress& operator=(const progress&) = delete;

  void advance(uint64_t bytes, uint64_t items = 0);
  // Ends this phase and starts the next in its place.
  void next(std::string name, uint64_t total_bytes, uint64_t total_items = 0, std::string unit = "");

 private:
  bool open_ = false;
  int exceptions_;
};

}  // namespace swavg
