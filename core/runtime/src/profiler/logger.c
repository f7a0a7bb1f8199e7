/* NCCL hands every plugin its logger, a printf-like C variadic function (ncclDebugLogger_t, NCCL 2.28.9
 * src/include/nccl_common.h). Stable Rust cannot define one, so this shim formats the message and passes the
 * text to the runtime's logger (collscope_plugin_log_line in src/profiler/logger.rs). */
#include <stdarg.h>
#include <stdio.h>

void collscope_plugin_log_line(int level, unsigned long flags, const char *file, int line, const char *msg);

void collscope_plugin_logger(int level, unsigned long flags, const char *file, int line, const char *fmt, ...) {
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  collscope_plugin_log_line(level, flags, file, line, msg);
}
