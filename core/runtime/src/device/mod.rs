//! The work on the data, what NCCL runs on the GPU (`src/device/`): [`prims`] (a channel's send, receive,
//! reduce and copy steps over its connections), [`proto`] (the Simple, LL and LL128 protocols), [`algos`]
//! (ring and tree collectives built from the primitives), [`tree`] (the double binary tree of a channel) and
//! [`mod@reference`] (the plain reduction results are checked against).

pub(crate) mod algos;
pub(crate) mod prims;
pub(crate) mod proto;
pub mod reference;
pub(crate) mod tree;
