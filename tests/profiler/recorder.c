/* A minimal NCCL profiler plugin (ABI v5, as NCCL 2.28 loads it) for collscope's end-to-end tests: it records
 * every call NCCL's API makes into it, one line each, to the file RECORDER_OUT names (appended, one write a line,
 * so processes and threads may share it). Handles are numbered objects, so a line names its event's parent by
 * number. RECORDER_INIT_FAIL=1 makes init fail, as a plugin may; RECORDER_MASK sets another activation mask. It
 * logs one INFO line through the logger NCCL hands it. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "nccl_profiler.h"

typedef struct {
  long id;
} event_t;

static atomic_long next_id = 1;

static void emit(const char* line) {
  const char* path = getenv("RECORDER_OUT");
  if (!path) return;
  FILE* f = fopen(path, "a");
  if (!f) return;
  fputs(line, f);
  fclose(f);
}

static long id_of(void* h) { return h ? ((event_t*)h)->id : 0; }

static ncclResult_t init(void** context, uint64_t commId, int* mask, const char* name, int nNodes, int nranks,
                         int rank, ncclDebugLogger_t logfn) {
  if (getenv("RECORDER_INIT_FAIL")) return ncclInternalError;
  if (logfn) logfn(NCCL_LOG_INFO, 0x1 /* NCCL_INIT */, __FILE__, __LINE__, "recorder: rank %d of %d", rank, nranks);
  event_t* c = malloc(sizeof(event_t));
  c->id = atomic_fetch_add(&next_id, 1);
  *context = c;
  /* Group, Coll, P2p, ProxyOp, ProxyStep, KernelCh */
  const char* m = getenv("RECORDER_MASK");
  *mask = m ? (int)strtol(m, NULL, 0) : 0x5f;
  char line[512];
  snprintf(line, sizeof line, "init ctx=%d-%ld pid=%d comm=%llx nnodes=%d nranks=%d rank=%d name=%s\n",
           (int)getpid(), c->id, (int)getpid(), (unsigned long long)commId, nNodes, nranks, rank,
           name ? name : "-");
  emit(line);
  return ncclSuccess;
}

static ncclResult_t start(void* context, void** handle, ncclProfilerEventDescr_v5_t* d) {
  event_t* e = malloc(sizeof(event_t));
  e->id = atomic_fetch_add(&next_id, 1);
  *handle = e;
  char line[512];
  int n = snprintf(line, sizeof line, "start id=%d-%ld ctx=%d-%ld type=%llu parent=%d-%ld rank=%d",
                   (int)getpid(), e->id, (int)getpid(), id_of(context), (unsigned long long)d->type,
                   (int)getpid(), id_of(d->parentObj), d->rank);
  switch (d->type) {
    case ncclProfileGroupApi:
      snprintf(line + n, sizeof line - n, " depth=%d captured=%d\n", d->groupApi.groupDepth,
               (int)d->groupApi.graphCaptured);
      break;
    case ncclProfileCollApi:
      snprintf(line + n, sizeof line - n, " func=%s count=%zu datatype=%s root=%d\n", d->collApi.func,
               d->collApi.count, d->collApi.datatype, d->collApi.root);
      break;
    case ncclProfileP2pApi:
      snprintf(line + n, sizeof line - n, " func=%s count=%zu datatype=%s\n", d->p2pApi.func, d->p2pApi.count,
               d->p2pApi.datatype);
      break;
    case ncclProfileColl:
      snprintf(line + n, sizeof line - n,
               " group=%d-%ld seq=%llu func=%s send=%p recv=%p count=%zu root=%d datatype=%s nch=%u nwarps=%u"
               " algo=%s proto=%s\n",
               (int)getpid(), id_of(d->coll.parentGroup), (unsigned long long)d->coll.seqNumber, d->coll.func,
               d->coll.sendBuff, d->coll.recvBuff, d->coll.count, d->coll.root, d->coll.datatype, d->coll.nChannels,
               d->coll.nWarps, d->coll.algo, d->coll.proto);
      break;
    case ncclProfileP2p:
      snprintf(line + n, sizeof line - n, " group=%d-%ld func=%s buff=%p count=%zu datatype=%s peer=%d nch=%u\n",
               (int)getpid(), id_of(d->p2p.parentGroup), d->p2p.func, d->p2p.buff, d->p2p.count, d->p2p.datatype,
               d->p2p.peer, d->p2p.nChannels);
      break;
    case ncclProfileProxyOp:
      snprintf(line + n, sizeof line - n, " opid=%d channel=%u peer=%d nsteps=%d chunk=%d send=%d\n",
               (int)d->proxyOp.pid, d->proxyOp.channelId, d->proxyOp.peer, d->proxyOp.nSteps,
               d->proxyOp.chunkSize, d->proxyOp.isSend);
      break;
    case ncclProfileProxyStep:
      snprintf(line + n, sizeof line - n, " step=%d\n", d->proxyStep.step);
      break;
    case ncclProfileNetPlugin: {
      /* The socket network's data, when the id names it (the data lives only during this call). */
      int sock = d->netPlugin.id == (int64_t)(NCCL_PROFILER_NET_TYPE_SOCK | NCCL_PROFILER_NET_SOCKET_VER);
      const ncclProfilerNetSockDescr_v1_t* s = d->netPlugin.data;
      if (sock && s && s->type == ncclProfileSocket) {
        snprintf(line + n, sizeof line - n, " sock=1 fd=%d op=%d length=%zu\n", s->sock.fd, s->sock.op,
                 s->sock.length);
      } else {
        snprintf(line + n, sizeof line - n, " sock=0 id=%lld\n", (long long)d->netPlugin.id);
      }
      break;
    }
    case ncclProfileKernelCh:
      snprintf(line + n, sizeof line - n, " channel=%u ptimer=%llu\n", d->kernelCh.channelId,
               (unsigned long long)d->kernelCh.pTimer);
      break;
    default:
      snprintf(line + n, sizeof line - n, "\n");
  }
  emit(line);
  return ncclSuccess;
}

static ncclResult_t stop(void* handle) {
  char line[128];
  snprintf(line, sizeof line, "stop id=%d-%ld\n", (int)getpid(), id_of(handle));
  emit(line);
  return ncclSuccess;
}

static ncclResult_t record(void* handle, ncclProfilerEventState_t state, ncclProfilerEventStateArgs_v5_t* a) {
  char line[160];
  unsigned long long arg = 0;
  /* NCCL passes no arguments (NULL) with the GroupApi states: arg=none says so. */
  if (!a) {
    snprintf(line, sizeof line, "state id=%d-%ld st=%d arg=none\n", (int)getpid(), id_of(handle), (int)state);
    emit(line);
    return ncclSuccess;
  }
  if (state == ncclProfilerKernelChStop) arg = a->kernelCh.pTimer;
  else if (state == ncclProfilerProxyCtrlAppendEnd) arg = (unsigned long long)a->proxyCtrl.appendedProxyOps;
  else arg = a->proxyStep.transSize;
  snprintf(line, sizeof line, "state id=%d-%ld st=%d arg=%llu\n", (int)getpid(), id_of(handle), (int)state, arg);
  emit(line);
  return ncclSuccess;
}

static ncclResult_t finalize(void* context) {
  char line[128];
  snprintf(line, sizeof line, "finalize ctx=%d-%ld\n", (int)getpid(), id_of(context));
  emit(line);
  return ncclSuccess;
}

ncclProfiler_v5_t ncclProfiler_v5 = {"recorder", init, start, stop, record, finalize};
