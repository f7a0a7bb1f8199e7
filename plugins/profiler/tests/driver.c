/* Drives libcollscope_profiler.so from C the way NCCL does (NCCL 2.30.7 src/plugin/profiler.cc,
 * src/transport/net.cc, src/transport/profiler.cc, src/proxy.cc): dlopen, the ncclProfiler_vN symbol, init per
 * communicator, calls started and stopped on the launching thread, their proxy operations, steps and kernel
 * channels on a proxy thread, PXN operations of another process, proxy control events, finalize.
 *
 *   driver SO layout         print the offset and size of every ABI field, as this compiler lays them out
 *   driver SO scenario       run the scenario through v6, v5 and v4; check collscope's counters; exit 0 if right
 *   driver SO bench N        time N iterations of the hot path through v5; print ns per event call
 *   driver SO hold FILE      run calls through v6 as rank DRIVER_RANK of DRIVER_NRANKS, print "held", wait for FILE;
 *                            DRIVER_DIVERGE=wait starts a fourth AllReduce that never completes (the others do not
 *                            call it), DRIVER_DIVERGE=broadcast makes the third call a Broadcast
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../include/collscope_profiler.h"
#include "nccl_profiler.h"

#define DEFAULT_MASK \
  (ncclProfileGroup | ncclProfileColl | ncclProfileP2p | ncclProfileProxyOp | ncclProfileProxyStep | \
   ncclProfileKernelCh)

static int failures;
#define CHECK(cond, ...)                                  \
  do {                                                    \
    if (!(cond)) {                                        \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                       \
      fprintf(stderr, "\n");                              \
      failures++;                                         \
    }                                                     \
  } while (0)

/* NCCL's mask: one int for every communicator. */
static int eActivationMask;
static int infoLines;
/* This process's rank and the communicator's size (the hold mode takes them from DRIVER_RANK, DRIVER_NRANKS). */
static int gRank = 1;
static int gNranks = 4;

static void logger(ncclDebugLogLevel level, unsigned long flags, const char* file, int line, const char* fmt, ...) {
  (void)flags;
  (void)line;
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  if (level == NCCL_LOG_INFO && strstr(buf, "PROFILER/Plugin: collscope")) infoLines++;
  fprintf(stderr, "[nccl log %d %s] %s\n", (int)level, file, buf);
}

static void pause_us(long us) {
  struct timespec t = {us / 1000000, (us % 1000000) * 1000};
  nanosleep(&t, NULL);
}

/* One ABI version behind one set of calls; the scenario is written once against it. */
struct ops {
  int version;
  ncclResult_t (*init)(void** ctx, const char* name, uint64_t id);
  void* (*coll)(void* ctx, const char* func, size_t count, const char* dt, int root, uint8_t nch, const char* algo,
                const char* proto);
  void* (*p2p)(void* ctx, const char* func, size_t count, const char* dt, int peer, uint8_t nch);
  void* (*proxyOp)(void* ctx, void* parent, pid_t pid, uint8_t ch, int peer, int nSteps, int isSend);
  void* (*step)(void* ctx, void* parent, int step);
  void* (*kernel)(void* ctx, void* parent, uint8_t ch, uint64_t pTimer);
  void* (*simple)(void* ctx, uint64_t type); /* events with no members: Group, ProxyCtrl, API events */
  ncclResult_t (*stop)(void* h);
  ncclResult_t (*record)(void* h, ncclProfilerEventState_t s, ncclProfilerEventStateArgs_v4_t* a);
  ncclResult_t (*finalize)(void* ctx);
};

/* The starters of one version: NCCL zeroes each descriptor and fills the member its type names. */
#define STARTERS(V, P, D)                                                                                          \
  static void* V##_coll(void* ctx, const char* func, size_t count, const char* dt, int root, uint8_t nch,          \
                        const char* algo, const char* proto) {                                                     \
    D d;                                                                                                           \
    memset(&d, 0, sizeof(d));                                                                                      \
    d.type = ncclProfileColl;                                                                                      \
    d.rank = gRank;                                                                                                \
    d.coll.func = func;                                                                                            \
    d.coll.count = count;                                                                                          \
    d.coll.datatype = dt;                                                                                          \
    d.coll.root = root;                                                                                            \
    d.coll.nChannels = nch;                                                                                        \
    d.coll.nWarps = 16;                                                                                            \
    d.coll.algo = algo;                                                                                            \
    d.coll.proto = proto;                                                                                          \
    void* h = (void*)0x1; /* the plugin must overwrite it */                                                       \
    CHECK(P->startEvent(ctx, &h, &d) == ncclSuccess, "coll start");                                                \
    return h;                                                                                                      \
  }                                                                                                                \
  static void* V##_p2p(void* ctx, const char* func, size_t count, const char* dt, int peer, uint8_t nch) {        \
    D d;                                                                                                           \
    memset(&d, 0, sizeof(d));                                                                                      \
    d.type = ncclProfileP2p;                                                                                       \
    d.rank = gRank;                                                                                                \
    d.p2p.func = func;                                                                                             \
    d.p2p.count = count;                                                                                           \
    d.p2p.datatype = dt;                                                                                           \
    d.p2p.peer = peer;                                                                                             \
    d.p2p.nChannels = nch;                                                                                         \
    void* h = (void*)0x1;                                                                                          \
    CHECK(P->startEvent(ctx, &h, &d) == ncclSuccess, "p2p start");                                                 \
    return h;                                                                                                      \
  }                                                                                                                \
  static void* V##_proxyOp(void* ctx, void* parent, pid_t pid, uint8_t ch, int peer, int nSteps, int isSend) {    \
    D d;                                                                                                           \
    memset(&d, 0, sizeof(d));                                                                                      \
    d.type = ncclProfileProxyOp;                                                                                   \
    d.parentObj = parent;                                                                                          \
    d.rank = gRank;                                                                                                \
    d.proxyOp.pid = pid;                                                                                           \
    d.proxyOp.channelId = ch;                                                                                      \
    d.proxyOp.peer = peer;                                                                                         \
    d.proxyOp.nSteps = nSteps;                                                                                     \
    d.proxyOp.chunkSize = 1 << 19;                                                                                 \
    d.proxyOp.isSend = isSend;                                                                                     \
    void* h = (void*)0x1;                                                                                          \
    CHECK(P->startEvent(ctx, &h, &d) == ncclSuccess, "proxy op start");                                            \
    return h;                                                                                                      \
  }                                                                                                                \
  static void* V##_step(void* ctx, void* parent, int step) {                                                       \
    D d;                                                                                                           \
    memset(&d, 0, sizeof(d));                                                                                      \
    d.type = ncclProfileProxyStep;                                                                                 \
    d.parentObj = parent;                                                                                          \
    d.rank = gRank;                                                                                                \
    d.proxyStep.step = step;                                                                                       \
    void* h = (void*)0x1;                                                                                          \
    CHECK(P->startEvent(ctx, &h, &d) == ncclSuccess, "step start");                                                \
    return h;                                                                                                      \
  }                                                                                                                \
  static void* V##_kernel(void* ctx, void* parent, uint8_t ch, uint64_t pTimer) {                                  \
    D d;                                                                                                           \
    memset(&d, 0, sizeof(d));                                                                                      \
    d.type = ncclProfileKernelCh;                                                                                  \
    d.parentObj = parent;                                                                                          \
    d.kernelCh.channelId = ch;                                                                                     \
    d.kernelCh.pTimer = pTimer;                                                                                    \
    void* h = (void*)0x1;                                                                                          \
    CHECK(P->startEvent(ctx, &h, &d) == ncclSuccess, "kernel start");                                              \
    return h;                                                                                                      \
  }                                                                                                                \
  static void* V##_simple(void* ctx, uint64_t type) {                                                              \
    D d;                                                                                                           \
    memset(&d, 0, sizeof(d));                                                                                      \
    d.type = type;                                                                                                 \
    void* h = (void*)0x1;                                                                                          \
    CHECK(P->startEvent(ctx, &h, &d) == ncclSuccess, "start of type %lu", (unsigned long)type);                    \
    return h;                                                                                                      \
  }                                                                                                                \
  static ncclResult_t V##_record(void* h, ncclProfilerEventState_t s, ncclProfilerEventStateArgs_v4_t* a) {       \
    return P->recordEventState(h, s, a);                                                                           \
  }

static ncclProfiler_v4_t* p4;
static ncclProfiler_v5_t* p5;
static ncclProfiler_v6_t* p6;
STARTERS(v4, p4, ncclProfilerEventDescr_v4_t)
STARTERS(v5, p5, ncclProfilerEventDescr_v5_t)
STARTERS(v6, p6, ncclProfilerEventDescr_v6_t)

static ncclResult_t v4_init(void** ctx, const char* name, uint64_t id) {
  return p4->init(ctx, &eActivationMask, name, id, 2, gNranks, gRank, logger);
}
static ncclResult_t v5_init(void** ctx, const char* name, uint64_t id) {
  return p5->init(ctx, id, &eActivationMask, name, 2, gNranks, gRank, logger);
}
static ncclResult_t v6_init(void** ctx, const char* name, uint64_t id) {
  return p6->init(ctx, id, &eActivationMask, name, 2, gNranks, gRank, logger);
}

static ncclResult_t v4_stop(void* h) { return p4->stopEvent(h); }
static ncclResult_t v5_stop(void* h) { return p5->stopEvent(h); }
static ncclResult_t v6_stop(void* h) { return p6->stopEvent(h); }
static ncclResult_t v4_fin(void* c) { return p4->finalize(c); }
static ncclResult_t v5_fin(void* c) { return p5->finalize(c); }
static ncclResult_t v6_fin(void* c) { return p6->finalize(c); }

#define OPS(V, N) \
  {N, V##_init, V##_coll, V##_p2p, V##_proxyOp, V##_step, V##_kernel, V##_simple, V##_stop, V##_record, V##_fin}

static void recordState(struct ops* o, void* h, ncclProfilerEventState_t s, size_t transSize) {
  ncclProfilerEventStateArgs_v4_t a;
  memset(&a, 0, sizeof(a));
  a.proxyStep.transSize = transSize;
  CHECK(o->record(h, s, &a) == ncclSuccess, "record %d", (int)s);
}

/* A network send of nSteps steps as net.cc's sendProgress reports it; peerWaitUs in SendPeerWait. */
static void sendOp(struct ops* o, void* ctx, void* op, int nSteps, long peerWaitUs) {
  ncclProfilerEventStateArgs_v4_t none;
  memset(&none, 0, sizeof(none));
  CHECK(o->record(op, ncclProfilerProxyOpInProgress_v4, &none) == ncclSuccess, "in progress");
  for (int s = 0; s < nSteps; s++) {
    void* st = o->step(ctx, op, s);
    CHECK(st != NULL, "send step %d", s);
    recordState(o, st, ncclProfilerProxyStepSendGPUWait, 0);
    recordState(o, st, ncclProfilerProxyStepSendPeerWait_v4, 0);
    if (peerWaitUs) pause_us(peerWaitUs);
    recordState(o, st, ncclProfilerProxyStepSendPeerWait_v4, 0); /* NCCL repeats it while the peer has no room */
    recordState(o, st, ncclProfilerProxyStepSendWait, 65536);
    CHECK(o->stop(st) == ncclSuccess, "step stop");
  }
}

/* A network receive as recvProgress reports it. */
static void recvOp(struct ops* o, void* ctx, void* op, int nSteps, long dataWaitUs) {
  for (int s = 0; s < nSteps; s++) {
    void* st = o->step(ctx, op, s);
    CHECK(st != NULL, "recv step %d", s);
    recordState(o, st, ncclProfilerProxyStepRecvWait, 0);
    if (dataWaitUs) pause_us(dataWaitUs);
    recordState(o, st, ncclProfilerProxyStepRecvFlushWait, 65536);
    recordState(o, st, ncclProfilerProxyStepRecvGPUWait, 65536);
    CHECK(o->stop(st) == ncclSuccess, "step stop");
  }
}

/* A kernel channel as the profiler proxy reports it: start, KernelChStop with the stop timestamp, stop. */
static void kernelCh(struct ops* o, void* ctx, void* parent, uint8_t ch, uint64_t t0, uint64_t t1) {
  void* k = o->kernel(ctx, parent, ch, t0);
  CHECK(k != NULL, "kernel channel %d", ch);
  ncclProfilerEventStateArgs_v4_t a;
  memset(&a, 0, sizeof(a));
  a.kernelCh.pTimer = t1;
  CHECK(o->record(k, ncclProfilerKernelChStop, &a) == ncclSuccess, "kernel stop state");
  CHECK(o->stop(k) == ncclSuccess, "kernel stop");
}

struct proxyWork {
  struct ops* o;
  void* ctx;
  void* coll;
};

/* The proxy thread's share of the AllReduce: send to the ring's next rank and receive from its previous one on two
 * channels (ring 0 1 .. n-1), then each channel's kernel. */
static void* proxyThread(void* arg) {
  struct proxyWork* w = arg;
  void* ops[4];
  int next = (gRank + 1) % gNranks, prev = (gRank + gNranks - 1) % gNranks;
  for (int c = 0; c < 2; c++) {
    ops[2 * c] = w->o->proxyOp(w->ctx, w->coll, getpid(), c, next, 4, 1);
    ops[2 * c + 1] = w->o->proxyOp(w->ctx, w->coll, getpid(), c, prev, 4, 0);
    CHECK(ops[2 * c] && ops[2 * c + 1], "proxy ops of channel %d", c);
  }
  for (int c = 0; c < 2; c++) {
    sendOp(w->o, w->ctx, ops[2 * c], 4, 300);
    recvOp(w->o, w->ctx, ops[2 * c + 1], 4, 200);
  }
  for (int i = 0; i < 4; i++) CHECK(w->o->stop(ops[i]) == ncclSuccess, "proxy op stop");
  kernelCh(w->o, w->ctx, w->coll, 0, 1000000, 1900000);
  kernelCh(w->o, w->ctx, w->coll, 1, 1100000, 2000000);
  return NULL;
}

/* `func` of 1 MiB of float, on 2 channels over the network: the proxy thread's share runs beside the launch. */
static void networkColl(struct ops* o, void* ctx, const char* func, const char* algo, const char* proto) {
  void* coll = o->coll(ctx, func, 262144, "ncclFloat32", 0, 2, algo, proto);
  CHECK(coll != NULL, "coll handle");
  struct proxyWork w = {o, ctx, coll};
  pthread_t proxy;
  pthread_create(&proxy, NULL, proxyThread, &w);
  CHECK(o->stop(coll) == ncclSuccess, "coll stop (enqueued)");
  pthread_join(proxy, NULL);
}

static void networkAllReduce(struct ops* o, void* ctx, const char* algo, const char* proto) {
  networkColl(o, ctx, "AllReduce", algo, proto);
}

/* The proxy thread sleeps 2 ms, as its ProxyCtrl events report it. */
static void proxySleep(struct ops* o, void* ctx) {
  ncclProfilerEventStateArgs_v4_t a;
  memset(&a, 0, sizeof(a));
  void* c = o->simple(ctx, ncclProfileProxyCtrl);
  CHECK(c != NULL, "proxy ctrl handle");
  o->record(c, ncclProfilerProxyCtrlSleep, &a);
  pause_us(2000);
  o->record(c, ncclProfilerProxyCtrlWakeup, &a);
  o->stop(c);
}

static void scenario(struct ops* o) {
  char name[32];
  snprintf(name, sizeof(name), "driver-v%d", o->version);
  void* ctx = NULL;
  int before = infoLines;
  CHECK(o->init(&ctx, name, 0x1000 + o->version) == ncclSuccess && ctx != NULL, "v%d init", o->version);
  CHECK(infoLines == before + 1, "init logs one INFO line through NCCL's logger");
  const char* env = getenv("NCCL_PROFILE_EVENT_MASK");
  int expect = env ? atoi(env) : DEFAULT_MASK;
  CHECK(eActivationMask == expect, "mask %d, expected %d", eActivationMask, expect);

  /* What the plugin keeps nothing of gets a NULL handle (NCCL then never stops it). */
  CHECK(o->simple(ctx, ncclProfileGroup) == NULL, "group handle");
  if (o->version >= 5) {
    CHECK(o->simple(ctx, ncclProfileGroupApi) == NULL, "group API handle");
    CHECK(o->simple(ctx, ncclProfileCollApi) == NULL, "coll API handle");
  }

  networkAllReduce(o, ctx, "RING", "SIMPLE");

  /* Send to rank 2 and receive from rank 0: one channel each, a kernel channel each. */
  void* snd = o->p2p(ctx, "Send", 1000, "ncclBfloat16", 2, 1);
  void* rcv = o->p2p(ctx, "Recv", 1000, "ncclBfloat16", 0, 1);
  CHECK(snd && rcv, "p2p handles");
  void* sop = o->proxyOp(ctx, snd, getpid(), 0, 2, 1, 1);
  void* rop = o->proxyOp(ctx, rcv, getpid(), 0, 0, 1, 0);
  o->stop(snd);
  o->stop(rcv);
  sendOp(o, ctx, sop, 1, 0);
  recvOp(o, ctx, rop, 1, 0);
  o->stop(sop);
  o->stop(rop);
  kernelCh(o, ctx, snd, 0, 3000000, 3100000);
  kernelCh(o, ctx, rcv, 0, 3000000, 3200000);

  /* A call the model cannot name: no handle. */
  CHECK(o->coll(ctx, "Gather", 8, "ncclFloat32", 0, 1, "RING", "SIMPLE") == NULL, "Gather handle");

  /* PXN: another process's operation, run by this proxy. Its parent and context belong to that process: the
   * plugin must not read them (these addresses would crash it). */
  void* foreign = o->proxyOp((void*)0x20, (void*)0x10, getpid() + 1, 5, 7, 2, 1);
  CHECK(foreign != NULL, "PXN proxy op handle");
  sendOp(o, (void*)0x20, foreign, 2, 0);
  o->stop(foreign);

  /* The proxy thread's own events, if asked for (NCCL checks the mask first). */
  if (eActivationMask & ncclProfileProxyCtrl) {
    ncclProfilerEventStateArgs_v4_t a;
    memset(&a, 0, sizeof(a));
    proxySleep(o, ctx);
    void* c = o->simple(ctx, ncclProfileProxyCtrl);
    o->record(c, ncclProfilerProxyCtrlAppend, &a);
    a.proxyCtrl.appendedProxyOps = 3;
    o->record(c, ncclProfilerProxyCtrlAppendEnd, &a);
    o->stop(c);
  }
  CHECK(o->stop(NULL) == ncclSuccess, "stop of a NULL handle");
  CHECK(o->finalize(ctx) == ncclSuccess, "finalize");
}

/* A rank of one communicator ("held", one id for every process) that runs two Ring/Simple AllReduces and one
 * Tree/LL AllReduce over the network and a proxy thread's sleep, prints "held", and finalizes only once the file
 * `release` exists (at most 60 s later): meanwhile the test reads the plugin's telemetry. `diverge` (DRIVER_DIVERGE)
 * makes this rank's calls differ from the others': "broadcast", its third call is a Broadcast; "wait", it enqueues a
 * fourth AllReduce whose proxy never runs, as a rank waiting for peers that never call it. */
static void hold(struct ops* o, const char* release, const char* diverge) {
  void* ctx = NULL;
  CHECK(o->init(&ctx, "held", 0x4e1d) == ncclSuccess && ctx != NULL, "init");
  networkAllReduce(o, ctx, "RING", "SIMPLE");
  networkAllReduce(o, ctx, "RING", "SIMPLE");
  networkColl(o, ctx, strcmp(diverge, "broadcast") == 0 ? "Broadcast" : "AllReduce", "TREE", "LL");
  if (strcmp(diverge, "wait") == 0) {
    void* stuck = o->coll(ctx, "AllReduce", 262144, "ncclFloat32", 0, 2, "RING", "SIMPLE");
    CHECK(stuck != NULL && o->stop(stuck) == ncclSuccess, "the call that waits");
  }
  if (eActivationMask & ncclProfileProxyCtrl) proxySleep(o, ctx);
  printf("held\n");
  fflush(stdout);
  for (int i = 0; i < 600 && access(release, F_OK) != 0; i++) pause_us(100000);
  CHECK(o->finalize(ctx) == ncclSuccess, "finalize");
}

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}

static void bench(struct ops* o, long n) {
  void* ctx = NULL;
  CHECK(o->init(&ctx, "bench", 0xbe) == ncclSuccess, "init");
  ncclProfilerEventStateArgs_v4_t a;
  memset(&a, 0, sizeof(a));
  /* A call with one kernel channel: start, KernelCh start/state/stop, stop: 5 event calls. */
  double t0 = now_ns();
  for (long i = 0; i < n; i++) {
    void* c = o->coll(ctx, "AllReduce", 2, "ncclFloat32", 0, 1, "RING", "LL");
    void* k = o->kernel(ctx, c, 0, 100 + i);
    a.kernelCh.pTimer = 200 + i;
    o->record(k, ncclProfilerKernelChStop, &a);
    o->stop(k);
    o->stop(c);
  }
  double t1 = now_ns();
  /* A call over the network: start, a proxy op of 2 steps (start, 3 states, stop each), the kernel channel, stop:
   * 17 event calls. */
  for (long i = 0; i < n; i++) {
    void* c = o->coll(ctx, "AllReduce", 262144, "ncclFloat32", 0, 1, "RING", "SIMPLE");
    void* op = o->proxyOp(ctx, c, getpid(), 0, 2, 2, 1);
    for (int s = 0; s < 2; s++) {
      void* st = o->step(ctx, op, s);
      a.proxyStep.transSize = 65536;
      o->record(st, ncclProfilerProxyStepSendGPUWait, &a);
      o->record(st, ncclProfilerProxyStepSendPeerWait_v4, &a);
      o->record(st, ncclProfilerProxyStepSendWait, &a);
      o->stop(st);
    }
    o->stop(op);
    void* k = o->kernel(ctx, c, 0, 100 + i);
    a.kernelCh.pTimer = 200 + i;
    o->record(k, ncclProfilerKernelChStop, &a);
    o->stop(k);
    o->stop(c);
  }
  double t2 = now_ns();
  o->finalize(ctx);
  printf("bench iterations=%ld\n", n);
  printf("bench intra_node_ns_per_event=%.1f intra_node_ns_per_call=%.1f\n", (t1 - t0) / (5.0 * n), (t1 - t0) / n);
  printf("bench network_ns_per_event=%.1f network_ns_per_call=%.1f\n", (t2 - t1) / (17.0 * n), (t2 - t1) / n);
}

static void layout(void) {
#define F(T, name, member) printf("%s.%s %zu %zu\n", #T, #name, offsetof(T, member), sizeof(((T*)0)->member))
#define U(T, name, member) printf("%s.%s %zu %zu\n", #T, #name, offsetof(T, member), sizeof(((T*)0)->member))
#define S(T) printf("%s.size %zu %zu\n", #T, sizeof(T), _Alignof(T))
  S(ncclProfilerEventDescr_v4_t);
  F(ncclProfilerEventDescr_v4_t, type, type);
  F(ncclProfilerEventDescr_v4_t, parentObj, parentObj);
  F(ncclProfilerEventDescr_v4_t, rank, rank);
  F(ncclProfilerEventDescr_v4_t, coll.seqNumber, coll.seqNumber);
  F(ncclProfilerEventDescr_v4_t, coll.func, coll.func);
  F(ncclProfilerEventDescr_v4_t, coll.count, coll.count);
  F(ncclProfilerEventDescr_v4_t, coll.root, coll.root);
  F(ncclProfilerEventDescr_v4_t, coll.datatype, coll.datatype);
  F(ncclProfilerEventDescr_v4_t, coll.nChannels, coll.nChannels);
  F(ncclProfilerEventDescr_v4_t, coll.nWarps, coll.nWarps);
  F(ncclProfilerEventDescr_v4_t, coll.algo, coll.algo);
  F(ncclProfilerEventDescr_v4_t, coll.proto, coll.proto);
  F(ncclProfilerEventDescr_v4_t, p2p.func, p2p.func);
  F(ncclProfilerEventDescr_v4_t, p2p.datatype, p2p.datatype);
  F(ncclProfilerEventDescr_v4_t, p2p.count, p2p.count);
  F(ncclProfilerEventDescr_v4_t, p2p.peer, p2p.peer);
  F(ncclProfilerEventDescr_v4_t, p2p.nChannels, p2p.nChannels);
  F(ncclProfilerEventDescr_v4_t, proxyOp.pid, proxyOp.pid);
  F(ncclProfilerEventDescr_v4_t, proxyOp.channelId, proxyOp.channelId);
  F(ncclProfilerEventDescr_v4_t, proxyOp.peer, proxyOp.peer);
  F(ncclProfilerEventDescr_v4_t, proxyOp.nSteps, proxyOp.nSteps);
  F(ncclProfilerEventDescr_v4_t, proxyOp.chunkSize, proxyOp.chunkSize);
  F(ncclProfilerEventDescr_v4_t, proxyOp.isSend, proxyOp.isSend);
  F(ncclProfilerEventDescr_v4_t, proxyStep.step, proxyStep.step);
  F(ncclProfilerEventDescr_v4_t, kernelCh.channelId, kernelCh.channelId);
  F(ncclProfilerEventDescr_v4_t, kernelCh.pTimer, kernelCh.pTimer);
  F(ncclProfilerEventDescr_v4_t, netPlugin.id, netPlugin.id);
  F(ncclProfilerEventDescr_v4_t, netPlugin.data, netPlugin.data);

  S(ncclProfilerEventDescr_v5_t);
  F(ncclProfilerEventDescr_v5_t, type, type);
  F(ncclProfilerEventDescr_v5_t, parentObj, parentObj);
  F(ncclProfilerEventDescr_v5_t, rank, rank);
  F(ncclProfilerEventDescr_v5_t, collApi.root, collApi.root);
  F(ncclProfilerEventDescr_v5_t, collApi.graphCaptured, collApi.graphCaptured);
  F(ncclProfilerEventDescr_v5_t, p2pApi.graphCaptured, p2pApi.graphCaptured);
  F(ncclProfilerEventDescr_v5_t, coll.func, coll.func);
  F(ncclProfilerEventDescr_v5_t, coll.count, coll.count);
  F(ncclProfilerEventDescr_v5_t, coll.root, coll.root);
  F(ncclProfilerEventDescr_v5_t, coll.datatype, coll.datatype);
  F(ncclProfilerEventDescr_v5_t, coll.nChannels, coll.nChannels);
  F(ncclProfilerEventDescr_v5_t, coll.algo, coll.algo);
  F(ncclProfilerEventDescr_v5_t, coll.proto, coll.proto);
  F(ncclProfilerEventDescr_v5_t, coll.parentGroup, coll.parentGroup);
  F(ncclProfilerEventDescr_v5_t, p2p.func, p2p.func);
  F(ncclProfilerEventDescr_v5_t, p2p.datatype, p2p.datatype);
  F(ncclProfilerEventDescr_v5_t, p2p.count, p2p.count);
  F(ncclProfilerEventDescr_v5_t, p2p.peer, p2p.peer);
  F(ncclProfilerEventDescr_v5_t, p2p.nChannels, p2p.nChannels);
  F(ncclProfilerEventDescr_v5_t, p2p.parentGroup, p2p.parentGroup);
  F(ncclProfilerEventDescr_v5_t, proxyOp.pid, proxyOp.pid);
  F(ncclProfilerEventDescr_v5_t, proxyOp.channelId, proxyOp.channelId);
  F(ncclProfilerEventDescr_v5_t, proxyOp.isSend, proxyOp.isSend);
  F(ncclProfilerEventDescr_v5_t, proxyStep.step, proxyStep.step);
  F(ncclProfilerEventDescr_v5_t, kernelCh.pTimer, kernelCh.pTimer);

  S(ncclProfilerEventDescr_v6_t);
  F(ncclProfilerEventDescr_v6_t, type, type);
  F(ncclProfilerEventDescr_v6_t, rank, rank);
  F(ncclProfilerEventDescr_v6_t, coll.algo, coll.algo);
  F(ncclProfilerEventDescr_v6_t, coll.parentGroup, coll.parentGroup);
  F(ncclProfilerEventDescr_v6_t, proxyOp.isSend, proxyOp.isSend);
  F(ncclProfilerEventDescr_v6_t, kernelCh.pTimer, kernelCh.pTimer);
  F(ncclProfilerEventDescr_v6_t, ceColl.syncStrategy, ceColl.syncStrategy);
  F(ncclProfilerEventDescr_v6_t, ceColl.intraBatchSync, ceColl.intraBatchSync);
  F(ncclProfilerEventDescr_v6_t, ceColl.batchSize, ceColl.batchSize);
  F(ncclProfilerEventDescr_v6_t, ceColl.stream, ceColl.stream);
  F(ncclProfilerEventDescr_v6_t, ceCollSync.nRanks, ceCollSync.nRanks);
  F(ncclProfilerEventDescr_v6_t, ceCollBatch.totalBytes, ceCollBatch.totalBytes);
  F(ncclProfilerEventDescr_v6_t, ceCollBatch.useIntraSync, ceCollBatch.useIntraSync);

  S(ncclProfilerEventStateArgs_v4_t);
  U(ncclProfilerEventStateArgs_v4_t, proxyStep.transSize, proxyStep.transSize);
  U(ncclProfilerEventStateArgs_v4_t, proxyCtrl.appendedProxyOps, proxyCtrl.appendedProxyOps);
  U(ncclProfilerEventStateArgs_v4_t, kernelCh.pTimer, kernelCh.pTimer);

  S(ncclProfiler_v4_t);
  F(ncclProfiler_v4_t, init, init);
  F(ncclProfiler_v4_t, finalize, finalize);
  S(ncclProfiler_v5_t);
  F(ncclProfiler_v5_t, startEvent, startEvent);
  F(ncclProfiler_v5_t, finalize, finalize);
  S(ncclProfiler_v6_t);
  F(ncclProfiler_v6_t, recordEventState, recordEventState);
  S(struct collscope_profiler_counters);
  F(struct collscope_profiler_counters, disabled, disabled);
  S(ncclProfilerNetSockDescr_v1_t);
  F(ncclProfilerNetSockDescr_v1_t, type, type);
  F(ncclProfilerNetSockDescr_v1_t, sock.fd, sock.fd);
  F(ncclProfilerNetSockDescr_v1_t, sock.op, sock.op);
  F(ncclProfilerNetSockDescr_v1_t, sock.length, sock.length);
}

/* NCCL's library exports this (nccl.h) and the plugin looks it up in the process; the driver plays NCCL, so it
   exports it too (linked with -rdynamic). 22809 is 2.28.9 as NCCL_VERSION encodes it. */
int ncclGetVersion(int* version);
int ncclGetVersion(int* version) {
  *version = 22809;
  return 0;
}

static void printCounters(const struct collscope_profiler_counters* c) {
#define P(f) printf("counter %s=%llu\n", #f, (unsigned long long)c->f)
  P(communicators); P(calls_started); P(calls_completed); P(calls_in_flight); P(proxy_ops); P(pxn_proxy_ops);
  P(dropped_events); P(dropped_records); P(orphan_events); P(unsupported_calls); P(misused_handles);
  P(recv_gpu_wait_ns); P(proxy_sleep_ns); P(proxy_idle_ns); P(proxy_active_ns); P(proxy_append_ns);
  P(proxy_appended_ops); P(disabled);
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s PLUGIN.so layout|scenario|bench N|hold RELEASE_FILE\n", argv[0]);
    return 2;
  }
  if (strcmp(argv[2], "layout") == 0) {
    layout();
    return 0;
  }
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fprintf(stderr, "dlopen %s: %s\n", argv[1], dlerror());
    return 2;
  }
  p6 = dlsym(lib, "ncclProfiler_v6");
  p5 = dlsym(lib, "ncclProfiler_v5");
  p4 = dlsym(lib, "ncclProfiler_v4");
  int (*counters)(struct collscope_profiler_counters*, size_t) = dlsym(lib, "collscope_profiler_counters");
  if (!p6 || !p5 || !p4 || !counters) {
    fprintf(stderr, "missing symbols: v6 %p v5 %p v4 %p counters %p\n", (void*)p6, (void*)p5, (void*)p4,
            (void*)counters);
    return 2;
  }
  CHECK(strcmp(p6->name, "collscope") == 0 && strcmp(p5->name, "collscope") == 0 &&
            strcmp(p4->name, "collscope") == 0,
        "plugin name");
  struct ops v6 = OPS(v6, 6), v5 = OPS(v5, 5), v4 = OPS(v4, 4);

  if (strcmp(argv[2], "bench") == 0) {
    bench(&v5, argc > 3 ? atol(argv[3]) : 1000000);
  } else if (strcmp(argv[2], "hold") == 0 && argc > 3) {
    if (getenv("DRIVER_RANK")) gRank = atoi(getenv("DRIVER_RANK"));
    if (getenv("DRIVER_NRANKS")) gNranks = atoi(getenv("DRIVER_NRANKS"));
    if (gNranks < 1) gNranks = 1;
    hold(&v6, argv[3], getenv("DRIVER_DIVERGE") ? getenv("DRIVER_DIVERGE") : "");
  } else {
    scenario(&v6);
    scenario(&v5);
    scenario(&v4);
  }
  struct collscope_profiler_counters c;
  memset(&c, 0xff, sizeof(c));
  CHECK(counters(&c, sizeof(c)) == 0, "counters");
  CHECK(counters(NULL, sizeof(c)) == -1, "counters(NULL)");
  printCounters(&c);
  if (strcmp(argv[2], "scenario") == 0) {
    /* Per version: the AllReduce, the Send and the Recv; 4 + 1 + 1 proxy operations; one PXN operation. */
    CHECK(c.communicators == 0, "every communicator finalised");
    CHECK(c.calls_started == 9 && c.calls_completed == 9 && c.calls_in_flight == 0, "calls");
    CHECK(c.proxy_ops == 18 && c.pxn_proxy_ops == 3, "proxy operations");
    CHECK(c.unsupported_calls == 3, "one Gather per version");
    CHECK(c.dropped_events == 0 && c.dropped_records == 0 && c.orphan_events == 0 && c.misused_handles == 0,
          "nothing dropped, orphaned or misused");
    CHECK(c.recv_gpu_wait_ns > 0, "receive steps waited for the GPU");
    CHECK(c.disabled == 0, "still enabled");
    if (eActivationMask & ncclProfileProxyCtrl) {
      CHECK(c.proxy_sleep_ns >= 3 * 2000000 && c.proxy_appended_ops == 9, "proxy control");
    }
  }
  printf("failures=%d\n", failures);
  return failures ? 1 : 0;
}
