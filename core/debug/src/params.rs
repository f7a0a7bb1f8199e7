//! The one registry of the environment variables collscope reads, in the manner of NCCL's `NCCL_PARAM`
//! (`src/include/param.h`, v2.28.9-1): each declared once here with its type, default, accepted values, meaning
//! and, where NCCL has the variable, NCCL's semantics. Typed reads go through [`crate::env::Env`]; the few reads
//! that cannot (the logger's own settings, launchers' variables, system folders, a secret that must not be
//! logged) go through the functions below, the only ones that touch the process environment besides
//! `Env::from_process`. `scripts/env-reads.py` (CI) fails on a read anywhere else and on a name read that is not
//! declared here; `collscope env` lists them with their values; the README's variable table is
//! `collscope env --markdown`.

use std::ffi::OsString;
use std::path::PathBuf;

/// Who defines a variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Owner {
    /// NCCL's: collscope follows NCCL 2.28.9's meaning.
    Nccl,
    /// collscope's own.
    Collscope,
    /// A launcher's (collscope, Open MPI, Slurm, torchrun), read to find this process's rank.
    Launcher,
    /// The system's or another tool's (XDG folders, OpenTelemetry).
    System,
}

impl Owner {
    pub fn as_str(self) -> &'static str {
        match self {
            Owner::Nccl => "nccl",
            Owner::Collscope => "collscope",
            Owner::Launcher => "launcher",
            Owner::System => "system",
        }
    }
}

/// How a value is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ty {
    /// C's `strtoll(.., 0)` syntax: decimal, `0x` hexadecimal, leading `0` octal.
    Int,
    /// Whole seconds.
    Seconds,
    /// A word or list with its own grammar (`values` gives it).
    Text,
    /// A file or folder.
    Path,
    /// `HOST:PORT`.
    Addr,
}

impl Ty {
    pub fn as_str(self) -> &'static str {
        match self {
            Ty::Int => "int",
            Ty::Seconds => "seconds",
            Ty::Text => "text",
            Ty::Path => "path",
            Ty::Addr => "addr",
        }
    }
}

/// One variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Param {
    pub name: &'static str,
    pub owner: Owner,
    pub ty: Ty,
    /// The value used when unset, as a user would write it; empty when unset means "none" (`meaning` says).
    pub default: &'static str,
    /// The values accepted (range or grammar).
    pub values: &'static str,
    pub meaning: &'static str,
    /// NCCL 2.28.9's semantics and where they are (file, tag), where NCCL has the variable; empty otherwise.
    pub nccl: &'static str,
    /// Never printed or logged (a shared secret).
    pub secret: bool,
}

const fn p(
    owner: Owner,
    name: &'static str,
    ty: Ty,
    default: &'static str,
    values: &'static str,
    meaning: &'static str,
) -> Param {
    Param { name, owner, ty, default, values, meaning, nccl: "", secret: false }
}
const fn nccl(name: &'static str, ty: Ty, default: &'static str, values: &'static str, meaning: &'static str) -> Param {
    p(Owner::Nccl, name, ty, default, values, meaning)
}
const fn own(name: &'static str, ty: Ty, default: &'static str, values: &'static str, meaning: &'static str) -> Param {
    p(Owner::Collscope, name, ty, default, values, meaning)
}
const fn launcher(name: &'static str, meaning: &'static str) -> Param {
    p(Owner::Launcher, name, Ty::Int, "", "a non-negative integer", meaning)
}
const fn system(name: &'static str, ty: Ty, meaning: &'static str) -> Param {
    p(Owner::System, name, ty, "", "", meaning)
}

impl Param {
    const fn nccl_says(mut self, semantics: &'static str) -> Param {
        self.nccl = semantics;
        self
    }
    const fn secret(mut self) -> Param {
        self.secret = true;
        self
    }
}

use Ty::{Addr, Int, Path, Seconds, Text};

/// Every variable collscope reads, by name.
pub const PARAMS: &[Param] = &[
    // NCCL's debug log (`src/debug.cc`).
    nccl("NCCL_DEBUG", Text, "", "VERSION, WARN, INFO, ABORT, TRACE", "log level (unset: no log)"),
    nccl("NCCL_DEBUG_SUBSYS", Text, "INIT,BOOTSTRAP,ENV", "comma list of INIT,COLL,P2P,SHM,NET,GRAPH,TUNING,ENV,ALLOC,CALL,PROXY,NVLS,BOOTSTRAP,REG,PROFILE,RAS,ALL; ^ excludes", "subsystems logged at INFO"),
    nccl("NCCL_DEBUG_FILE", Path, "", "a file name; %h host, %p pid", "log file (unset: standard output)"),
    nccl("NCCL_DEBUG_TIMESTAMP_LEVELS", Text, "WARN", "comma list of levels, ^ excludes", "levels whose lines carry a timestamp"),
    // Topology (`src/graph/topo.cc`, `src/graph/paths.cc`).
    nccl("NCCL_TOPO_FILE", Path, "", "an NCCL topology XML file", "the machine's topology instead of detecting it"),
    nccl("NCCL_TOPO_DUMP_FILE", Path, "", "a file to write", "where to write the detected topology as XML"),
    nccl("NCCL_GRAPH_FILE", Path, "", "an NCCL graph XML file", "the graphs to use instead of searching"),
    nccl("NCCL_GRAPH_DUMP_FILE", Path, "", "a file to write", "where to write the searched graphs as XML"),
    nccl("NCCL_P2P_DISABLE", Int, "0", "1 disables; any other value does nothing", "no P2P between GPUs (SHM or NET instead)")
        .nccl_says("only the value 1 disables P2P, then NCCL_P2P_LEVEL is not read (src/graph/paths.cc ncclGetLevel, v2.28.9-1)"),
    nccl("NCCL_P2P_LEVEL", Text, "", "LOC, NVL, PIX, PXB, PXN, PHB, SYS, or 0-5", "the farthest path P2P is used over")
        .nccl_says("read only when NCCL_P2P_DISABLE is not 1; an old-style number maps to a path (src/graph/paths.cc ncclGetLevel, v2.28.9-1)"),
    nccl("NCCL_SHM_DISABLE", Int, "0", "1 disables; any other value does nothing", "no SHM between processes of a host (NET instead)")
        .nccl_says("only the value 1 disables SHM (src/transport/shm.cc shmCanConnect, v2.28.9-1)"),
    nccl("NCCL_NET_GDR_LEVEL", Text, "", "LOC, PIX, PXB, PXN, PHB, SYS, or 0-5", "the farthest path GPUDirect RDMA is used over"),
    nccl("NCCL_NET_GDR_READ", Int, "-2", "0 or 1; -2 automatic", "GPUDirect RDMA for sends too"),
    nccl("NCCL_NET_GDR_C2C", Int, "1", "0 or 1", "GPUDirect RDMA through a C2C-attached CPU"),
    nccl("NCCL_NVB_DISABLE", Int, "0", "0 or 1", "no P2P through an NVLink-bridged GPU"),
    nccl("NCCL_PXN_DISABLE", Int, "0", "1 disables", "no PXN (sending through a NIC near another GPU)")
        .nccl_says("only the value 1 disables PXN (src/graph/paths.cc, v2.28.9-1)"),
    nccl("NCCL_PXN_C2C", Int, "1", "0 or 1", "PXN through a C2C-attached CPU"),
    nccl("NCCL_NET_DISABLE_INTRA", Int, "0", "1 disables", "no NET between GPUs of one node")
        .nccl_says("only the value 1 disables (src/graph/paths.cc, v2.28.9-1)"),
    nccl("NCCL_NET_FORCE_FLUSH", Int, "0", "0 or 1", "flush after every GPUDirect RDMA receive"),
    nccl("NCCL_NETDEVS_POLICY", Text, "AUTO", "AUTO, ALL or MAX:<n>", "how many NICs a GPU uses"),
    nccl("NCCL_DMABUF_ENABLE", Int, "1", "0 or 1", "DMA-BUF for GPUDirect RDMA"),
    nccl("NCCL_CUMEM_ENABLE", Int, "-2", "0 or 1; -2 automatic", "cuMem allocations (P2P/CUMEM)"),
    nccl("NCCL_P2P_READ_ENABLE", Int, "-2", "0 or 1; -2 automatic", "P2P reads instead of writes"),
    nccl("NCCL_SOCKET_IFNAME", Text, "", "prefixes; ^ excludes, = exact", "interfaces for bootstrap and NET/Socket"),
    nccl("NCCL_SOCKET_FAMILY", Text, "", "AF_INET or AF_INET6", "address family of those interfaces"),
    nccl("NCCL_COMM_ID", Addr, "", "HOST:PORT", "where rank 0 hosts the bootstrap root"),
    nccl("NCCL_HOSTID", Text, "", "a string", "this host's identity instead of its hostname"),
    // Graph search and channels (`src/graph/search.cc`, `src/graph/connect.cc`, `src/init.cc`).
    nccl("NCCL_CROSS_NIC", Int, "2", "0, 1 or 2", "rings may leave and enter a node on different NICs"),
    nccl("NCCL_MIN_NCHANNELS", Int, "-2", "1 to 64; -2 automatic", "fewest channels"),
    nccl("NCCL_MAX_NCHANNELS", Int, "-2", "1 to 64; -2 automatic", "most channels"),
    nccl("NCCL_MIN_NRINGS", Int, "-2", "as NCCL_MIN_NCHANNELS", "NCCL_MIN_NCHANNELS's old name"),
    nccl("NCCL_MAX_NRINGS", Int, "-2", "as NCCL_MAX_NCHANNELS", "NCCL_MAX_NCHANNELS's old name"),
    nccl("NCCL_MIN_CTAS", Int, "", "1 to 64", "fewest CTAs (channels)"),
    nccl("NCCL_MAX_CTAS", Int, "", "1 to 64", "most CTAs (channels)"),
    nccl("NCCL_MIN_P2P_NCHANNELS", Int, "1", "1 to 64", "fewest channels for send/receive"),
    nccl("NCCL_MAX_P2P_NCHANNELS", Int, "64", "1 to 64", "most channels for send/receive"),
    nccl("NCCL_NVLS_NCHANNELS", Int, "16", "1 to 32", "NVLS channels"),
    nccl("NCCL_NVLS_ENABLE", Int, "2", "0, 1; 2 automatic", "NVLink SHARP"),
    nccl("NCCL_COLLNET_ENABLE", Int, "0", "1 enables", "CollNet")
        .nccl_says("only the value 1 enables (src/init.cc, v2.28.9-1)"),
    nccl("NCCL_COLLNET_NODE_THRESHOLD", Int, "2", "an integer", "fewest nodes for CollNet"),
    // Tuning (`src/graph/tuning.cc`).
    nccl("NCCL_ALGO", Text, "", "ring,tree,...; ^ excludes; coll:algos;...", "algorithms allowed"),
    nccl("NCCL_PROTO", Text, "", "LL,LL128,Simple; ^ excludes; coll:protos;...", "protocols allowed"),
    nccl("NCCL_NTHREADS", Int, "-2", "64 to 512, a multiple of 64", "threads per CTA"),
    nccl("NCCL_LL128_NTHREADS", Int, "-2", "64 to 640", "threads per CTA for LL128"),
    nccl("NCCL_THREAD_THRESHOLDS", Text, "", "numbers per algorithm and protocol", "bytes per thread below which fewer threads run"),
    nccl("NCCL_NET_OVERHEAD", Int, "-2", "nanoseconds", "the network's per-message latency in the model"),
    nccl("NCCL_PAT_ENABLE", Int, "2", "0, 1; 2 automatic", "the PAT algorithm"),
    nccl("NCCL_LL128_C2C", Int, "1", "0 or 1", "LL128 through a C2C-attached CPU"),
    // Buffers and connections (`src/init.cc`).
    nccl("NCCL_BUFFSIZE", Int, "4194304", "bytes, a multiple of 64", "the Simple protocol's buffer per connection (collscope: 1 MiB where ranks share cores)"),
    nccl("NCCL_LL_BUFFSIZE", Int, "", "bytes", "the LL protocol's buffer per connection"),
    nccl("NCCL_LL128_BUFFSIZE", Int, "", "bytes", "the LL128 protocol's buffer per connection"),
    nccl("NCCL_RUNTIME_CONNECT", Int, "1", "0 or 1", "connect at first use (0: at init)"),
    // Networks (`src/transport/net_socket.cc`, `src/transport/net_ib.cc`).
    nccl("NCCL_NET", Text, "", "Socket or IB", "the network used"),
    nccl("NCCL_SOCKET_NTHREADS", Int, "-2", "1 to 16", "NET/Socket helper threads per connection"),
    nccl("NCCL_NSOCKS_PERTHREAD", Int, "-2", "an integer", "NET/Socket sockets per helper thread"),
    nccl("NCCL_SOCKET_INLINE", Int, "128", "bytes", "NET/Socket messages up to this size sent inline"),
    nccl("NCCL_SOCKET_MIN_TASKSIZE", Int, "65536", "bytes", "NET/Socket smallest piece given to a helper"),
    nccl("NCCL_IB_DISABLE", Int, "0", "0 or 1", "no NET/IB"),
    nccl("NCCL_IB_HCA", Text, "", "devices[:port]; ^ excludes, = exact", "the RDMA devices used"),
    nccl("NCCL_IB_GID_INDEX", Int, "-1", "-1 to 255", "the GID index (-1: chosen)"),
    nccl("NCCL_IB_ADDR_FAMILY", Text, "AF_INET", "AF_INET or AF_INET6", "the address family a chosen GID prefers"),
    nccl("NCCL_IB_ROCE_VERSION_NUM", Int, "2", "1 or 2", "the RoCE version a chosen GID prefers"),
    nccl("NCCL_IB_ROUTABLE_FLID_GID_INDEX", Int, "1", "0 to 255", "the GID index used with a FLID"),
    nccl("NCCL_IB_TIMEOUT", Int, "20", "1 to 31", "the queue pairs' timeout exponent"),
    nccl("NCCL_IB_RETRY_CNT", Int, "7", "0 to 7", "the queue pairs' retries"),
    nccl("NCCL_IB_TC", Int, "-1", "-1 to 255", "traffic class (-1: the device's)"),
    nccl("NCCL_IB_SL", Int, "-1", "-1 to 15", "service level (-1: the device's)"),
    nccl("NCCL_IB_PKEY", Int, "0", "0 to 65535", "partition key index"),
    nccl("NCCL_IB_FIFO_TC", Int, "-1", "-1 to 255", "traffic class of the receiver's FIFO writes"),
    // The profiler plugin (`src/plugin/profiler.cc`).
    nccl("NCCL_PROFILER_PLUGIN", Text, "", "a path, a name (libnccl-profiler-NAME.so) or none", "the profiler plugin loaded"),
    nccl("NCCL_PROFILE_EVENT_MASK", Int, "95", "0 to 2147483647", "the profiler events reported"),
    // collscope's runtime.
    own("COLLSCOPE_TIMEOUT_S", Seconds, "600", "1 to 2147483647", "how long a collective or bootstrap waits before giving up (PyTorch's NCCL watchdog default)"),
    own("COLLSCOPE_PEER_TIMEOUT", Seconds, "600", "1 to 2147483647", "how long a silent peer may stay so before it counts as gone and the job aborts"),
    own("COLLSCOPE_BOOTSTRAP_SECRET", Text, "", "any non-empty string", "mixed into NCCL_COMM_ID's magic so only ranks given it join").secret(),
    own("COLLSCOPE_BIND", Text, "core", "core or none", "pin rank threads to cores"),
    own("COLLSCOPE_STREAM_STORES", Text, "auto", "auto, never, always", "stores that bypass the caches"),
    own("COLLSCOPE_ONESHOT_MAX", Int, "65536", "0 or more bytes per rank", "largest call the one-shot algorithm takes (0: never)"),
    own("COLLSCOPE_TUNING_FILE", Path, "", "a file, or builtin", "the host tuning profile (unset: the cache folder's tuning.json, else built in)"),
    own("COLLSCOPE_CACHE_DIR", Path, "", "a folder", "collscope's cache (unset: $XDG_CACHE_HOME/collscope, else ~/.cache/collscope)"),
    own("COLLSCOPE_ALLOW_SHARED_GPU", Int, "0", "0 or 1", "several ranks on one GPU"),
    own("COLLSCOPE_GPUS", Text, "", "comma list of device numbers", "the GPUs in-process ranks use"),
    own("COLLSCOPE_ASSUME_P2P", Int, "0", "0 or 1", "the model assumes P2P between every pair of GPUs"),
    own("COLLSCOPE_NCCL_VERSION", Text, "2.28.9", "2.12 to 2.29", "the NCCL release whose constants the model uses"),
    own("COLLSCOPE_LOG_MAX_BYTES", Int, "274877906944", "bytes", "the most bytes read from one log"),
    // collscope's telemetry and profiler plugin.
    own("COLLSCOPE_TELEMETRY", Int, "1", "0 or 1", "serve metrics from a communicator's process"),
    own("COLLSCOPE_METRICS_ADDR", Addr, "127.0.0.1:9470", "HOST:PORT", "telemetry's base address; each process adds its local rank"),
    own("COLLSCOPE_NOT_ARRIVED_S", Seconds, "3", "1 to 2147483647", "how long the others wait in a call before the job view names the ranks that have not arrived"),
    own("COLLSCOPE_METRICS_AGGREGATE", Int, "0", "0 or 1", "local rank 0 also serves /metrics/aggregate"),
    own("COLLSCOPE_TELEMETRY_RECORDS", Int, "4096", "1 or more", "records kept per history"),
    own("COLLSCOPE_DUMP_DIR", Path, "", "a folder (created 0700)", "where each rank writes its dump (recent calls, stalls, findings) on a timeout, a peer's failure, SIGTERM or request, for collscope job analyze"),
    own("COLLSCOPE_PROMETHEUS_SD_DIR", Path, "", "an existing folder", "where each server writes its Prometheus target"),
    own("COLLSCOPE_RENDEZVOUS_DIR", Path, "", "a private folder", "where ranks leave their telemetry URLs (unset: $XDG_RUNTIME_DIR/collscope-rendezvous, else the temporary folder)"),
    own("COLLSCOPE_PROFILER_METRICS", Int, "1", "0 or 1", "the profiler plugin serves telemetry"),
    own("COLLSCOPE_PROFILER_DUMP", Path, "", "a regular file", "the profiler plugin also appends every event here"),
    own("COLLSCOPE_PROFILER_LINGER_S", Seconds, "0", "0 to 3600", "the profiler plugin serves this long after the last communicator"),
    // collscope's benchmarks (`cargo bench -p collscope-logreader`).
    own("COLLSCOPE_BENCH_MB", Int, "256", "megabytes", "size of the log reader benchmark's mixed log"),
    own("COLLSCOPE_BENCH_KIND_MB", Int, "16", "megabytes", "size of each line kind's log in the benchmark"),
    own("COLLSCOPE_BENCH_RUNS", Int, "3", "an integer", "runs per benchmark"),
    own("COLLSCOPE_BENCH_FILE", Path, "", "a log file", "benchmark this log only"),
    own("COLLSCOPE_BENCH_DIR", Path, "", "a folder", "keep the benchmark's logs here"),
    own("COLLSCOPE_BENCH_SNAPSHOT", Path, "", "a file", "write the benchmarked log's snapshot there (JSON)"),
    // Launchers (`core/runtime/src/comm/launch.rs`).
    launcher("COLLSCOPE_RANK", "this process's rank (collscope's launcher)"),
    launcher("COLLSCOPE_NRANKS", "ranks in the job (collscope's launcher)"),
    launcher("COLLSCOPE_LOCAL_RANK", "rank on this node (collscope's launcher)"),
    p(Owner::Launcher, "COLLSCOPE_UNIQUE_ID", Text, "", "a unique id", "where the ranks meet (collscope's launcher)"),
    launcher("OMPI_COMM_WORLD_RANK", "this process's rank (Open MPI)"),
    launcher("OMPI_COMM_WORLD_SIZE", "ranks in the job (Open MPI)"),
    launcher("OMPI_COMM_WORLD_LOCAL_RANK", "rank on this node (Open MPI)"),
    launcher("OMPI_COMM_WORLD_LOCAL_SIZE", "ranks on this node (Open MPI)"),
    launcher("SLURM_PROCID", "this process's rank (Slurm)"),
    launcher("SLURM_NTASKS", "ranks in the job (Slurm)"),
    launcher("SLURM_LOCALID", "rank on this node (Slurm)"),
    p(Owner::Launcher, "SLURM_NTASKS_PER_NODE", Text, "", "N or N(xM)", "ranks on this node (Slurm)"),
    p(Owner::Launcher, "SLURM_NNODES", Int, "", "a positive integer", "nodes in the job (Slurm)"),
    p(Owner::Launcher, "SLURM_STEP_NUM_NODES", Int, "", "a positive integer", "nodes in this job step (Slurm)"),
    p(Owner::Launcher, "SLURM_JOB_ID", Text, "", "a job id", "labels Prometheus targets and OpenTelemetry data"),
    launcher("RANK", "this process's rank (torchrun)"),
    launcher("WORLD_SIZE", "ranks in the job (torchrun)"),
    launcher("LOCAL_RANK", "rank on this node (torchrun)"),
    launcher("LOCAL_WORLD_SIZE", "ranks on this node (torchrun)"),
    p(Owner::Launcher, "MASTER_ADDR", Text, "", "a host", "where rank 0 hosts the bootstrap root (torchrun)"),
    p(Owner::Launcher, "MASTER_PORT", Int, "", "a TCP port", "the port beside MASTER_ADDR (torchrun)"),
    p(Owner::Launcher, "TORCHELASTIC_RUN_ID", Text, "", "set by torchrun's agent", "the agent holds MASTER_PORT: the root takes the next port"),
    // The system's.
    system("OTEL_EXPORTER_OTLP_ENDPOINT", Text, "export metrics to this OpenTelemetry collector"),
    system("OTEL_SERVICE_NAME", Text, "the OpenTelemetry service name (default collscope)"),
    system("XDG_CACHE_HOME", Path, "the user's cache folder (default ~/.cache)"),
    system("XDG_RUNTIME_DIR", Path, "the user's private runtime folder"),
    system("HOME", Path, "the user's home folder"),
];

/// The declaration of `name`, if collscope reads it.
pub fn lookup(name: &str) -> Option<&'static Param> {
    PARAMS.iter().find(|p| p.name == name)
}

/// The process's value of a declared variable, for reads that take a lookup function (the logger's settings,
/// launchers' variables). Not logged, unlike [`crate::env::Env`]'s reads.
pub fn process_var(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// [`process_var`] for paths, which need not be UTF-8.
pub fn process_path(name: &str) -> Option<OsString> {
    std::env::var_os(name)
}

/// Every variable of the process, declared or not (a run's record of its environment; `collscope env`).
pub fn process_vars() -> Vec<(String, String)> {
    std::env::vars().collect()
}

/// The variable names of one launcher: (rank, size, local rank, ranks on this node).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LauncherVars {
    pub rank: &'static str,
    pub size: &'static str,
    pub local_rank: &'static str,
    pub local_size: Option<&'static str>,
}

/// Launchers in the order their variables are tried: collscope's, Open MPI, Slurm, torchrun.
pub const LAUNCHERS: [LauncherVars; 4] = [
    LauncherVars {
        rank: "COLLSCOPE_RANK",
        size: "COLLSCOPE_NRANKS",
        local_rank: "COLLSCOPE_LOCAL_RANK",
        local_size: None,
    },
    LauncherVars {
        rank: "OMPI_COMM_WORLD_RANK",
        size: "OMPI_COMM_WORLD_SIZE",
        local_rank: "OMPI_COMM_WORLD_LOCAL_RANK",
        local_size: Some("OMPI_COMM_WORLD_LOCAL_SIZE"),
    },
    LauncherVars {
        rank: "SLURM_PROCID",
        size: "SLURM_NTASKS",
        local_rank: "SLURM_LOCALID",
        local_size: Some("SLURM_NTASKS_PER_NODE"),
    },
    LauncherVars { rank: "RANK", size: "WORLD_SIZE", local_rank: "LOCAL_RANK", local_size: Some("LOCAL_WORLD_SIZE") },
];

/// collscope's cache folder: `COLLSCOPE_CACHE_DIR`, else `$XDG_CACHE_HOME/collscope`, else `~/.cache/collscope`
/// (empty values count as unset).
pub fn cache_dir() -> Option<PathBuf> {
    cache_dir_from(|k| process_path(k).filter(|v| !v.is_empty()))
}

fn cache_dir_from(get: impl Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    if let Some(d) = get("COLLSCOPE_CACHE_DIR") {
        return Some(PathBuf::from(d));
    }
    let base =
        get("XDG_CACHE_HOME").map(PathBuf::from).or_else(|| get("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("collscope"))
}

/// Where a variable's value came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Environment,
    Default,
    /// Neither set nor defaulted.
    Unset,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Environment => "environment",
            Source::Default => "default",
            Source::Unset => "unset",
        }
    }
}

/// One row of `collscope env`: a declared variable (or an `NCCL_*`/`COLLSCOPE_*` one set but not declared:
/// `param` is `None`) with its value and where it came from. A secret's value is never kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    pub name: String,
    pub param: Option<&'static Param>,
    pub value: Option<String>,
    pub source: Source,
}

/// Every declared variable as `get` gives it, then the `NCCL_*`/`COLLSCOPE_*` names of `set` that collscope does
/// not read. An empty value counts as unset, as in NCCL.
pub fn settings(set: &[(String, String)]) -> Vec<Setting> {
    let get = |name: &str| set.iter().find(|(k, v)| k == name && !v.is_empty()).map(|(_, v)| v.clone());
    let mut out: Vec<Setting> = PARAMS
        .iter()
        .map(|p| match get(p.name) {
            Some(v) => Setting {
                name: p.name.into(),
                param: Some(p),
                value: Some(if p.secret { "(set, hidden)".into() } else { v }),
                source: Source::Environment,
            },
            None if !p.default.is_empty() => {
                Setting { name: p.name.into(), param: Some(p), value: Some(p.default.into()), source: Source::Default }
            }
            None => Setting { name: p.name.into(), param: Some(p), value: None, source: Source::Unset },
        })
        .collect();
    let mut unknown: Vec<&(String, String)> = set
        .iter()
        .filter(|(k, _)| (k.starts_with("NCCL_") || k.starts_with("COLLSCOPE_")) && lookup(k).is_none())
        .collect();
    unknown.sort();
    out.extend(unknown.into_iter().map(|(k, v)| Setting {
        name: k.clone(),
        param: None,
        value: Some(v.clone()),
        source: Source::Environment,
    }));
    out
}

/// The README's variable table: the `NCCL_*` and `COLLSCOPE_*` variables (launchers' and the system's are
/// listed by `collscope env`), one row each.
pub fn markdown_table() -> String {
    let cell = |s: &str| s.replace('|', "\\|");
    let mut t = String::from("| Variable | Default | Values | Meaning |\n|---|---|---|---|\n");
    for p in PARAMS.iter().filter(|p| matches!(p.owner, Owner::Nccl | Owner::Collscope)) {
        let default = if p.default.is_empty() { "unset".to_string() } else { format!("`{}`", p.default) };
        let meaning =
            if p.nccl.is_empty() { cell(p.meaning) } else { format!("{}; NCCL: {}", cell(p.meaning), cell(p.nccl)) };
        t.push_str(&format!("| `{}` | {} | {} | {} |\n", p.name, default, cell(p.values), meaning));
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_variable_is_declared_once_with_a_meaning() {
        for (i, p) in PARAMS.iter().enumerate() {
            assert!(PARAMS[..i].iter().all(|q| q.name != p.name), "{} declared twice", p.name);
            assert!(!p.meaning.is_empty(), "{} has no meaning", p.name);
            let prefixed = p.name.starts_with("NCCL_") || p.name.starts_with("COLLSCOPE_");
            assert_eq!(p.owner == Owner::Nccl, p.name.starts_with("NCCL_"), "{}", p.name);
            assert!(prefixed || matches!(p.owner, Owner::Launcher | Owner::System), "{}", p.name);
        }
        for l in LAUNCHERS {
            for v in [l.rank, l.size, l.local_rank].into_iter().chain(l.local_size) {
                assert_eq!(lookup(v).map(|p| p.owner), Some(Owner::Launcher), "{v}");
            }
        }
    }

    #[test]
    fn settings_say_where_each_value_came_from_and_hide_secrets() {
        let set: Vec<(String, String)> = [
            ("NCCL_P2P_DISABLE", "2"),
            ("COLLSCOPE_BOOTSTRAP_SECRET", "s3cret"),
            ("NCCL_NOT_A_THING", "1"),
            ("NCCL_ALGO", ""),
            ("PATH", "/bin"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let s = settings(&set);
        let row = |n: &str| s.iter().find(|r| r.name == n).unwrap_or_else(|| panic!("{n}"));
        assert_eq!(
            (row("NCCL_P2P_DISABLE").value.as_deref(), row("NCCL_P2P_DISABLE").source),
            (Some("2"), Source::Environment)
        );
        assert_eq!(
            (row("COLLSCOPE_TIMEOUT_S").value.as_deref(), row("COLLSCOPE_TIMEOUT_S").source),
            (Some("600"), Source::Default)
        );
        assert_eq!((row("NCCL_ALGO").value.as_deref(), row("NCCL_ALGO").source), (None, Source::Unset));
        assert_eq!(row("COLLSCOPE_BOOTSTRAP_SECRET").value.as_deref(), Some("(set, hidden)"));
        assert!(row("NCCL_NOT_A_THING").param.is_none());
        assert!(!s.iter().any(|r| r.name == "PATH"));
        assert!(!format!("{s:?}").contains("s3cret"));
    }

    #[test]
    fn the_cache_folder_is_looked_up_in_one_order() {
        let from = |pairs: &'static [(&str, &str)]| {
            cache_dir_from(move |k| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| OsString::from(v)))
        };
        assert_eq!(from(&[("COLLSCOPE_CACHE_DIR", "/c"), ("HOME", "/h")]), Some(PathBuf::from("/c")));
        assert_eq!(from(&[("XDG_CACHE_HOME", "/x"), ("HOME", "/h")]), Some(PathBuf::from("/x/collscope")));
        assert_eq!(from(&[("HOME", "/h")]), Some(PathBuf::from("/h/.cache/collscope")));
        assert_eq!(from(&[]), None);
    }

    #[test]
    fn the_table_has_a_row_per_nccl_and_collscope_variable() {
        let t = markdown_table();
        let rows = PARAMS.iter().filter(|p| matches!(p.owner, Owner::Nccl | Owner::Collscope)).count();
        assert_eq!(t.lines().count(), rows + 2);
        assert!(t.contains("| `NCCL_P2P_DISABLE` | `0` |") && t.contains("ncclGetLevel"), "{t}");
        assert!(!t.contains("| `RANK` |"));
    }
}
