//! NCCL's names in profiler descriptors, read into the model's vocabularies without allocating (NCCL 2.30.7
//! `src/collectives.cc`: `ncclFuncToString`, `ncclDatatypeToString`, `ncclAlgoToString`, `ncclProtoToString`).

use collscope_model::{Algorithm, Collective, DataType, Protocol};

pub(crate) fn collective(s: &[u8]) -> Option<Collective> {
    Some(match s {
        b"Broadcast" => Collective::Broadcast,
        b"Reduce" => Collective::Reduce,
        b"AllGather" => Collective::AllGather,
        b"ReduceScatter" => Collective::ReduceScatter,
        b"AllReduce" => Collective::AllReduce,
        b"SendRecv" => Collective::SendRecv,
        b"Send" => Collective::Send,
        b"Recv" => Collective::Recv,
        b"AlltoAll" => Collective::AllToAll,
        _ => return None,
    })
}

pub(crate) fn datatype(s: &[u8]) -> Option<DataType> {
    Some(match s {
        b"ncclInt8" => DataType::I8,
        // NCCL names uint8 "Unknown" (its switch has no ncclUint8 case); the model has no FP8 type. All are one
        // byte, so the call's byte count stays right.
        b"Unknown" | b"ncclFloat8e4m3" | b"ncclFloat8e5m2" => DataType::U8,
        b"ncclInt32" => DataType::I32,
        b"ncclUint32" => DataType::U32,
        b"ncclInt64" => DataType::I64,
        b"ncclUint64" => DataType::U64,
        b"ncclFloat16" => DataType::F16,
        b"ncclFloat32" => DataType::F32,
        b"ncclFloat64" => DataType::F64,
        b"ncclBfloat16" => DataType::Bf16,
        _ => return None,
    })
}

pub(crate) fn algorithm(s: &[u8]) -> Option<Algorithm> {
    Some(match s {
        b"TREE" => Algorithm::Tree,
        b"RING" => Algorithm::Ring,
        b"COLLNET_DIRECT" => Algorithm::CollNetDirect,
        b"COLLNET_CHAIN" => Algorithm::CollNetChain,
        b"NVLS" => Algorithm::Nvls,
        b"NVLS_TREE" => Algorithm::NvlsTree,
        b"PAT" => Algorithm::Pat,
        // collscope's extension, from collscope's runtime (NCCL never names it).
        b"ONESHOT" => Algorithm::OneShot,
        _ => return None,
    })
}

pub(crate) fn protocol(s: &[u8]) -> Option<Protocol> {
    Some(match s {
        b"LL" => Protocol::Ll,
        b"LL128" => Protocol::Ll128,
        b"SIMPLE" => Protocol::Simple,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_model_name_has_its_nccl_spelling() {
        let colls =
            ["Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce", "SendRecv", "Send", "Recv", "AlltoAll"];
        let read: Vec<_> = colls.iter().filter_map(|c| collective(c.as_bytes())).collect();
        assert_eq!(read, Collective::ALL);
        let algos = ["TREE", "RING", "COLLNET_DIRECT", "COLLNET_CHAIN", "NVLS", "NVLS_TREE", "PAT"];
        assert_eq!(algos.iter().filter_map(|a| algorithm(a.as_bytes())).collect::<Vec<_>>(), Algorithm::NCCL);
        let protos = ["LL", "LL128", "SIMPLE"];
        assert_eq!(protos.iter().filter_map(|p| protocol(p.as_bytes())).collect::<Vec<_>>(), Protocol::ALL);
        assert_eq!(datatype(b"ncclBfloat16"), Some(DataType::Bf16));
        assert_eq!(collective(b"Gather"), None, "the model has no Gather");
        assert_eq!(algorithm(b"Unknown"), None);
    }
}
