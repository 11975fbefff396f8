//! Where `--http` listens: `HOST:PORT`, where HOST is an IP address
//! (`127.0.0.1`, `[::1]`, `0.0.0.0`) or a name resolved with the system's
//! resolver (`localhost`, `mcp.internal`). carte listens on every address a
//! name resolves to, on the same port, so a client reaches it whichever of
//! them it tries (`localhost` is often both `127.0.0.1` and `::1`).
//!
//! An address the machine does not have (`::1` in a container without
//! IPv6) is skipped with a warning as long as another one is bound; any
//! other failure (the port is taken, no permission) stops start-up, since a
//! client could reach another process there.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context as _;
use tokio::net::TcpListener;

/// Longest wait for the resolver.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(10);

/// What `--http` asked for: the addresses to listen on, and the name they
/// came from (clients send it as `Host`), if it was one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// Every address, in the resolver's order, without repeats.
    pub addrs: Vec<SocketAddr>,
    /// The host name, when `--http` gave one rather than an address.
    pub name: Option<String>,
}

/// What `--http` names: an address, or a host name and a port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Spec<'a> {
    /// An address (`127.0.0.1:8080`, `[::1]:0`).
    Addr(SocketAddr),
    /// A host name to resolve, and the port.
    Host(&'a str, u16),
}

/// Reads `HOST:PORT` without resolving it: a mistake in the flag is
/// reported before anything starts (`carte serve` checks it first).
pub fn parse(spec: &str) -> anyhow::Result<Spec<'_>> {
    if let Ok(addr) = spec.parse::<SocketAddr>() {
        return Ok(Spec::Addr(addr));
    }
    let usage = "expected HOST:PORT, e.g. 127.0.0.1:8080, localhost:8080 or [::1]:8080";
    let (host, port) = spec.rsplit_once(':').with_context(|| format!("--http {spec}: {usage}"))?;
    let port: u16 = port.parse().map_err(|_| anyhow::anyhow!("--http {spec}: `{port}` is not a port; {usage}"))?;
    if host.is_empty() || host.contains(['[', ']', ':', '/', ' ', '@']) {
        anyhow::bail!("--http {spec}: `{host}` is not a host name or address; {usage}");
    }
    Ok(Spec::Host(host, port))
}

/// Resolves `HOST:PORT` (see the module doc).
pub async fn resolve(spec: &str) -> anyhow::Result<Resolved> {
    let (host, port) = match parse(spec)? {
        Spec::Addr(addr) => return Ok(Resolved { addrs: vec![addr], name: None }),
        Spec::Host(host, port) => (host, port),
    };
    let found = tokio::time::timeout(RESOLVE_TIMEOUT, tokio::net::lookup_host((host, port)))
        .await
        .map_err(|_| anyhow::anyhow!("--http {spec}: cannot resolve `{host}`: no answer in {RESOLVE_TIMEOUT:?}"))?
        .map_err(|err| anyhow::anyhow!("--http {spec}: cannot resolve `{host}`: {err}"))?;
    let mut addrs: Vec<SocketAddr> = Vec::new();
    for addr in found {
        if !addrs.contains(&addr) {
            addrs.push(addr);
        }
    }
    if addrs.is_empty() {
        anyhow::bail!("--http {spec}: cannot resolve `{host}`: it has no address");
    }
    Ok(Resolved { addrs, name: Some(host.to_owned()) })
}

/// Listens on every address of `addrs` (at least one). With port 0, the
/// first address gets a free port and the others the same one.
pub async fn bind_all(addrs: &[SocketAddr]) -> anyhow::Result<Vec<TcpListener>> {
    let mut listeners: Vec<TcpListener> = Vec::new();
    let mut skipped: Vec<String> = Vec::new();
    for &addr in addrs {
        let mut addr = addr;
        if addr.port() == 0
            && let Some(first) = listeners.first()
        {
            addr.set_port(first.local_addr()?.port());
        }
        match TcpListener::bind(addr).await {
            Ok(listener) => listeners.push(listener),
            Err(err) if err.kind() == std::io::ErrorKind::AddrNotAvailable => {
                skipped.push(format!("{addr} ({err})"));
            }
            Err(err) => return Err(anyhow::anyhow!("cannot listen on {addr}: {err}")),
        }
    }
    if listeners.is_empty() {
        anyhow::bail!("cannot listen on {}", skipped.join(", "));
    }
    for skipped in skipped {
        tracing::warn!("not listening on {skipped}: this machine does not have that address");
    }
    Ok(listeners)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
    }

    #[test]
    fn addresses_are_taken_as_they_are() {
        let rt = runtime();
        for spec in ["127.0.0.1:8080", "[::1]:8080", "0.0.0.0:0"] {
            let resolved = rt.block_on(resolve(spec)).unwrap();
            assert_eq!(resolved, Resolved { addrs: vec![spec.parse().unwrap()], name: None });
        }
    }

    #[test]
    fn localhost_resolves_to_loopback_addresses() {
        let resolved = runtime().block_on(resolve("localhost:8080")).unwrap();
        assert_eq!(resolved.name.as_deref(), Some("localhost"));
        assert!(!resolved.addrs.is_empty());
        assert!(resolved.addrs.iter().all(|a| a.ip().is_loopback() && a.port() == 8080), "{:?}", resolved.addrs);
    }

    #[test]
    fn a_malformed_spec_says_what_is_expected() {
        let rt = runtime();
        let message = |spec: &str| rt.block_on(resolve(spec)).unwrap_err().to_string();
        assert_eq!(
            message("localhost"),
            "--http localhost: expected HOST:PORT, e.g. 127.0.0.1:8080, localhost:8080 or [::1]:8080"
        );
        assert!(message("localhost:http").starts_with("--http localhost:http: `http` is not a port;"));
        assert!(message("localhost:70000").starts_with("--http localhost:70000: `70000` is not a port;"));
        assert!(message(":8080").starts_with("--http :8080: `` is not a host name or address;"));
        assert!(message("::1:8080").starts_with("--http ::1:8080: `::1` is not a host name or address;"));
    }

    #[test]
    fn every_address_is_bound_on_one_port() {
        let rt = runtime();
        let addrs: Vec<SocketAddr> = vec!["127.0.0.1:0".parse().unwrap(), "127.0.0.2:0".parse().unwrap()];
        let listeners = rt.block_on(bind_all(&addrs)).unwrap();
        let bound: Vec<SocketAddr> = listeners.iter().map(|l| l.local_addr().unwrap()).collect();
        assert_eq!(bound.len(), 2);
        assert_eq!(bound[0].port(), bound[1].port());
        assert_eq!((bound[0].ip(), bound[1].ip()), (addrs[0].ip(), addrs[1].ip()));
    }

    #[test]
    fn an_address_the_machine_lacks_is_skipped_but_a_taken_port_is_an_error() {
        let rt = runtime();
        // 192.0.2.1 (TEST-NET-1) is on no interface of a test machine.
        let lacking: SocketAddr = "192.0.2.1:0".parse().unwrap();
        let listeners = rt.block_on(bind_all(&["127.0.0.1:0".parse().unwrap(), lacking])).unwrap();
        assert_eq!(listeners.len(), 1);
        let only = rt.block_on(bind_all(&[lacking])).unwrap_err().to_string();
        assert!(only.starts_with("cannot listen on 192.0.2.1:0 ("), "{only}");
        let taken = listeners[0].local_addr().unwrap();
        let err = rt.block_on(bind_all(&[taken])).unwrap_err().to_string();
        assert!(err.starts_with(&format!("cannot listen on {taken}: ")), "{err}");
    }
}
