//! Network interface choice, as NCCL 2.28.9 `src/misc/socket.cc` (`ncclFindInterfaces`, `findInterfaces`,
//! `matchSubnet`) and `src/misc/utils.cc` (`parseStringList`, `matchIfList`) make it.

use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;

/// A running interface with its first address (port 0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetIf {
    pub name: String,
    pub addr: SocketAddr,
    pub netmask: Option<IpAddr>,
}

/// `NCCL_SOCKET_FAMILY`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SocketFamily {
    V4,
    V6,
}

impl FromStr for SocketFamily {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "AF_INET" => Ok(SocketFamily::V4),
            "AF_INET6" => Ok(SocketFamily::V6),
            _ => Err("AF_INET or AF_INET6".into()),
        }
    }
}

/// The `NCCL_SOCKET_IFNAME` grammar: a comma list of name prefixes (each may carry a `:port`, ignored for
/// interfaces), led by `^` to exclude them and/or `=` to match names exactly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IfSpec {
    pub exclude: bool,
    pub exact: bool,
    pub names: Vec<String>,
}

impl FromStr for IfSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (exclude, rest) = s.strip_prefix('^').map_or((false, s), |r| (true, r));
        let (exact, rest) = rest.strip_prefix('=').map_or((false, rest), |r| (true, r));
        let names = rest
            .split(',')
            .map(|t| t.split(':').next().unwrap_or("").trim().to_string())
            .filter(|t| !t.is_empty())
            .collect();
        Ok(IfSpec { exclude, exact, names })
    }
}

impl IfSpec {
    /// NCCL's `matchIfList(..) ^ searchNot`: an empty list matches everything.
    pub fn matches(&self, name: &str) -> bool {
        let listed = self.names.is_empty()
            || self.names.iter().any(|p| if self.exact { name == p } else { name.starts_with(p.as_str()) });
        listed != self.exclude
    }
}

/// Every running IPv4/IPv6 interface, one entry per (name, address) in `getifaddrs` order.
pub fn list_interfaces() -> Vec<NetIf> {
    use nix::net::if_::InterfaceFlags;
    let Ok(addrs) = nix::ifaddrs::getifaddrs() else { return Vec::new() };
    addrs
        .filter(|ifa| ifa.flags.contains(InterfaceFlags::IFF_RUNNING))
        .filter_map(|ifa| {
            let addr = sockaddr_ip(ifa.address.as_ref()?)?;
            let netmask = ifa.netmask.as_ref().and_then(sockaddr_ip).map(|a| a.ip());
            Some(NetIf { name: ifa.interface_name, addr, netmask })
        })
        .collect()
}

fn sockaddr_ip(s: &nix::sys::socket::SockaddrStorage) -> Option<SocketAddr> {
    if let Some(v4) = s.as_sockaddr_in() {
        return Some(SocketAddr::new(IpAddr::V4(v4.ip()), 0));
    }
    s.as_sockaddr_in6().map(|v6| SocketAddr::V6(std::net::SocketAddrV6::new(v6.ip(), 0, v6.flowinfo(), v6.scope_id())))
}

/// `findInterfaces`: the first `max` distinct interfaces matching `spec` (IPv6 loopback never).
fn find_matching(all: &[NetIf], spec: &IfSpec, family: Option<SocketFamily>, max: usize) -> Vec<NetIf> {
    let mut found: Vec<NetIf> = Vec::new();
    for i in all {
        if found.len() >= max {
            break;
        }
        let fam_ok = match family {
            Some(SocketFamily::V4) => i.addr.is_ipv4(),
            Some(SocketFamily::V6) => i.addr.is_ipv6(),
            None => true,
        };
        let v6_loopback = matches!(i.addr.ip(), IpAddr::V6(a) if a.is_loopback());
        if fam_ok && !v6_loopback && spec.matches(&i.name) && !found.iter().any(|f| f.name == i.name) {
            found.push(i.clone());
        }
    }
    found
}

/// `matchSubnet`: same family and same network under the local interface's mask.
fn same_subnet(local: &NetIf, remote: &SocketAddr) -> bool {
    match (local.addr.ip(), local.netmask, remote.ip()) {
        (IpAddr::V4(l), Some(IpAddr::V4(m)), IpAddr::V4(r)) => {
            u32::from(l) & u32::from(m) == u32::from(r) & u32::from(m)
        }
        (IpAddr::V6(l), Some(IpAddr::V6(m)), IpAddr::V6(r)) => {
            let same = l.octets().iter().zip(m.octets()).zip(r.octets()).all(|((a, m), b)| a & m == b & m);
            let scope = |a: &SocketAddr| if let SocketAddr::V6(v) = a { v.scope_id() } else { 0 };
            same && scope(&local.addr) == scope(remote)
        }
        _ => false,
    }
}

/// NCCL's `ncclFindInterfaces` over a given interface list: the user's `NCCL_SOCKET_IFNAME` (find or fail), else
/// `ib*`, else the interface in `NCCL_COMM_ID`'s subnet, else anything but docker/lo/virbr, else docker, lo,
/// virbr in that order.
pub fn select_interfaces(
    all: &[NetIf],
    ifname: Option<&IfSpec>,
    comm_id: Option<&SocketAddr>,
    family: Option<SocketFamily>,
    max: usize,
) -> Vec<NetIf> {
    if let Some(spec) = ifname {
        return find_matching(all, spec, family, max);
    }
    let spec = |s: &str| s.parse::<IfSpec>().unwrap_or(IfSpec { exclude: false, exact: false, names: vec![] });
    let mut found = find_matching(all, &spec("ib"), family, max);
    if found.is_empty() {
        if let Some(remote) = comm_id {
            found = all.iter().filter(|i| same_subnet(i, remote)).take(1).cloned().collect();
        }
    }
    for fallback in ["^docker,lo,virbr", "docker", "lo", "virbr"] {
        if !found.is_empty() {
            break;
        }
        found = find_matching(all, &spec(fallback), family, max);
    }
    found
}

/// `select_interfaces` over this host's interfaces.
pub fn find_interfaces(
    ifname: Option<&IfSpec>,
    comm_id: Option<&SocketAddr>,
    family: Option<SocketFamily>,
    max: usize,
) -> Vec<NetIf> {
    select_interfaces(&list_interfaces(), ifname, comm_id, family, max)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nif(name: &str, ip: &str, mask: &str) -> NetIf {
        NetIf { name: name.into(), addr: SocketAddr::new(ip.parse().unwrap(), 0), netmask: mask.parse().ok() }
    }

    fn host() -> Vec<NetIf> {
        vec![
            nif("lo", "127.0.0.1", "255.0.0.0"),
            nif("docker0", "172.17.0.1", "255.255.0.0"),
            nif("eth0", "10.0.0.1", "255.255.255.0"),
            nif("eth1", "192.168.5.2", "255.255.255.0"),
            nif("eth0", "fe80::1", "ffff:ffff:ffff:ffff::"),
            nif("lo", "::1", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"),
        ]
    }

    fn names(v: &[NetIf]) -> Vec<&str> {
        v.iter().map(|i| i.name.as_str()).collect()
    }

    #[test]
    fn default_order_prefers_ib_then_others_then_docker_then_lo() {
        let mut h = host();
        assert_eq!(names(&select_interfaces(&h, None, None, None, 8)), ["eth0", "eth1"]);
        h.push(nif("ib0", "10.1.0.1", "255.255.0.0"));
        assert_eq!(names(&select_interfaces(&h, None, None, None, 8)), ["ib0"]);
        let only = vec![nif("lo", "127.0.0.1", "255.0.0.0"), nif("docker0", "172.17.0.1", "255.255.0.0")];
        assert_eq!(names(&select_interfaces(&only, None, None, None, 8)), ["docker0"]);
        assert_eq!(names(&select_interfaces(&only[..1], None, None, None, 8)), ["lo"]);
    }

    #[test]
    fn comm_id_picks_the_interface_in_its_subnet() {
        let remote: SocketAddr = "192.168.5.77:9999".parse().unwrap();
        assert_eq!(names(&select_interfaces(&host(), None, Some(&remote), None, 1)), ["eth1"]);
        let elsewhere: SocketAddr = "8.8.8.8:1".parse().unwrap();
        assert_eq!(names(&select_interfaces(&host(), None, Some(&elsewhere), None, 1)), ["eth0"]);
    }

    #[test]
    fn ifname_grammar_prefix_exclude_exact() {
        let h = host();
        let pick = |s: &str| names(&select_interfaces(&h, Some(&s.parse().unwrap()), None, None, 8)).join(",");
        assert_eq!(pick("eth"), "eth0,eth1");
        assert_eq!(pick("^eth,docker"), "lo");
        assert_eq!(pick("=eth"), "");
        assert_eq!(pick("=eth1,lo:7"), "lo,eth1");
        assert_eq!(pick("^=eth0"), "lo,docker0,eth1");
        let v6 = select_interfaces(&h, Some(&"eth0".parse().unwrap()), None, Some(SocketFamily::V6), 8);
        assert_eq!(v6[0].addr.ip().to_string(), "fe80::1");
        assert!("AF_INET7".parse::<SocketFamily>().is_err());
    }

    #[test]
    fn this_host_has_a_usable_interface() {
        let found = find_interfaces(None, None, None, 1);
        assert_eq!(found.len(), 1, "{:?}", list_interfaces());
    }
}
