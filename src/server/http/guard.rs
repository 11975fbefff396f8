//! Who may talk to carte over HTTP: the `Host` and `Origin` checks (DNS
//! rebinding and cross-site protection), the bearer token, and the session
//! a request names.
//!
//! The checks are strict on purpose: exactly one `Host` header, a bare
//! `host[:port]` (no user info, no path, not empty) naming an allowed host;
//! at most one `Origin`, an exact `scheme://host[:port]` naming an allowed
//! origin (a rule without a port means the scheme's default port, `:*` any
//! port; `null` only when allowed by name). rmcp checks `/mcp` too; these
//! checks run first and guard `/readyz` as well.

use axum::http::{HeaderMap, StatusCode, header};

/// Why a request was refused before it reached MCP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denied {
    /// 400 for a malformed or ambiguous request, 403 for a foreign host or origin.
    pub status: StatusCode,
    /// What to tell the client.
    pub reason: &'static str,
}

fn bad(reason: &'static str) -> Denied {
    Denied { status: StatusCode::BAD_REQUEST, reason }
}

fn forbidden(reason: &'static str) -> Denied {
    Denied { status: StatusCode::FORBIDDEN, reason }
}

/// An allowed `Host`: a name or address, and a port (`None`: any port).
#[derive(Debug, Clone, PartialEq, Eq)]
struct HostRule {
    host: String,
    port: Option<u16>,
}

/// Which ports an origin rule accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Ports {
    Any,
    Only(u16),
}

/// An allowed `Origin`.
#[derive(Debug, Clone, PartialEq, Eq)]
enum OriginRule {
    /// The literal `null` origin (sandboxed frames, `file:` pages).
    Null,
    Site {
        scheme: String,
        host: String,
        ports: Ports,
    },
}

/// The hosts and origins a server accepts.
#[derive(Debug, Clone)]
pub struct Access {
    hosts: Vec<HostRule>,
    origins: Vec<OriginRule>,
}

impl Access {
    /// Reads the allowed hosts (`name`, `name:port`, `[::1]`) and origins
    /// (`scheme://host`, `scheme://host:port`, `scheme://host:*`, `null`).
    pub fn new(hosts: &[String], origins: &[String]) -> anyhow::Result<Access> {
        let hosts = hosts
            .iter()
            .map(|rule| {
                let rule = rule.trim();
                let bare_ipv6 = rule.parse::<std::net::Ipv6Addr>().ok().map(|ip| (ip.to_string(), None));
                bare_ipv6
                    .or_else(|| authority(rule))
                    .map(|(host, port)| HostRule { host, port })
                    .ok_or_else(|| anyhow::anyhow!("--allow-host {rule}: expected a host name or address, e.g. mcp.example.com or mcp.example.com:8443"))
            })
            .collect::<anyhow::Result<_>>()?;
        let origins = origins
            .iter()
            .map(|rule| {
                origin_rule(rule.trim()).ok_or_else(|| {
                    anyhow::anyhow!("--allow-origin {rule}: expected scheme://host[:port] (port `*` for any), e.g. https://app.example.com")
                })
            })
            .collect::<anyhow::Result<_>>()?;
        Ok(Access { hosts, origins })
    }

    /// Checks the `Host` and `Origin` headers of a request.
    pub fn check(&self, headers: &HeaderMap) -> Result<(), Denied> {
        let mut hosts = headers.get_all(header::HOST).iter();
        let (Some(host), None) = (hosts.next(), hosts.next()) else {
            return Err(bad("exactly one Host header is required"));
        };
        let (name, port) =
            host.to_str().ok().and_then(authority).ok_or_else(|| bad("the Host header is not a valid host[:port]"))?;
        let allowed = self.hosts.iter().any(|rule| rule.host == name && rule.port.is_none_or(|p| Some(p) == port));
        if !allowed {
            return Err(forbidden("this Host is not allowed (see --allow-host)"));
        }
        let mut origins = headers.get_all(header::ORIGIN).iter();
        match (origins.next(), origins.next()) {
            (None, _) => Ok(()),
            (Some(_), Some(_)) => Err(bad("more than one Origin header")),
            (Some(origin), None) => match origin.to_str() {
                Ok(origin) if self.origin_allowed(origin) => Ok(()),
                _ => Err(forbidden("this Origin is not allowed (see --allow-origin)")),
            },
        }
    }

    /// Whether `origin` (an `Origin` header's value) is allowed.
    pub fn origin_allowed(&self, origin: &str) -> bool {
        let Some(origin) = origin_value(origin) else { return false };
        self.origins.iter().any(|rule| match (rule, &origin) {
            (OriginRule::Null, Origin::Null) => true,
            (OriginRule::Site { scheme, host, ports }, Origin::Site { scheme: s, host: h, port }) => {
                scheme == s
                    && host == h
                    && match ports {
                        Ports::Any => true,
                        Ports::Only(p) => port == &Some(*p),
                    }
            }
            _ => false,
        })
    }
}

/// An `Origin` header's value, parsed.
#[derive(Debug, PartialEq, Eq)]
enum Origin {
    Null,
    /// `port` is the explicit port or the scheme's default one.
    Site {
        scheme: String,
        host: String,
        port: Option<u16>,
    },
}

fn default_port(scheme: &str) -> Option<u16> {
    match scheme {
        "http" | "ws" => Some(80),
        "https" | "wss" => Some(443),
        _ => None,
    }
}

fn split_origin(text: &str) -> Option<(String, &str)> {
    let (scheme, rest) = text.split_once("://")?;
    let valid = scheme.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && scheme.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    valid.then(|| (scheme.to_ascii_lowercase(), rest))
}

fn origin_value(text: &str) -> Option<Origin> {
    if text == "null" {
        return Some(Origin::Null);
    }
    let (scheme, rest) = split_origin(text)?;
    let (host, port) = authority(rest)?;
    let port = port.or_else(|| default_port(&scheme));
    Some(Origin::Site { scheme, host, port })
}

fn origin_rule(text: &str) -> Option<OriginRule> {
    if text.eq_ignore_ascii_case("null") {
        return Some(OriginRule::Null);
    }
    let (scheme, rest) = split_origin(text)?;
    if let Some(host) = rest.strip_suffix(":*") {
        let (host, None) = authority(host)? else { return None };
        return Some(OriginRule::Site { scheme, host, ports: Ports::Any });
    }
    let (host, port) = authority(rest)?;
    let ports = Ports::Only(port.or_else(|| default_port(&scheme))?);
    Some(OriginRule::Site { scheme, host, ports })
}

/// A bare `host[:port]`: a DNS name or IPv4 address, or a bracketed IPv6
/// address; no user info, path, query or spaces. The host comes back in
/// lower case, without brackets.
fn authority(text: &str) -> Option<(String, Option<u16>)> {
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let (address, after) = rest.split_once(']')?;
        let address = address.parse::<std::net::Ipv6Addr>().ok()?;
        let port = match after {
            "" => None,
            _ => Some(after.strip_prefix(':')?),
        };
        (address.to_string(), port)
    } else {
        let (host, port) = match text.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (text, None),
        };
        let name_ok = !host.is_empty()
            && host.len() <= 253
            && host.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'));
        if !name_ok {
            return None;
        }
        (host.to_ascii_lowercase(), port)
    };
    let port = match port {
        None => None,
        Some(digits) if !digits.is_empty() && digits.len() <= 5 && digits.bytes().all(|b| b.is_ascii_digit()) => {
            Some(digits.parse::<u16>().ok()?)
        }
        Some(_) => return None,
    };
    Some((host, port))
}

/// An `Authorization` header that is repeated or not `Bearer <token>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the Authorization header is not one `Bearer <token>`")]
pub struct MalformedAuthorization;

/// The legacy session a request (or response) names in `Mcp-Session-Id`, if any.
pub fn session_id(headers: &HeaderMap) -> Option<&str> {
    headers.get("mcp-session-id").and_then(|id| id.to_str().ok())
}

/// The bearer token of a request: `Ok(None)` without an `Authorization`
/// header; an error when it is repeated or not `Bearer <token>` (the scheme
/// is case-insensitive, RFC 7235).
pub fn bearer(headers: &HeaderMap) -> Result<Option<&str>, MalformedAuthorization> {
    let mut values = headers.get_all(header::AUTHORIZATION).iter();
    let value = match (values.next(), values.next()) {
        (None, _) => return Ok(None),
        (Some(value), None) => value,
        (Some(_), Some(_)) => return Err(MalformedAuthorization),
    };
    let value = value.to_str().map_err(|_| MalformedAuthorization)?;
    let (scheme, token) = value.split_once(' ').ok_or(MalformedAuthorization)?;
    let token = token.trim_matches(' ');
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
        return Err(MalformedAuthorization);
    }
    Ok(Some(token))
}

/// Compares two secrets in time that depends only on their lengths.
pub fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |diff, (x, y)| diff | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn access() -> Access {
        let hosts = ["localhost", "127.0.0.1", "::1", "mcp.example.com:8443"].map(String::from);
        let origins =
            ["http://localhost:*", "https://app.example.com", "http://dev.example.com:8080"].map(String::from);
        Access::new(&hosts, &origins).unwrap()
    }

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_static(value));
        }
        map
    }

    #[test]
    fn hosts_must_be_one_bare_allowed_authority() {
        let access = access();
        assert_eq!(access.check(&headers(&[("host", "127.0.0.1:8080")])), Ok(()));
        assert_eq!(access.check(&headers(&[("host", "[::1]:8080")])), Ok(()));
        assert_eq!(access.check(&headers(&[("host", "MCP.example.com:8443")])), Ok(()));
        assert_eq!(
            access.check(&headers(&[("host", "mcp.example.com:8080")])).unwrap_err().status,
            StatusCode::FORBIDDEN
        );
        for refused in ["", "evil.com@127.0.0.1", "127.0.0.1:", "127.0.0.1:99999", "127.0.0.1/x", "127.0.0.1 x", "[::1"]
        {
            assert_eq!(
                access.check(&headers(&[("host", refused)])).unwrap_err().status,
                StatusCode::BAD_REQUEST,
                "{refused:?}"
            );
        }
        assert_eq!(access.check(&headers(&[])).unwrap_err().status, StatusCode::BAD_REQUEST);
        let two = headers(&[("host", "127.0.0.1"), ("host", "evil.com")]);
        assert_eq!(access.check(&two).unwrap_err().status, StatusCode::BAD_REQUEST);
    }

    #[test]
    fn origins_match_scheme_host_and_port() {
        let access = access();
        assert!(access.origin_allowed("http://localhost:5173"));
        assert!(access.origin_allowed("http://localhost"));
        assert!(!access.origin_allowed("https://localhost:5173"));
        assert!(access.origin_allowed("https://app.example.com"));
        assert!(access.origin_allowed("https://app.example.com:443"));
        assert!(!access.origin_allowed("https://app.example.com:8443"), "a rule without a port means the default port");
        assert!(access.origin_allowed("http://dev.example.com:8080"));
        assert!(!access.origin_allowed("http://dev.example.com"));
        assert!(!access.origin_allowed("https://evil.example.com"));
        assert!(!access.origin_allowed("https://app.example.com.evil.com"));
        assert!(!access.origin_allowed("https://user@app.example.com"));
        assert!(!access.origin_allowed("null"));
        assert!(!access.origin_allowed(""));
        let with_origin = headers(&[("host", "localhost"), ("origin", "https://evil.example.com")]);
        assert_eq!(access.check(&with_origin).unwrap_err().status, StatusCode::FORBIDDEN);
    }

    #[test]
    fn bad_rules_are_refused_at_start() {
        assert!(Access::new(&["evil.com@x".into()], &[]).is_err());
        assert!(Access::new(&[], &["app.example.com".into()]).is_err());
        assert!(Access::new(&[], &["https://app.example.com/path".into()]).is_err());
        assert!(Access::new(&[], &["null".into()]).unwrap().origin_allowed("null"));
    }

    #[test]
    fn the_bearer_scheme_is_case_insensitive() {
        assert_eq!(bearer(&headers(&[("authorization", "Bearer s3cret")])), Ok(Some("s3cret")));
        assert_eq!(bearer(&headers(&[("authorization", "bearer s3cret")])), Ok(Some("s3cret")));
        assert_eq!(bearer(&headers(&[("authorization", "BEARER  s3cret ")])), Ok(Some("s3cret")));
        assert_eq!(bearer(&headers(&[])), Ok(None));
        assert!(bearer(&headers(&[("authorization", "Basic czNjcmV0")])).is_err());
        assert!(bearer(&headers(&[("authorization", "Bearer")])).is_err());
        assert!(bearer(&headers(&[("authorization", "Bearer a"), ("authorization", "Bearer b")])).is_err());
    }

    #[test]
    fn secrets_compare_exactly() {
        assert!(same(b"s3cret", b"s3cret"));
        assert!(!same(b"s3cret", b"s3creT"));
        assert!(!same(b"s3cret", b"s3cret!"));
    }
}
