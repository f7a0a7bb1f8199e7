//! nccl-tests' `-J` JSON (`src/util.cu`, `JSON_FILE_VERSION 2`): keys in its order, doubles as `%lf`,
//! booleans as the strings "true"/"false", NaN as "nan".

use std::fmt::Write;

#[derive(Debug, Clone)]
pub(super) enum J {
    Int(i64),
    Double(f64),
    Str(String),
    Null,
    List(Vec<J>),
    Obj(Vec<(&'static str, J)>),
}

impl J {
    pub(super) fn str(s: impl Into<String>) -> J {
        J::Str(s.into())
    }

    pub(super) fn bool(b: bool) -> J {
        J::Str(if b { "true" } else { "false" }.into())
    }

    pub(super) fn write(&self, out: &mut String) {
        match self {
            J::Int(i) => {
                let _ = write!(out, "{i}");
            }
            J::Double(d) if d.is_nan() => out.push_str("\"nan\""),
            J::Double(d) => {
                let _ = write!(out, "{d:.6}");
            }
            J::Str(s) => {
                out.push('"');
                out.push_str(&escape(s));
                out.push('"');
            }
            J::Null => out.push_str("null"),
            J::List(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    item.write(out);
                }
                out.push(']');
            }
            J::Obj(fields) => {
                out.push('{');
                for (i, (k, v)) in fields.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    let _ = write!(out, "\"{}\":", escape(k));
                    v.write(out);
                }
                out.push('}');
            }
        }
    }
}

/// `sanitizeJson`: quotes `"`, `\`, `/`, tab and newline; other control characters are dropped.
fn escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' | '\\' | '/' => {
                o.push('\\');
                o.push(c);
            }
            '\t' => o.push_str("\\t"),
            '\n' => o.push_str("\\n"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {}
            c => o.push(c),
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_like_nccl_tests() {
        let j = J::Obj(vec![
            ("version", J::Int(2)),
            ("root", J::str("    -1")),
            ("okay", J::bool(true)),
            ("bw", J::Double(1.5)),
            ("nan", J::Double(f64::NAN)),
            ("p", J::str("a/b\"c")),
            ("l", J::List(vec![J::Null, J::Int(3)])),
        ]);
        let mut s = String::new();
        j.write(&mut s);
        assert_eq!(
            s,
            r#"{"version":2,"root":"    -1","okay":"true","bw":1.500000,"nan":"nan","p":"a\/b\"c","l":[null,3]}"#
        );
        assert!(serde_json::from_str::<serde_json::Value>(&s).is_ok());
    }
}
