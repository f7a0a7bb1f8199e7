/* NCCL's profiler plugin ABI v4, v5 and v6, as a plugin compiles against it. Transcribed from NVIDIA NCCL 2.30.7
 * (Apache-2.0): src/include/plugin/nccl_profiler.h, src/include/plugin/profiler/profiler_v4.h, profiler_v5.h,
 * profiler_v6.h, and src/include/nccl_common.h (logger). Only the plugin's tests use it: the C driver calls the
 * plugin through these layouts, and a test compares them with the Rust structs field by field. */
#ifndef NCCL_PROFILER_TEST_H_
#define NCCL_PROFILER_TEST_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef enum { ncclSuccess = 0, ncclSystemError = 2, ncclInternalError = 3, ncclInvalidUsage = 5 } ncclResult_t;
typedef enum { NCCL_LOG_NONE = 0, NCCL_LOG_VERSION = 1, NCCL_LOG_WARN = 2, NCCL_LOG_INFO = 3 } ncclDebugLogLevel;
typedef void (*ncclDebugLogger_t)(ncclDebugLogLevel level, unsigned long flags, const char* file, int line,
                                  const char* fmt, ...);
typedef pid_t ncclPid_t;

enum {
  ncclProfileGroup = (1 << 0),
  ncclProfileColl = (1 << 1),
  ncclProfileP2p = (1 << 2),
  ncclProfileProxyOp = (1 << 3),
  ncclProfileProxyStep = (1 << 4),
  ncclProfileProxyCtrl = (1 << 5),
  ncclProfileKernelCh = (1 << 6),
  ncclProfileNetPlugin = (1 << 7),
  ncclProfileGroupApi = (1 << 8),
  ncclProfileCollApi = (1 << 9),
  ncclProfileP2pApi = (1 << 10),
  ncclProfileKernelLaunch = (1 << 11),
  ncclProfileCeColl = (1 << 12),
  ncclProfileCeSync = (1 << 13),
  ncclProfileCeBatch = (1 << 14),
};

typedef enum {
  ncclProfilerProxyOpInProgress_v4 = 19,
  ncclProfilerProxyStepSendGPUWait = 8,
  ncclProfilerProxyStepSendPeerWait_v4 = 20,
  ncclProfilerProxyStepSendWait = 9,
  ncclProfilerProxyStepRecvWait = 10,
  ncclProfilerProxyStepRecvFlushWait = 11,
  ncclProfilerProxyStepRecvGPUWait = 12,
  ncclProfilerProxyCtrlIdle = 13,
  ncclProfilerProxyCtrlActive = 14,
  ncclProfilerProxyCtrlSleep = 15,
  ncclProfilerProxyCtrlWakeup = 16,
  ncclProfilerProxyCtrlAppend = 17,
  ncclProfilerProxyCtrlAppendEnd = 18,
  ncclProfilerNetPluginUpdate = 21,
  ncclProfilerKernelChStop = 22,
  ncclProfilerGroupStartApiStop = 23,
  ncclProfilerGroupEndApiStart = 24,
} ncclProfilerEventState_t;

/* ---- v4 (profiler_v4.h) ---- */
typedef struct {
  uint8_t type;
  void* parentObj;
  int rank;
  union {
    struct {
      uint64_t seqNumber;
      const char* func;
      void const* sendBuff;
      void* recvBuff;
      size_t count;
      int root;
      const char* datatype;
      uint8_t nChannels;
      uint8_t nWarps;
      const char* algo;
      const char* proto;
    } coll;
    struct {
      const char* func;
      void* buff;
      const char* datatype;
      size_t count;
      int peer;
      uint8_t nChannels;
    } p2p;
    struct {
      ncclPid_t pid;
      uint8_t channelId;
      int peer;
      int nSteps;
      int chunkSize;
      int isSend;
    } proxyOp;
    struct {
      int step;
    } proxyStep;
    struct {
      uint8_t channelId;
      uint64_t pTimer;
    } kernelCh;
    struct {
      int64_t id;
      void* data;
    } netPlugin;
  };
} ncclProfilerEventDescr_v4_t;

typedef union {
  struct {
    size_t transSize;
  } proxyStep;
  struct {
    int appendedProxyOps;
  } proxyCtrl;
  struct {
    void* data;
  } netPlugin;
  struct {
    uint64_t pTimer;
  } kernelCh;
} ncclProfilerEventStateArgs_v4_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(void** context, int* eActivationMask, const char* commName, uint64_t commHash, int nNodes,
                       int nranks, int rank, ncclDebugLogger_t logfn);
  ncclResult_t (*startEvent)(void* context, void** eHandle, ncclProfilerEventDescr_v4_t* eDescr);
  ncclResult_t (*stopEvent)(void* eHandle);
  ncclResult_t (*recordEventState)(void* eHandle, ncclProfilerEventState_t eState,
                                   ncclProfilerEventStateArgs_v4_t* eStateArgs);
  ncclResult_t (*finalize)(void* context);
} ncclProfiler_v4_t;

/* The union members of v5, which v6 repeats (profiler_v6.h: "All v5 descriptors"). */
#define NCCL_PROFILER_V5_MEMBERS \
    struct {                  \
      bool graphCaptured;     \
      int groupDepth;         \
    } groupApi;               \
    struct {                  \
      const char* func;       \
      size_t count;           \
      const char* datatype;   \
      int root;               \
      void* stream;           \
      bool graphCaptured;     \
    } collApi;                \
    struct {                  \
      const char* func;       \
      size_t count;           \
      const char* datatype;   \
      void* stream;           \
      bool graphCaptured;     \
    } p2pApi;                 \
    struct {                  \
      void* stream;           \
    } kernelLaunch;           \
    struct {                  \
      uint64_t seqNumber;     \
      const char* func;       \
      void const* sendBuff;   \
      void* recvBuff;         \
      size_t count;           \
      int root;               \
      const char* datatype;   \
      uint8_t nChannels;      \
      uint8_t nWarps;         \
      const char* algo;       \
      const char* proto;      \
      void* parentGroup;      \
    } coll;                   \
    struct {                  \
      const char* func;       \
      void* buff;             \
      const char* datatype;   \
      size_t count;           \
      int peer;               \
      uint8_t nChannels;      \
      void* parentGroup;      \
    } p2p;                    \
    struct {                  \
      ncclPid_t pid;          \
      uint8_t channelId;      \
      int peer;               \
      int nSteps;             \
      int chunkSize;          \
      int isSend;             \
    } proxyOp;                \
    struct {                  \
      int step;               \
    } proxyStep;              \
    struct {                  \
      uint8_t channelId;      \
      uint64_t pTimer;        \
    } kernelCh;               \
    struct {                  \
      int64_t id;             \
      void* data;             \
    } netPlugin;

/* ---- v5 (profiler_v5.h) ---- */
typedef struct {
  uint64_t type;
  void* parentObj;
  int rank;
  union {
    NCCL_PROFILER_V5_MEMBERS
  };
} ncclProfilerEventDescr_v5_t;

typedef ncclProfilerEventStateArgs_v4_t ncclProfilerEventStateArgs_v5_t; /* the same union in profiler_v5.h */

typedef struct {
  const char* name;
  ncclResult_t (*init)(void** context, uint64_t commId, int* eActivationMask, const char* commName, int nNodes,
                       int nranks, int rank, ncclDebugLogger_t logfn);
  ncclResult_t (*startEvent)(void* context, void** eHandle, ncclProfilerEventDescr_v5_t* eDescr);
  ncclResult_t (*stopEvent)(void* eHandle);
  ncclResult_t (*recordEventState)(void* eHandle, ncclProfilerEventState_t eState,
                                   ncclProfilerEventStateArgs_v5_t* eStateArgs);
  ncclResult_t (*finalize)(void* context);
} ncclProfiler_v5_t;

/* ---- v6 (profiler_v6.h): v5's members plus the copy-engine ones ---- */
typedef struct {
  uint64_t type;
  void* parentObj;
  int rank;
  union {
    NCCL_PROFILER_V5_MEMBERS
    struct {
      uint64_t seqNumber;
      const char* func;
      void const* sendBuff;
      void* recvBuff;
      size_t count;
      int root;
      const char* datatype;
      const char* syncStrategy;
      bool intraBatchSync;
      uint32_t batchSize;
      uint32_t numBatches;
      uint32_t ceSeqNum;
      void* stream;
    } ceColl;
    struct {
      bool isComplete;
      int nRanks;
    } ceCollSync;
    struct {
      int numOps;
      size_t totalBytes;
      bool useIntraSync;
    } ceCollBatch;
  };
} ncclProfilerEventDescr_v6_t;

typedef ncclProfilerEventStateArgs_v5_t ncclProfilerEventStateArgs_v6_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(void** context, uint64_t commId, int* eActivationMask, const char* commName, int nNodes,
                       int nranks, int rank, ncclDebugLogger_t logfn);
  ncclResult_t (*startEvent)(void* context, void** eHandle, ncclProfilerEventDescr_v6_t* eDescr);
  ncclResult_t (*stopEvent)(void* eHandle);
  ncclResult_t (*recordEventState)(void* eHandle, ncclProfilerEventState_t eState,
                                   ncclProfilerEventStateArgs_v6_t* eStateArgs);
  ncclResult_t (*finalize)(void* context);
} ncclProfiler_v6_t;

/* The socket network's NetPlugin data (NCCL 2.28.9 src/include/plugin/profiler/net_socket_v1.h) and the id bits
 * that name it (src/include/plugin/nccl_profiler.h). */
#define NCCL_PROFILER_NET_VER_BITS (16)
#define NCCL_PROFILER_NET_TYPE_SOCK (2U << NCCL_PROFILER_NET_VER_BITS)
#define NCCL_PROFILER_NET_SOCKET_VER 1
enum { ncclProfileSocket = (1 << 0) };
typedef struct {
  uint8_t type;
  union {
    struct {
      int fd;
      int op;
      size_t length;
    } sock;
  };
} ncclProfilerNetSockDescr_v1_t;

#endif
