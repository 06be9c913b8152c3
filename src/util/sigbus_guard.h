/*
 * A guard against SIGBUS from file mappings. A mapped file that shrinks (a trainer rewriting its
 * checkpoint with torch.save, which truncates it first) or whose pages cannot be read raises SIGBUS
 * on the next touch of a page past its end, which would kill the process and leave its temp files.
 * A guarded range instead gets anonymous zero pages mapped over it (mmap MAP_FIXED, allowed in a
 * handler on Linux) and is marked faulted; the reader checks the mark and reports the file. A fault
 * outside every guarded range, or a SIGBUS sent by kill, keeps its previous action (by default, the
 * process dies as before).
 *
 * The ranges live in a list of fixed blocks that is only appended to: the handler reads it with
 * atomic loads and takes no lock, so it is async-signal-safe; guard and unguard take a mutex.
 */
#pragma once

#include <cstddef>

namespace swavg {

struct guarded_range;

// Guards [begin, begin + size) (page aligned, a live mapping) and installs the handler on first use.
guarded_range* guard_range(const void* begin, size_t size);
// Forgets a range before it is unmapped. Null is a no-op.
void unguard_range(guarded_range* range);
// True once a touch of the range raised SIGBUS (its bytes are zeros since then).
bool range_faulted(const guarded_range* range);
// Marks the guarded range holding `p` as faulted (a system call reading from it failed with EFAULT)
// and returns it, or null when `p` is in no guarded range.
guarded_range* mark_faulted_at(const void* p);

}  // namespace swavg
