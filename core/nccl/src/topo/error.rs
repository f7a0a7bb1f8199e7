//! What can go wrong while reading, detecting or analysing a topology. Every error that comes from user input
//! names where it came from (`origin`: a file path, `preset:NAME` or `detected`), the line, and what was expected.

use collscope_debug::env::EnvError;

#[derive(Debug, thiserror::Error)]
pub enum TopoError {
    #[error("cannot read topology file '{path}': {source}")]
    Read { path: String, source: collscope_debug::file::FileError },

    #[error("cannot write topology file '{path}': {source}")]
    Write { path: String, source: std::io::Error },

    #[error("{origin}:{line}: malformed XML: {detail}")]
    Syntax { origin: String, line: usize, detail: String },

    #[error("{origin}: expected a <system version=\"1\"> element at the top, found {found}")]
    NoSystem { origin: String, found: String },

    #[error(
        "{origin}:{line}: an RCCL (AMD ROCm) topology file ({why}); collscope models NVIDIA NCCL 2.28.9, which \
         reads <system version=\"1\"> with <nvlink> links between NVIDIA GPUs"
    )]
    Rccl { origin: String, line: usize, why: String },

    #[error("{origin}:{line}: <{element}> is missing the attribute '{attr}'")]
    MissingAttr { origin: String, line: usize, element: String, attr: &'static str },

    #[error("{origin}:{line}: <{element} {attr}=\"{value}\"> is not valid: expected {expected}")]
    BadAttr { origin: String, line: usize, element: String, attr: &'static str, value: String, expected: String },

    #[error("{origin}:{line}: <{element}> refers to {what} '{target}', which is not in the topology")]
    DanglingRef { origin: String, line: usize, element: String, what: &'static str, target: String },

    #[error("unknown preset '{name}', expected one of: {known}")]
    UnknownPreset { name: String, known: String },

    #[error("topology detection failed reading '{path}': {source}")]
    Detect { path: String, source: std::io::Error },

    #[error(
        "{origin}: {count} {what}, more than NCCL's limit of {limit} ({constant}, NCCL 2.28.9): NCCL could not \
         build this machine, so it is not modelled"
    )]
    TooLarge { origin: String, count: usize, what: String, limit: usize, constant: &'static str },

    #[error("{keep} GPUs per node: the topology has {gpus} GPUs; give 1 to {gpus}")]
    TrimGpus { keep: u32, gpus: usize },

    #[error("topology is inconsistent: {0}")]
    Inconsistent(String),

    #[error(transparent)]
    Env(#[from] EnvError),
}
