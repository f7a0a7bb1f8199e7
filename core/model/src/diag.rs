//! Environment, warnings and findings: what was set, what went wrong, and what collscope concludes.

use super::names::Severity;
use serde::{Deserialize, Serialize};

/// `NAME set by environment to VALUE`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvSetting {
    pub name: String,
    pub value: String,
    pub rank: Option<u32>,
}

/// Where a line came from: file and 1-based line number.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LineRef {
    pub file: String,
    pub line: u64,
    pub text: String,
}

/// A WARN (or error) line, classified.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Warning {
    pub rank: Option<u32>,
    pub host: Option<String>,
    pub line: Option<LineRef>,
    pub text: String,
    /// "ib_verbs", "socket", "shm", "cuda", "proxy", "nccl_error", "watchdog", "other".
    pub class: String,
    /// NCCL source `file:line` of a WARN.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

/// A diagnosis.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// Stable identifier, e.g. "no_gdrdma_distance".
    pub code: String,
    pub severity: Severity,
    /// The rank the finding is about, when it is about one (a dead, stopped or slow rank).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    /// The communicator the finding is about, when a rule about one communicator knows it (a call not arrived at,
    /// a mismatch, a stall, a straggler).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comm: Option<FindingComm>,
    pub title: String,
    pub detail: String,
    pub evidence: Vec<LineRef>,
    pub fix: String,
}

/// A communicator as a finding names it: its id (the `comm` of its calls) and its given name, when known.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FindingComm {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl std::fmt::Display for FindingComm {
    /// `NAME (ID)`, or the id alone when unnamed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.name {
            Some(name) if name != &self.id => write!(f, "{name} ({})", self.id),
            _ => f.write_str(&self.id),
        }
    }
}
