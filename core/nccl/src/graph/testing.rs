//! Topologies for the graph tests, built by the topology module from its presets or from inline XML.

use crate::topo::{self, TopoEnv, TopoSource};
use collscope_model::Topology;

pub(crate) fn preset(name: &str) -> Topology {
    let xml = topo::load(&TopoSource::Preset(name.into())).expect("preset loads");
    topo::build(&xml, &TopoEnv::default()).expect("preset builds")
}

pub(crate) fn from_xml(text: &str) -> Topology {
    let xml = topo::xml::parse(text, "test").expect("test XML parses");
    topo::build(&xml, &TopoEnv::default()).expect("test XML builds")
}
