/* collscope's own C interface to libcollscope_profiler.so (not part of NCCL's profiler API).
 * The plugin's NCCL interface is NCCL's: the ncclProfiler_v6, _v5 and _v4 symbols. */
#ifndef COLLSCOPE_PROFILER_H_
#define COLLSCOPE_PROFILER_H_

#include <stddef.h>
#include <stdint.h>

/* What the plugin counted in this process, summed over its communicators (profiler/src/plugin.rs, Counters).
 * Fields are only ever added at the end. */
struct collscope_profiler_counters {
  uint64_t communicators;      /* initialised and not finalised */
  uint64_t calls_started;
  uint64_t calls_completed;
  uint64_t calls_in_flight;    /* started, not complete */
  uint64_t proxy_ops;          /* this process's proxy operations, stopped */
  uint64_t pxn_proxy_ops;      /* proxy operations run here for another process (PXN) */
  uint64_t dropped_events;     /* NULL handles given: no free event object */
  uint64_t dropped_records;    /* records lost to a full ring */
  uint64_t orphan_events;      /* children of a call with no handle, or already complete */
  uint64_t unsupported_calls;  /* calls the model cannot name (Gather, Scatter, ...) */
  uint64_t misused_handles;    /* handles stopped twice or used after their event ended */
  uint64_t recv_gpu_wait_ns;   /* receive steps waiting for the GPU to consume their data */
  uint64_t proxy_sleep_ns;
  uint64_t proxy_idle_ns;
  uint64_t proxy_active_ns;
  uint64_t proxy_append_ns;
  uint64_t proxy_appended_ops;
  uint64_t disabled;           /* 1 once an internal error disabled the plugin */
};

/* Fills at most `size` bytes of *out (pass sizeof(*out)). Returns 0, or -1 when out is NULL. */
int collscope_profiler_counters(struct collscope_profiler_counters* out, size_t size);

#endif
