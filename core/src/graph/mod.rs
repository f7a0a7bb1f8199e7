//! NCCL's init-time graph search and connect phase (NCCL 2.28.9 `src/graph/search.cc`, `connect.cc`,
//! `trees.cc`, `rings.cc`, and the calls in `src/init.cc`).

pub mod trees;
