//! `apis:`: each entry's `baseUrl` (http or https, a host, no
//! credentials), headers (sent as written, never logged), `timeout`,
//! `retry` and `auth` (its exchange: `token_exchange.rs`), checked at load;
//! and the entry's client (its connection pool), lent to the catalog that
//! replaces this one while the origin is the same.

use std::sync::{Arc, Once};
use std::time::Duration;

use indexmap::IndexMap;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use schemars::JsonSchema;
use serde::Deserialize;
use url::Url;

use super::token_exchange::{AuthSpec, TokenExchange};
use super::{
    DEFAULT_BACKOFF, DEFAULT_RETRY_ON, DEFAULT_TIMEOUT, MAX_ATTEMPTS, MAX_IDLE_PER_HOST, MAX_RETRY_WAIT, MAX_TIMEOUT,
};
use crate::diag::{Diagnostic, escape_pointer, innermost};
use crate::duration::{DurationSpec, positive_at_most};
use crate::effect::block::Block;

/// A named upstream for `http` tools.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "api")]
pub struct ApiSpec {
    /// `https://api.example.com/v1`: scheme, host and port of every request come from here, never
    /// from arguments; a tool's `path` is appended to this path.
    #[serde(rename = "baseUrl")]
    pub base_url: String,
    /// Headers sent with every request to this api, as written (use `${VAR}` for secrets: they
    /// are never logged). A tool's `headers` add to them and win on the same name.
    #[serde(default)]
    pub headers: Option<IndexMap<String, String>>,
    /// How long one call may take, retries and reading the answer included (`500ms`, `10s`;
    /// default `30s`, at most `10m`).
    #[serde(default)]
    pub timeout: Option<DurationSpec>,
    /// Sends a request again when it could not connect or got one of the `on` statuses; only
    /// for idempotent methods (GET, HEAD, PUT, DELETE, OPTIONS).
    #[serde(default)]
    pub retry: Option<RetrySpec>,
    /// How carte authenticates as the caller: `auth: { exchange: { tokenUrl, audience, … } }`
    /// exchanges the caller's token for one meant for this api (RFC 8693) on every call.
    #[serde(default)]
    pub auth: Option<AuthSpec>,
}

/// When and how often a request is sent again.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "retry")]
pub struct RetrySpec {
    /// How many times a request is sent at most, the first included (2 to 10).
    pub attempts: u32,
    /// The statuses that are retried (default `[429, 502, 503, 504]`).
    #[serde(default)]
    pub on: Option<Vec<u16>>,
    /// The first wait; each next one doubles, up to 10s (default `200ms`). A `Retry-After`
    /// in seconds from the upstream is honoured up to 10s.
    #[serde(default)]
    pub backoff: Option<DurationSpec>,
}

/// An api of a catalog, checked, with its connection pool.
pub struct Api {
    pub(super) client: reqwest::Client,
    /// Its name, for messages.
    pub(super) name: String,
    pub(super) base: Url,
    pub(super) headers: HeaderMap,
    pub(super) timeout: Duration,
    pub(super) retry: Option<Retry>,
    /// `auth: { exchange }`: the caller's token, exchanged, is its `Authorization`.
    pub(super) exchange: Option<TokenExchange>,
}

pub(super) struct Retry {
    pub(super) attempts: u32,
    pub(super) on: Vec<u16>,
    pub(super) backoff: Duration,
}

impl Api {
    /// Whether it acts as the caller (`auth: { exchange }`): its calls need
    /// a verified caller's token.
    pub fn acts_as_caller(&self) -> bool {
        self.exchange.is_some()
    }
}

/// One `apis:` entry as declared.
pub type DeclaredApi<'a> = crate::effect::Declared<'a, ApiSpec>;

/// The checked `apis:` of a catalog being loaded: `http`'s block.
#[derive(Default)]
pub struct Apis {
    /// Those that can be called, by name.
    pub entries: IndexMap<String, Arc<Api>>,
    /// Every name declared, whether or not it was usable.
    pub(super) declared: Vec<String>,
}

/// Checks each api; one of `previous` (the catalog this one replaces) with
/// the same name and origin lends its client (and so its open connections).
fn check_apis(
    declared: &[DeclaredApi<'_>],
    previous: Option<&IndexMap<String, Arc<Api>>>,
    diagnostics: &mut Vec<Diagnostic>,
) -> Apis {
    let mut apis = Apis { declared: declared.iter().map(|d| d.name.to_owned()).collect(), ..Apis::default() };
    for decl in declared {
        if let Some(api) = check_api(decl, previous, diagnostics) {
            apis.entries.insert(decl.name.to_owned(), Arc::new(api));
        }
    }
    apis
}

impl Block for Apis {
    const KEY: &'static str = "apis";
    const ENTRY: &'static str = "api";
    const DUPLICATE: &'static str = "duplicate-api";

    type Spec = ApiSpec;
    type Entry = Arc<Api>;

    fn check(
        declared: &[DeclaredApi<'_>],
        previous: Option<&IndexMap<String, Arc<Api>>>,
        diagnostics: &mut Vec<Diagnostic>,
    ) -> Apis {
        check_apis(declared, previous, diagnostics)
    }

    fn declares(&self, name: &str) -> bool {
        self.declared.iter().any(|declared| declared == name)
    }

    fn into_entries(self) -> IndexMap<String, Arc<Api>> {
        self.entries
    }
}

fn check_api(
    decl: &DeclaredApi<'_>,
    previous: Option<&IndexMap<String, Arc<Api>>>,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<Api> {
    let name = decl.name;
    let previous = previous.and_then(|previous| previous.get(name));
    let exchange = check_auth(decl, previous.map(|previous| previous.exchange.as_ref()), diagnostics);
    let mut report = |code: &'static str, pointer: &str, message: String, hint: &str| {
        diagnostics.push(Diagnostic::error(code, (decl.locate)(pointer), message).with_hint(hint));
    };
    let base = match base_url(&decl.spec.base_url) {
        Ok(base) => Some(base),
        Err((message, hint)) => {
            report("api-url", "/baseUrl", format!("api `{name}`: {message}"), &hint);
            None
        }
    };
    let mut headers = HeaderMap::new();
    let mut headers_ok = true;
    for (key, value) in decl.spec.headers.iter().flatten() {
        let pointer = format!("/headers/{}", escape_pointer(key));
        let Ok(header) = HeaderName::from_bytes(key.as_bytes()) else {
            report(
                "api-header",
                &pointer,
                format!("api `{name}`: `{key}` is not a header name"),
                "a header name is letters, digits and `-`, such as `Authorization` or `X-Api-Key`",
            );
            headers_ok = false;
            continue;
        };
        if ["{{", "{%"].iter().any(|open| value.contains(open)) {
            report(
                "api-header",
                &pointer,
                format!("api `{name}`: header `{key}` is a template, but an api's headers are sent as written"),
                "use `${VAR}` for a secret read when the catalog loads, or move the header to the `headers:` of the tools that compute it",
            );
            headers_ok = false;
            continue;
        }
        // The value is not shown: it may hold a secret.
        match HeaderValue::from_str(value) {
            Ok(mut value) => {
                value.set_sensitive(true);
                headers.insert(header, value);
            }
            Err(_) => {
                report(
                    "api-header",
                    &pointer,
                    format!("api `{name}`: header `{key}` has a line break or control character in its value"),
                    "a header value is one line of text; check what `${VAR}` expands to",
                );
                headers_ok = false;
            }
        }
    }
    let timeout = match decl.spec.timeout.as_ref().map(|t| parse_timeout(t, MAX_TIMEOUT)) {
        None => Some(DEFAULT_TIMEOUT),
        Some(Ok(timeout)) => Some(timeout),
        Some(Err(message)) => {
            report(
                "api-timeout",
                "/timeout",
                format!("api `{name}`: {message}"),
                "write how long one call may take, such as `500ms`, `10s` or `1m` (at most `10m`)",
            );
            None
        }
    };
    let retry = match &decl.spec.retry {
        None => Some(None),
        Some(spec) => match check_retry(spec) {
            Ok(retry) => Some(Some(retry)),
            Err((pointer, message, hint)) => {
                report("api-retry", &format!("/retry{pointer}"), format!("api `{name}`: {message}"), hint);
                None
            }
        },
    };
    let (base, timeout, retry, exchange) = (base?, timeout?, retry?, exchange?);
    if !headers_ok {
        return None;
    }
    let reused = previous.filter(|old| old.base.origin() == base.origin()).map(|old| old.client.clone());
    let client = match reused {
        Some(client) => client,
        None => match new_client() {
            Ok(client) => client,
            Err(err) => {
                report(
                    "api-client",
                    "/baseUrl",
                    format!("api `{name}`: the HTTP client could not be set up: {}", innermost(&err)),
                    "this is about the machine (TLS roots, resolver), not the catalog",
                );
                return None;
            }
        },
    };
    Some(Api { client, name: name.to_owned(), base, headers, timeout, retry, exchange })
}

/// Checks `auth`: `Some(None)` without one, `None` once it reported why
/// it cannot be used. `previous` is the api of the same name in the catalog
/// this one replaces (its exchange's cache is kept if configured the same).
fn check_auth(
    decl: &DeclaredApi<'_>,
    previous: Option<Option<&TokenExchange>>,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<Option<TokenExchange>> {
    let name = decl.name;
    let Some(auth) = &decl.spec.auth else { return Some(None) };
    if let Some((key, _)) =
        decl.spec.headers.iter().flatten().find(|(key, _)| key.eq_ignore_ascii_case("authorization"))
    {
        let location = (decl.locate)(&format!("/headers/{}", escape_pointer(key)));
        let message = format!("api `{name}` has both `auth` and an `{key}` header");
        diagnostics.push(Diagnostic::error("api-auth", location, message).with_hint(
            "with `auth: { exchange }` carte sends the caller's exchanged token as `Authorization`: remove this header",
        ));
        return None;
    }
    match TokenExchange::check(&auth.exchange, previous.flatten()) {
        Ok((exchange, warning)) => {
            if let Some(warning) = warning {
                let location = (decl.locate)(&format!("/auth/exchange{}", warning.pointer));
                let message = format!("api `{name}`: {}", warning.message);
                diagnostics.push(Diagnostic::warning("api-auth", location, message).with_hint(&warning.hint));
            }
            Some(Some(exchange))
        }
        Err(problem) => {
            let location = (decl.locate)(&format!("/auth/exchange{}", problem.pointer));
            let message = format!("api `{name}`: {}", problem.message);
            diagnostics.push(Diagnostic::error("api-auth", location, message).with_hint(&problem.hint));
            None
        }
    }
}

/// One api's client: rustls with the ring provider, no redirects (a 3xx is
/// an answer, so nothing follows a Location to another host).
fn new_client() -> Result<reqwest::Client, reqwest::Error> {
    static PROVIDER: Once = Once::new();
    PROVIDER.call_once(|| {
        // Fails only if a provider is installed already, which is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .pool_max_idle_per_host(MAX_IDLE_PER_HOST)
        .user_agent(concat!("carte/", env!("CARGO_PKG_VERSION")))
        .build()
}

/// Reads `baseUrl`: http(s), a host, no credentials, no fragment.
fn base_url(text: &str) -> Result<Url, (String, String)> {
    const HINT: &str = "write the api's address with its scheme, such as `https://api.example.com/v1`";
    let url = Url::parse(text.trim()).map_err(|err| match err {
        url::ParseError::RelativeUrlWithoutBase => (
            "`baseUrl` has no scheme".to_owned(),
            format!(
                "write the scheme before the host: `https://{}` (or `http://` for a plain connection)",
                text.trim()
            ),
        ),
        err => (format!("`baseUrl` is not a URL ({err})"), HINT.to_owned()),
    })?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err((
            format!("`baseUrl` must start with `http://` or `https://`, not `{}:`", url.scheme()),
            "carte calls HTTP APIs: write an address such as `https://api.example.com/v1`".to_owned(),
        ));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(("`baseUrl` has no host".to_owned(), HINT.to_owned()));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err((
            "`baseUrl` has a user name or password in it".to_owned(),
            "send credentials as a header instead: `headers: { Authorization: \"Basic ${API_CREDENTIALS}\" }`"
                .to_owned(),
        ));
    }
    if url.fragment().is_some() {
        return Err(("`baseUrl` has a `#fragment`, which is never sent".to_owned(), "remove the `#…` part".to_owned()));
    }
    Ok(url)
}

fn check_retry(spec: &RetrySpec) -> Result<Retry, (String, String, &'static str)> {
    if !(2..=MAX_ATTEMPTS).contains(&spec.attempts) {
        return Err((
            "/attempts".to_owned(),
            format!("`attempts: {}` is not between 2 and {MAX_ATTEMPTS}", spec.attempts),
            "`attempts` counts the first request too: `attempts: 3` sends it at most three times",
        ));
    }
    let on = spec.on.clone().unwrap_or_else(|| DEFAULT_RETRY_ON.to_vec());
    if let Some(idx) = on.iter().position(|status| !(100..=599).contains(status)) {
        return Err((
            format!("/on/{idx}"),
            format!("{} is not an HTTP status", on[idx]),
            "list statuses from 100 to 599, such as `[429, 502, 503, 504]`",
        ));
    }
    let backoff = match &spec.backoff {
        None => DEFAULT_BACKOFF,
        Some(backoff) => parse_timeout(backoff, MAX_RETRY_WAIT).map_err(|message| {
            ("/backoff".to_owned(), message, "write the first wait, such as `200ms` or `1s` (at most `10s`)")
        })?,
    };
    Ok(Retry { attempts: spec.attempts, on, backoff })
}

/// Reads a `timeout` or `backoff`: more than zero, at most `max`.
pub(super) fn parse_timeout(spec: &DurationSpec, max: Duration) -> Result<Duration, String> {
    positive_at_most(spec, max, "a duration", "stop every call")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls_are_http_with_a_host() {
        assert!(base_url("ftp://example.com").is_err());
        assert!(base_url("http://").is_err());
        assert!(base_url("api.example.com").is_err());
        assert!(base_url("https://user:pw@example.com").is_err());
        assert!(base_url("https://example.com/v1?key=1").is_ok());
    }
}
