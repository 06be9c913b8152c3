#include "util/sigbus_guard.h"

#include <signal.h>
#include <sys/mman.h>

#include <atomic>
#include <cstdint>
#include <mutex>

namespace swavg {

struct guarded_range {
  std::atomic<uintptr_t> begin{0};
  std::atomic<uintptr_t> end{0};  // 0: the slot is free
  std::atomic<bool> faulted{false};
};

namespace {

constexpr size_t kBlockSlots = 64;

struct block {
  guarded_range slots[kBlockSlots];
  std::atomic<block*> next{nullptr};
};

block g_first;
std::mutex g_mutex;  // guard/unguard only; never taken by the handler
struct sigaction g_previous {};
bool g_installed = false;

guarded_range* find(uintptr_t a) {
  for (block* b = &g_first; b != nullptr; b = b->next.load(std::memory_order_acquire))
    for (auto& s : b->slots) {
      const uintptr_t end = s.end.load(std::memory_order_acquire);
      if (end != 0 && s.begin.load(std::memory_order_acquire) <= a && a < end) return &s;
    }
  return nullptr;
}

// Not ours: what would have happened without the guard.
void pass_on(int sig, siginfo_t* info, void* context) {
  if (g_previous.sa_flags & SA_SIGINFO) {
    if (g_previous.sa_sigaction != nullptr) return g_previous.sa_sigaction(sig, info, context);
  } else if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
    return g_previous.sa_handler(sig);
  }
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(SIGBUS, &dfl, nullptr);
  // A fault re-executes the access on return and dies of it; a signal sent by kill must be raised
  // again (it is delivered once the handler returns).
  if (info == nullptr || info->si_code <= 0) ::raise(SIGBUS);
}

void on_sigbus(int sig, siginfo_t* info, void* context) {
  if (info != nullptr && info->si_code > 0) {
    if (guarded_range* r = find(reinterpret_cast<uintptr_t>(info->si_addr))) {
      const uintptr_t begin = r->begin.load(std::memory_order_acquire);
      const uintptr_t end = r->end.load(std::memory_order_acquire);
      void* p = ::mmap(reinterpret_cast<void*>(begin), end - begin, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
      if (p != MAP_FAILED) {
        r->faulted.store(true, std::memory_order_release);
        return;
      }
    }
  }
  pass_on(sig, info, context);
}

void install() {
  struct sigaction sa {};
  sa.sa_sigaction = on_sigbus;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGBUS, &sa, &g_previous);
  g_installed = true;
}

}  // namespace

guarded_range* guard_range(const void* begin, size_t size) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_installed) install();
  block* b = &g_first;
  for (;;) {
    for (auto& s : b->slots)
      if (s.end.load(std::memory_order_relaxed) == 0) {
        s.faulted.store(false, std::memory_order_relaxed);
        s.begin.store(reinterpret_cast<uintptr_t>(begin), std::memory_order_release);
        s.end.store(reinterpret_cast<uintptr_t>(begin) + size, std::memory_order_release);
        return &s;
      }
    block* next = b->next.load(std::memory_order_acquire);
    if (next == nullptr) {
      next = new block();  // never freed: the handler may be walking the list
      b->next.store(next, std::memory_order_release);
    }
    b = next;
  }
}

void unguard_range(guarded_range* range) {
  if (range == nullptr) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  range->end.store(0, std::memory_order_release);
  range->begin.store(0, std::memory_order_release);
}

bool range_faulted(const guarded_range* range) {
  return range != nullptr && range->faulted.load(std::memory_order_acquire);
}

guarded_range* mark_faulted_at(const void* p) {
  guarded_range* r = find(reinterpret_cast<uintptr_t>(p));
  if (r != nullptr) r->faulted.store(true, std::memory_order_release);
  return r;
}

}  // namespace swavg
