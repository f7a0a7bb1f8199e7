//! `NCCL_ALGO` / `NCCL_PROTO`: NCCL 2.28.9's `parseList` grammar (`src/graph/tuning.cc`). Groups are separated
//! by `;`; each is `[collective:]list`, where only the first group may omit the collective (it then applies to
//! all); a list is comma-separated names, and a leading `^` turns it into an exclusion (everything else stays
//! on). Names and collectives are case-insensitive. Empty tokens are skipped, as `strtok` does. A name NCCL
//! does not know is an error naming it.

use collscope_model::{Algorithm, Collective, Protocol};

/// What `parseList` rejects, with NCCL's wording.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrammarError {
    #[error("{var}: Unrecognized element token \"{token}\" when parsing \"{value}\" (expected one of: {expected})")]
    Element { var: &'static str, token: String, value: String, expected: String },
    #[error("{var}: Unrecognized prefix token \"{token}\" when parsing \"{value}\" (expected one of: {expected})")]
    Prefix { var: &'static str, token: String, value: String, expected: String },
    #[error("{var}: All entries except the first must have a prefix: \"{value}\"")]
    MissingPrefix { var: &'static str, value: String },
}

/// Per collective (in `Collective::TUNED` order), per element: 0 off, 1 on, 2 on unless the platform says
/// otherwise (LL128's default).
pub type EnableMatrix<const N: usize> = [[u8; N]; 5];

/// Parses `value` over `elems`, starting from `init`.
fn parse_list<const N: usize>(
    var: &'static str,
    value: &str,
    elems: [&str; N],
    init: EnableMatrix<N>,
) -> Result<EnableMatrix<N>, GrammarError> {
    let prefixes: Vec<&str> = Collective::TUNED.iter().map(|c| c.as_str()).collect();
    let mut list = init;
    let mut first = true;
    // strtok skips leading delimiters: a string that starts with ';' has no "first" group at offset 0.
    let starts_at_zero = !value.starts_with(';');
    for group in value.split(';').filter(|g| !g.is_empty()) {
        let mut parts = group.split(':').filter(|p| !p.is_empty());
        let head = parts.next().unwrap_or("");
        let (prefix, elem_list) = match parts.next() {
            Some(elems) => (Some(head), elems),
            None => {
                if !(first && starts_at_zero) {
                    return Err(GrammarError::MissingPrefix { var, value: value.to_string() });
                }
                (None, head)
            }
        };
        first = false;
        let (set, unset, elem_list) = match elem_list.strip_prefix('^') {
            Some(rest) => (0, 1, rest),
            None => (1, 0, elem_list),
        };
        let mut found_prefix = false;
        for (row, name) in list.iter_mut().zip(&prefixes) {
            if prefix.is_some_and(|p| !p.eq_ignore_ascii_case(name)) {
                continue;
            }
            found_prefix = true;
            *row = [unset; N];
            for tok in elem_list.split(',').filter(|t| !t.is_empty()) {
                let e =
                    elems.iter().position(|e| e.eq_ignore_ascii_case(tok)).ok_or_else(|| GrammarError::Element {
                        var,
                        token: tok.to_string(),
                        value: value.to_string(),
                        expected: elems.join(", "),
                    })?;
                row[e] = set;
            }
        }
        if !found_prefix {
            return Err(GrammarError::Prefix {
                var,
                token: prefix.unwrap_or("").to_string(),
                value: value.to_string(),
                expected: prefixes.join(", "),
            });
        }
    }
    Ok(list)
}

fn names<T: Copy, const N: usize>(all: &[T], name: impl Fn(T) -> &'static str) -> [&'static str; N] {
    std::array::from_fn(|i| name(all[i]))
}

/// `NCCL_ALGO` over NCCL's defaults (everything on).
pub fn parse_algo(value: Option<&str>) -> Result<EnableMatrix<7>, GrammarError> {
    let init = [[1; 7]; 5];
    match value {
        Some(v) => parse_list("NCCL_ALGO", v, names(Algorithm::NCCL, Algorithm::as_str), init),
        None => Ok(init),
    }
}

/// `NCCL_PROTO` over NCCL's defaults (LL and Simple on, LL128 on where the platform allows: 2).
pub fn parse_proto(value: Option<&str>) -> Result<EnableMatrix<3>, GrammarError> {
    let init = [[1, 2, 1]; 5];
    match value {
        Some(v) => parse_list("NCCL_PROTO", v, names(Protocol::ALL, Protocol::as_str), init),
        None => Ok(init),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AR: usize = 4;
    const BC: usize = 0;

    #[test]
    fn plain_lists_apply_to_every_collective_case_insensitively() {
        let a = parse_algo(Some("ring,TREE")).unwrap();
        for row in a {
            assert_eq!(row, [1, 1, 0, 0, 0, 0, 0]);
        }
        let p = parse_proto(Some("simple")).unwrap();
        assert_eq!(p[AR], [0, 0, 1]);
    }

    #[test]
    fn caret_excludes_and_keeps_the_rest_on() {
        let p = parse_proto(Some("^LL128")).unwrap();
        assert_eq!(p[AR], [1, 0, 1]);
        let a = parse_algo(Some("^nvls,nvlstree")).unwrap();
        assert_eq!(a[AR], [1, 1, 1, 1, 0, 0, 1]);
    }

    #[test]
    fn per_collective_groups_follow_nccl_examples() {
        let a = parse_algo(Some("ring,collnetdirect;allreduce:tree,collnetdirect;broadcast:ring")).unwrap();
        assert_eq!(a[AR], [1, 0, 1, 0, 0, 0, 0]);
        assert_eq!(a[BC], [0, 1, 0, 0, 0, 0, 0]);
        assert_eq!(a[2], [0, 1, 1, 0, 0, 0, 0]);
        let p = parse_proto(Some("LL,Simple;allreduce:^LL")).unwrap();
        assert_eq!(p[AR], [0, 1, 1]);
        assert_eq!(p[BC], [1, 0, 1]);
        let p = parse_proto(Some("^LL128;allreduce:LL128")).unwrap();
        assert_eq!(p[AR], [0, 1, 0]);
        assert_eq!(p[1], [1, 0, 1]);
        let p = parse_proto(Some("AllReduce:simple")).unwrap();
        assert_eq!(p[AR], [0, 0, 1]);
        assert_eq!(p[BC], [1, 2, 1], "untouched collectives keep the defaults");
    }

    #[test]
    fn defaults_and_empty_tokens() {
        assert_eq!(parse_proto(None).unwrap()[AR], [1, 2, 1]);
        assert_eq!(parse_algo(Some("ring,,tree;")).unwrap()[AR], [1, 1, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn bad_tokens_are_errors_that_name_them() {
        let e = parse_algo(Some("rnig")).unwrap_err();
        assert!(matches!(&e, GrammarError::Element { token, .. } if token == "rnig"));
        let msg = e.to_string();
        assert!(msg.contains("NCCL_ALGO") && msg.contains("\"rnig\"") && msg.contains("Ring"), "{msg}");
        let e = parse_proto(Some("allreduce:LL;allgaher:Simple")).unwrap_err();
        assert!(matches!(&e, GrammarError::Prefix { token, .. } if token == "allgaher"), "{e}");
        assert!(e.to_string().contains("AllGather"));
        let e = parse_proto(Some("allreduce:LL;Simple")).unwrap_err();
        assert!(matches!(e, GrammarError::MissingPrefix { .. }), "{e}");
        assert!(e.to_string().contains("All entries except the first must have a prefix"));
        let e = parse_proto(Some(";Simple")).unwrap_err();
        assert!(matches!(e, GrammarError::MissingPrefix { .. }), "a leading ';' makes the first group not first");
    }
}
