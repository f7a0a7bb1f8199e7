//! The closed vocabularies NCCL uses: collectives, algorithms, protocols, data types, reduction ops and
//! transports. Each keeps NCCL's spelling for display and NCCL's numeric id where NCCL prints one
//! (modelled on NCCL 2.28.9, `src/include/device.h` and `nccl.h`).

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// An unknown name for one of the vocabularies below.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {kind} '{value}', expected one of: {expected}")]
pub struct UnknownName {
    pub kind: &'static str,
    pub value: String,
    pub expected: String,
}

macro_rules! named_enum {
    ($(#[$meta:meta])* $name:ident, $kind:literal, [$($variant:ident = $text:literal $(| $alias:literal)*),+ $(,)?]) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        pub enum $name {
            $(#[serde(rename = $text)] $variant),+
        }

        impl $name {
            /// Every value, in NCCL's order (the order of its numeric ids).
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// NCCL's spelling.
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }

            /// NCCL's numeric id (position in NCCL's enum; the variants carry no explicit discriminants, so
            /// the cast is that position, at no cost on the data path).
            pub fn id(self) -> usize {
                self as usize
            }

            /// The value with NCCL's numeric id `id`.
            pub fn from_id(id: usize) -> Option<Self> {
                Self::ALL.get(id).copied()
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.pad(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = UnknownName;
            /// Case-insensitive, as NCCL's env parsing is.
            fn from_str(s: &str) -> Result<Self, UnknownName> {
                let t = s.trim();
                $(
                    if t.eq_ignore_ascii_case($text) $(|| t.eq_ignore_ascii_case($alias))* {
                        return Ok($name::$variant);
                    }
                )+
                Err(UnknownName {
                    kind: $kind,
                    value: s.to_string(),
                    expected: [$($text),+].join(", "),
                })
            }
        }
    };
}

named_enum!(
    /// Collective functions in NCCL's `ncclFunc_t` order.
    Collective, "collective", [
        Broadcast = "Broadcast",
        Reduce = "Reduce",
        AllGather = "AllGather",
        ReduceScatter = "ReduceScatter",
        AllReduce = "AllReduce",
        SendRecv = "SendRecv",
        Send = "Send",
        Recv = "Recv",
        AllToAll = "AllToAll",
    ]
);

impl Collective {
    /// The five collectives that have rows in NCCL's tuning table.
    pub const TUNED: [Collective; 5] = [
        Collective::Broadcast,
        Collective::Reduce,
        Collective::AllGather,
        Collective::ReduceScatter,
        Collective::AllReduce,
    ];

    /// nccl-tests' bus bandwidth factor for `nranks` ranks (`doc/PERFORMANCE.md`): busbw = algbw x factor.
    pub fn bus_bw_factor(self, nranks: u32) -> f64 {
        let n = f64::from(nranks);
        match self {
            Collective::AllReduce => 2.0 * (n - 1.0) / n,
            Collective::AllGather | Collective::ReduceScatter | Collective::AllToAll => (n - 1.0) / n,
            _ => 1.0,
        }
    }
}

named_enum!(
    /// Algorithms in NCCL's `NCCL_ALGO_*` order (2.28: TREE 0 .. PAT 6), then collscope's own (not NCCL's).
    Algorithm, "algorithm", [
        Tree = "Tree",
        Ring = "Ring",
        CollNetDirect = "CollNetDirect",
        CollNetChain = "CollNetChain",
        Nvls = "NVLS",
        NvlsTree = "NVLSTree",
        Pat = "PAT",
        OneShot = "OneShot",
    ]
);

impl Algorithm {
    /// NCCL's algorithms (2.28.9 `NCCL_NUM_ALGORITHMS` = 7): what NCCL's tables, grammar and logs know.
    pub const NCCL: &'static [Algorithm] = Algorithm::ALL.split_at(7).0;

    /// A collscope extension NCCL lacks: OneShot, an AllReduce for small calls on host memory in which every
    /// rank posts its vector to every other rank (no step waits on another, where a ring AllReduce chains
    /// 2(n-1)) and each rank reduces all of them in rank order.
    pub fn is_extension(self) -> bool {
        !Algorithm::NCCL.contains(&self)
    }
}

named_enum!(
    /// Protocols in NCCL's `NCCL_PROTO_*` order.
    Protocol, "protocol", [
        Ll = "LL",
        Ll128 = "LL128",
        Simple = "Simple",
    ]
);

named_enum!(
    /// Data types in `ncclDataType_t` order.
    DataType, "datatype", [
        I8 = "int8" | "i8" | "char",
        U8 = "uint8" | "u8",
        I32 = "int32" | "i32" | "int",
        U32 = "uint32" | "u32",
        I64 = "int64" | "i64",
        U64 = "uint64" | "u64",
        F16 = "half" | "f16" | "float16",
        F32 = "float" | "f32" | "float32",
        F64 = "double" | "f64" | "float64",
        Bf16 = "bfloat16" | "bf16",
    ]
);

impl DataType {
    pub fn size(self) -> usize {
        match self {
            DataType::I8 | DataType::U8 => 1,
            DataType::F16 | DataType::Bf16 => 2,
            DataType::I32 | DataType::U32 | DataType::F32 => 4,
            DataType::I64 | DataType::U64 | DataType::F64 => 8,
        }
    }
}

named_enum!(
    /// Reduction operations in `ncclRedOp_t` order.
    RedOp, "reduction op", [
        Sum = "sum",
        Prod = "prod",
        Max = "max",
        Min = "min",
        Avg = "avg",
    ]
);

named_enum!(
    /// How two ranks are connected on a channel (the word after `via` in NCCL's connection lines).
    Transport, "transport", [
        P2p = "P2P",
        Shm = "SHM",
        Net = "NET",
        Nvls = "NVLS",
        CollNet = "COLLNET",
    ]
);

named_enum!(
    /// How much a finding matters.
    Severity, "severity", [
        Info = "info",
        Warning = "warning",
        Error = "error",
    ]
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_follow_nccl_order() {
        assert_eq!(Algorithm::Tree.id(), 0);
        assert_eq!(Algorithm::Pat.id(), 6);
        assert_eq!(Protocol::Simple.id(), 2);
        assert_eq!(Collective::AllReduce.id(), 4);
        assert_eq!(Algorithm::from_id(1), Some(Algorithm::Ring));
        assert_eq!(Algorithm::NCCL.last(), Some(&Algorithm::Pat));
        assert!(Algorithm::OneShot.is_extension() && !Algorithm::Pat.is_extension());
    }

    #[test]
    fn bus_bw_factors_follow_nccl_tests() {
        assert_eq!(Collective::AllReduce.bus_bw_factor(4), 1.5);
        assert_eq!(Collective::AllGather.bus_bw_factor(4), 0.75);
        assert_eq!(Collective::Broadcast.bus_bw_factor(4), 1.0);
    }

    #[test]
    fn parse_is_case_insensitive_and_errors_name_the_input() {
        assert_eq!("nvlstree".parse::<Algorithm>().unwrap(), Algorithm::NvlsTree);
        assert_eq!("ll128".parse::<Protocol>().unwrap(), Protocol::Ll128);
        assert_eq!("bf16".parse::<DataType>().unwrap(), DataType::Bf16);
        let err = "Rign".parse::<Algorithm>().unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("'Rign'") && msg.contains("Ring") && msg.contains("algorithm"), "{msg}");
    }

    #[test]
    fn serde_uses_nccl_spelling() {
        assert_eq!(serde_json::to_string(&Algorithm::Nvls).unwrap(), "\"NVLS\"");
        assert_eq!(serde_json::to_string(&Transport::Shm).unwrap(), "\"SHM\"");
        let p: Protocol = serde_json::from_str("\"LL128\"").unwrap();
        assert_eq!(p, Protocol::Ll128);
    }
}
