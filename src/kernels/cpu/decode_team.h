// The decode step's own team of threads: a few worker threads that wait for
// the next step by spinning, so that handing a step of a few microseconds to
// them costs a store and a load, not a system call.
//
// Why not OpenMP's team: libgomp wakes its docked threads at the start of
// every region, and releases the team at its end, with a futex system call
// each time, whether or not a thread is asleep (about 0.3 us each in a VM);
// two of them are a tenth of a 16-token step at D = 4096. The step is split
// only while calls come back to back (DecodeTeamPolicy), and then the workers
// here are still spinning, so no call sleeps or wakes anyone.
//
// The workers spin for kDecodeTeamSpinNs after their last step, then sleep on
// the word a step writes (std::atomic::wait, a futex) until the next one; a
// step that finds one asleep wakes it (notify_all), and the policy sees the
// caller's longer wait for it. One caller at a time: a second thread calling while
// the team is busy gets false and runs its step another way (the bits do not
// depend on it). The team is made at the first split step, grows to the
// largest one asked for, is never destroyed (its threads wait until the
// process ends) and is made anew in a child after fork().
#pragma once

#include <cstdint>

namespace tokpos::kernels::cpu {

inline constexpr int64_t kDecodeTeamSpinNs = 2'000'000;  // a worker's spin after its last step

// Runs part(ctx, k, nt) for k = 0 .. nt - 1, k = 0 on the calling thread and
// the others on the team's workers, and returns when every part has returned.
// False, with nothing run, if nt < 2, if nt is more than the cores the
// process may run on (counted when the team was made), if the team is in use
// by another thread, or if its threads cannot be started.
bool run_on_decode_team(int nt, void (*part)(void* ctx, int k, int nt), void* ctx);

// Runs fn(k, nt) the same way (fn: any callable; it must not throw).
template <typename Fn>
bool run_on_decode_team(int nt, Fn& fn) {
  return run_on_decode_team(
      nt, [](void* ctx, int k, int n) { (*static_cast<Fn*>(ctx))(k, n); }, static_cast<void*>(&fn));
}

}  // namespace tokpos::kernels::cpu
