//! `NCCL_IB_HCA`: which devices and ports NET/IB uses (NCCL 2.28.9 `net_ib.cc` with `parseStringList` and
//! `matchIfList` from `src/misc/utils.cc`). A comma-separated list of `name` or `name:port`; a leading `^`
//! excludes the listed devices instead, and `=` (after any `^`) asks for exact names instead of prefixes.

/// One entry of the list: a device name (or prefix) and a port, `None` for any port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HcaEntry {
    pub prefix: String,
    pub port: Option<u32>,
}

/// A parsed `NCCL_IB_HCA` value.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct HcaList {
    pub exclude: bool,
    pub exact: bool,
    pub entries: Vec<HcaEntry>,
}

/// A malformed `NCCL_IB_HCA` entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("NCCL_IB_HCA='{value}' is not valid: entry '{entry}' should be a device name or name:port with a numeric port")]
pub(crate) struct HcaError {
    pub value: String,
    pub entry: String,
}

impl HcaList {
    /// Parses the variable's value; `None` or empty selects every device. NCCL ignores what follows a port
    /// number up to the next comma; collscope rejects a port that is not a number instead of reading it as 0.
    pub(crate) fn parse(value: Option<&str>) -> Result<HcaList, HcaError> {
        let Some(value) = value else { return Ok(HcaList::default()) };
        let (exclude, body) = value.strip_prefix('^').map_or((false, value), |r| (true, r));
        let (exact, body) = body.strip_prefix('=').map_or((false, body), |r| (true, r));
        let mut entries = Vec::new();
        for item in body.split(',') {
            let (name, port) = match item.split_once(':') {
                Some((n, p)) => {
                    let port =
                        p.trim().parse::<u32>().map_err(|_| HcaError { value: value.into(), entry: item.into() })?;
                    (n, Some(port))
                }
                None => (item, None),
            };
            // NCCL drops empty names (",," or ":1") silently.
            if !name.is_empty() {
                entries.push(HcaEntry { prefix: name.to_string(), port });
            }
        }
        Ok(HcaList { exclude, exact, entries })
    }

    /// Whether NET/IB uses port `port` of device `name`.
    pub(crate) fn selects(&self, name: &str, port: u32) -> bool {
        if self.entries.is_empty() {
            return true;
        }
        let listed = self.entries.iter().any(|e| {
            let name_ok = if self.exact { name == e.prefix } else { name.starts_with(&e.prefix) };
            name_ok && e.port.is_none_or(|p| p == port)
        });
        listed != self.exclude
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sel(v: &str, name: &str, port: u32) -> bool {
        HcaList::parse(Some(v)).unwrap().selects(name, port)
    }

    #[test]
    fn unset_selects_all() {
        assert!(HcaList::parse(None).unwrap().selects("mlx5_3", 2));
    }

    #[test]
    fn prefixes_ports_exclusion_and_exact() {
        assert!(sel("mlx5", "mlx5_0", 1));
        assert!(!sel("mlx5", "bnxt_re0", 1));
        assert!(sel("mlx5_0:1,mlx5_1:1", "mlx5_1", 1));
        assert!(!sel("mlx5_0:1,mlx5_1:1", "mlx5_1", 2));
        assert!(!sel("^mlx5_0", "mlx5_0", 1));
        assert!(sel("^mlx5_0", "mlx5_1", 1));
        // Without '=' mlx5_1 is also a prefix of mlx5_10.
        assert!(sel("mlx5_1", "mlx5_10", 1));
        assert!(!sel("=mlx5_1", "mlx5_10", 1));
        assert!(sel("=mlx5_1", "mlx5_1", 1));
        assert!(!sel("^=mlx5_1:1", "mlx5_1", 1));
        assert!(sel("^=mlx5_1:1", "mlx5_1", 2));
    }

    #[test]
    fn bad_port_is_named() {
        let e = HcaList::parse(Some("mlx5_0:x")).unwrap_err();
        assert_eq!(e.entry, "mlx5_0:x");
        assert!(e.to_string().contains("NCCL_IB_HCA='mlx5_0:x'"), "{e}");
    }
}
