//! Causes that hold: a difference between the log and the model is put down to a version or a fact the log
//! lacks only when the model re-run with that version or fact gives the log's value. What merely could
//! explain it stays a hint (`Comparison::hint`), and `explained_ratio` counts only verified causes.

use super::compare::{compare, Comparison, Context, Kind};
use crate::Explained;
use collscope_model::Snapshot;

/// The model re-run with one version or fact changed, and that change said as the cause it would verify.
pub struct Variant {
    pub cause: String,
    pub explained: Explained,
}

/// Sets the cause of each difference in `fields` that a variant removes (the first in `variants` that does).
/// Returns how many differences each variant removed.
pub fn verify(fields: &mut [Comparison], log: &Snapshot, variants: &[Variant], ctx: &Context) -> Vec<usize> {
    let mut removed = vec![0; variants.len()];
    for (v, n) in variants.iter().zip(removed.iter_mut()) {
        let again = compare(log, Some(&v.explained), ctx).fields;
        for f in fields.iter_mut().filter(|f| !f.matched && f.cause.is_none()) {
            if again.iter().any(|a| a.matched && a.kind == f.kind && a.field == f.field) {
                f.cause = Some(v.cause.clone());
                // The re-run settles it; a guess beside it would only blur that.
                f.hint = None;
                *n += 1;
            }
        }
    }
    removed
}

/// How many of the log's fields of `kind` the model gives alike (the tuning table's cells, to infer what the
/// log does not print).
pub fn alike(log: &Snapshot, ex: &Explained, ctx: &Context, kind: Kind) -> usize {
    compare(log, Some(ex), ctx).fields.iter().filter(|f| f.kind == kind && f.matched).count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::testing::preset;
    use collscope_debug::env::Env;
    use collscope_model::{NodeType, Topology};

    fn with_sm(sm: u32) -> Topology {
        let mut t = preset("hgx-pcie");
        for n in t.nodes.iter_mut().filter(|n| n.kind == NodeType::GPU) {
            n.gpu.as_mut().unwrap().sm = sm;
        }
        t
    }

    fn model(sm: u32) -> Explained {
        crate::explain(&with_sm(sm), 1, &[1 << 20], &Env::default(), false).unwrap()
    }

    #[test]
    fn only_a_re_run_that_gives_the_logs_value_is_a_cause() {
        // A log of SM90 GPUs, modelled as the SM80 the print did not rule out.
        let log = model(90).snapshot;
        let ctx = Context { assumed_sm: Some(80), ..Context::default() };
        let mut fields = compare(&log, Some(&model(80)), &ctx).fields;
        let bad = fields.iter().filter(|f| !f.matched).count();
        assert!(bad > 0 && fields.iter().all(|f| f.cause.is_none()));
        assert!(fields.iter().any(|f| f.hint.as_deref().is_some_and(|h| h.contains("SM80 assumed"))));
        // SM90 gives every one of the log's values; nothing is left for SM70.
        let variants = [90, 70].map(|sm| Variant { cause: format!("SM{sm}"), explained: model(sm) });
        let removed = verify(&mut fields, &log, &variants, &ctx);
        assert_eq!(removed, vec![bad, 0], "{fields:?}");
        assert!(fields.iter().filter(|f| !f.matched).all(|f| f.cause.as_deref() == Some("SM90") && f.hint.is_none()));
        // A difference no variant removes keeps no cause.
        let mut log = log.clone();
        log.channels.coll = Some(99);
        let mut fields = compare(&log, Some(&model(80)), &ctx).fields;
        verify(&mut fields, &log, &variants, &ctx);
        let coll = fields.iter().find(|f| f.field == "coll channels").unwrap();
        assert!(!coll.matched && coll.cause.is_none(), "{coll:?}");
        let channels = fields.iter().filter(|f| f.kind == Kind::Channels).count();
        assert_eq!(alike(&log, &model(90), &ctx, Kind::Channels), channels - 1);
    }
}
