/* A shared library that is no NCCL profiler plugin: it exports none of the ncclProfiler_vN symbols. */
int collscope_not_a_profiler = 1;
