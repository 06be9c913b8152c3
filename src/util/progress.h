/*
 * A progress bar on stderr, drawn only when stderr is a terminal and the log level shows info.
 */
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace swavg {

class progress {
 public:
  progress(uint64_t total, std::string label);
  ~progress();
  void advance(uint64_t amount);

 private:
  void draw(bool final);
  uint64_t total_;
  uint64_t done_ = 0;
  std::string label_;
  bool enabled_;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace swavg
