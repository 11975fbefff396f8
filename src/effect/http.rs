//! The `http` effect: one request to a named upstream (`apis:`), whose
//! answer the result template sees as `status`, `headers`, `body` and
//! `json`.
//!
//! Safe by construction: scheme, host and port come only from the api's
//! `baseUrl`; the tool's `path` is appended to the base's path, and every
//! value a `{{ }}` prints into it is percent-encoded as part of one segment
//! (the catalog renders it with the URL escape, see `render.rs`), so an
//! argument `../../admin` stays inside its segment; query values are
//! form-encoded. The final URL's origin and path are checked against the
//! base once more before anything is sent. Each api has one `reqwest`
//! client (one connection pool, rustls, redirects not followed), kept across
//! reloads while its origin is the same. A call is bounded by the api's
//! `timeout` (retries and reading the answer included) and by `maxBytes`
//! (the body is read as a stream and cut); a cancelled call drops the
//! request. Header values are never logged: they carry tokens.

use std::sync::{Arc, Once};
use std::time::Duration;

use indexmap::IndexMap;
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};
use reqwest::{Method, StatusCode};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};
use url::Url;

use super::{Call, Check, Failure, Kind, Output, Sections, Template};
use crate::diag::{Diagnostic, Location, did_you_mean};
use crate::duration::{DurationSpec, show_duration};

/// A call's timeout when neither the api nor the tool gives one.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest timeout a catalog may give.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(10 * 60);
/// How much of an answer is read when the tool gives no `maxBytes`.
pub const DEFAULT_MAX_BYTES: u64 = 1 << 20;
/// The largest `maxBytes`.
pub const MAX_MAX_BYTES: u64 = 64 << 20;
/// How much of a non-OK answer's body its error result shows.
const ERROR_BODY_BYTES: usize = 2048;
/// The longest wait between two attempts (backoff or `Retry-After`); an
/// upstream asking to wait longer gets its answer returned as it is.
pub const MAX_RETRY_WAIT: Duration = Duration::from_secs(10);
/// Most attempts `retry.attempts` may ask for.
const MAX_ATTEMPTS: u32 = 10;
/// Statuses retried when `retry` gives no `on`.
const DEFAULT_RETRY_ON: &[u16] = &[429, 502, 503, 504];
/// The first wait when `retry` gives no `backoff`.
const DEFAULT_BACKOFF: Duration = Duration::from_millis(200);
/// Idle connections kept per host in an api's pool.
const MAX_IDLE_PER_HOST: usize = 64;
/// The methods a tool may use.
const METHODS: &[&str] = &["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"];
/// Those that may be sent again without doing their work twice.
const IDEMPOTENT: &[&str] = &["GET", "HEAD", "PUT", "DELETE", "OPTIONS"];

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

/// The `http` effect.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "http effect")]
pub struct HttpSpec {
    /// The name of an `apis` entry.
    pub api: String,
    /// `GET` (default), `HEAD`, `POST`, `PUT`, `PATCH`, `DELETE` or `OPTIONS`.
    #[serde(default)]
    pub method: Option<String>,
    /// The path after the api's `baseUrl`, starting with `/`; each `{{ }}` value is
    /// percent-encoded into its segment (`/users/{{ id }}`).
    pub path: String,
    /// Query parameters; values are templates or literals, and one that renders empty is left
    /// out (a list repeats the key).
    #[serde(default)]
    pub query: Option<IndexMap<String, Scalar>>,
    /// Headers (templates), added to the api's.
    #[serde(default)]
    pub headers: Option<IndexMap<String, String>>,
    /// A JSON body: strings in it are templates, and `"{{ n }}"` keeps the type of `n`.
    #[serde(default)]
    pub json: Option<Value>,
    /// A text body (a template); give its `Content-Type` in `headers`.
    #[serde(default)]
    pub body: Option<String>,
    /// The statuses that are answers (default: any 2xx); any other is an error result with
    /// the status and the start of the body.
    #[serde(default, rename = "okStatus")]
    pub ok_status: Option<Vec<u16>>,
    /// How long this tool's call may take (default: the api's `timeout`).
    #[serde(default)]
    pub timeout: Option<DurationSpec>,
    /// How much of the answer is read (default 1 MiB, at most 64 MiB); the rest is cut and the
    /// result says so.
    #[serde(default, rename = "maxBytes")]
    pub max_bytes: Option<u64>,
}

/// A query value as written: a template, or a literal number or boolean.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
#[schemars(title = "query value")]
pub enum Scalar {
    /// Text (a template).
    Text(String),
    /// A number, sent as written.
    Number(serde_json::Number),
    /// A boolean, sent as `true` or `false`.
    Bool(bool),
}

/// An api of a catalog, checked, with its connection pool.
pub struct Api {
    client: reqwest::Client,
    /// Its name, for messages.
    name: String,
    base: Url,
    headers: HeaderMap,
    timeout: Duration,
    retry: Option<Retry>,
}

struct Retry {
    attempts: u32,
    on: Vec<u16>,
    backoff: Duration,
}

/// One `apis:` entry as declared.
pub struct DeclaredApi<'a> {
    /// Its name.
    pub name: &'a str,
    /// What it says.
    pub spec: &'a ApiSpec,
    /// Where a key of it is written, by its JSON pointer in the entry (`/baseUrl`).
    pub locate: Box<dyn Fn(&str) -> Location + 'a>,
}

/// The checked `apis:` of a catalog being loaded.
#[derive(Default)]
pub struct Apis {
    /// Those that can be called, by name.
    pub entries: IndexMap<String, Arc<Api>>,
    /// Every name declared, whether or not it was usable.
    declared: Vec<String>,
}

/// Checks each api; one of `previous` (the catalog this one replaces) with
/// the same name and origin lends its client (and so its open connections).
pub fn check_apis(
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

fn check_api(
    decl: &DeclaredApi<'_>,
    previous: Option<&IndexMap<String, Arc<Api>>>,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<Api> {
    let name = decl.name;
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
    let (base, timeout, retry) = (base?, timeout?, retry?);
    if !headers_ok {
        return None;
    }
    let reused = previous
        .and_then(|previous| previous.get(name))
        .filter(|old| old.base.origin() == base.origin())
        .map(|old| old.client.clone());
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
    Some(Api { client, name: name.to_owned(), base, headers, timeout, retry })
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

/// Reads a duration: more than zero, at most `max`.
fn parse_timeout(spec: &DurationSpec, max: Duration) -> Result<Duration, String> {
    let millis = spec.millis()?;
    let duration = Duration::from_millis(millis);
    if millis == 0 {
        return Err("a duration of 0 would stop every call".to_owned());
    }
    if duration > max {
        return Err(format!("{} is longer than {}", show_duration(duration), show_duration(max)));
    }
    Ok(duration)
}

/// A part of the request: written as is, or the `n`th rendered template.
#[derive(Debug, Clone)]
enum Part {
    Literal(Value),
    Rendered(usize),
}

/// The shape of a `json:` body: its string leaves with templates are rendered.
#[derive(Debug, Clone)]
enum Shape {
    Part(Part),
    Array(Vec<Shape>),
    Object(Vec<(String, Shape)>),
}

enum Body {
    None,
    Json(Shape),
    Text(Part),
}

/// A tool's request, checked at load.
pub struct Http {
    api: Arc<Api>,
    method: Method,
    /// The path template's index in `templates`.
    path: usize,
    query: Vec<(String, Part)>,
    headers: Vec<(HeaderName, Part)>,
    body: Body,
    ok_status: Option<Vec<u16>>,
    timeout: Duration,
    /// Whose `timeout` applies, for its error: "api's" or "tool's".
    timeout_of: &'static str,
    max_bytes: usize,
    /// Every template of the request, rendered in one trip per call.
    templates: Vec<Template>,
}

impl Kind for Http {
    const VARIABLES: &'static [&'static str] = &["status", "headers", "body", "json"];

    type Spec = HttpSpec;

    fn check(spec: &HttpSpec, sections: &Sections<'_>, check: &mut Check<'_>) -> Option<Http> {
        let apis = sections.apis;
        let api = match apis.entries.get(&spec.api) {
            Some(api) => Some(api.clone()),
            None if apis.declared.contains(&spec.api) || (sections.left_out)("apis", &spec.api) => None,
            None => {
                let known = &apis.declared;
                let hint = match did_you_mean(&spec.api, known.iter().map(String::as_str)) {
                    Some(close) => format!("did you mean `{close}`?"),
                    None if known.is_empty() => "declare it under `apis:` with a `baseUrl:`".to_owned(),
                    None => format!("declared apis: {}", known.join(", ")),
                };
                check.error("unknown-api", "/run/http/api", format!("api `{}` is not declared", spec.api)).hint =
                    Some(hint);
                None
            }
        };
        let mut ok = true;
        let method = check_method(spec.method.as_deref(), check);
        let mut templates = Vec::new();
        let mut part = |check: &mut Check<'_>, pointer: &str, text: &str, templates: &mut Vec<Template>| {
            if !["{{", "{%", "{#"].iter().any(|open| text.contains(open)) {
                return Some(Part::Literal(Value::String(text.to_owned())));
            }
            let template = check.template(pointer, text)?;
            templates.push(template);
            Some(Part::Rendered(templates.len() - 1))
        };
        // The path.
        let path = if !spec.path.starts_with('/') {
            // A whole URL written as the path: keep only its path.
            let written = Url::parse(&spec.path)
                .ok()
                .filter(|url| url.has_host())
                .map_or_else(|| format!("/{}", spec.path), |url| url.path().to_owned());
            let hint = if spec.path.contains("://") {
                format!("scheme and host come from the api's `baseUrl`; write only the path: `{written}`")
            } else {
                format!("the path follows the api's `baseUrl`: write `{written}`")
            };
            check.error("http-path", "/run/http/path", "`path` must start with `/`").hint = Some(hint);
            None
        } else if let Some((at, mark)) = outside_tags(&spec.path, &['?', '#']) {
            let message = format!("`path` has a `{mark}`");
            check.error_in("http-path", ("/run/http/path", &spec.path, at..at + 1), message).hint = Some(
                if mark == '?' {
                    "give query parameters under `query:`, e.g. `query: { page: \"{{ page }}\" }`: their values are encoded for you".to_owned()
                } else {
                    "a `#fragment` is never sent to the server; remove it".to_owned()
                },
            );
            None
        } else {
            check.url_template("/run/http/path", &spec.path).map(|template| {
                templates.push(template);
                templates.len() - 1
            })
        };
        let mut query = Vec::new();
        for (key, value) in spec.query.iter().flatten() {
            let pointer = format!("/run/http/query/{}", escape_pointer(key));
            let value = match value {
                Scalar::Text(text) => part(check, &pointer, text, &mut templates),
                Scalar::Number(n) => Some(Part::Literal(Value::Number(n.clone()))),
                Scalar::Bool(b) => Some(Part::Literal(Value::Bool(*b))),
            };
            match value {
                Some(value) => query.push((key.clone(), value)),
                None => ok = false,
            }
        }
        let mut headers = Vec::new();
        for (key, value) in spec.headers.iter().flatten() {
            let pointer = format!("/run/http/headers/{}", escape_pointer(key));
            let Ok(name) = HeaderName::from_bytes(key.as_bytes()) else {
                check.error("http-header", &pointer, format!("`{key}` is not a header name")).hint =
                    Some("a header name is letters, digits and `-`, such as `Accept` or `X-Request-Id`".to_owned());
                ok = false;
                continue;
            };
            match part(check, &pointer, value, &mut templates) {
                Some(value) => headers.push((name, value)),
                None => ok = false,
            }
        }
        let body = match (&spec.json, &spec.body) {
            (Some(_), Some(_)) => {
                check.error("http-body", "/run/http/body", "`http` has both `json` and `body`").hint = Some(
                    "send one body: `json:` for a JSON document (its strings are templates), or `body:` for text with a `Content-Type` header".to_owned(),
                );
                None
            }
            (Some(json), None) => shape(json, "/run/http/json", check, &mut templates, &mut part).map(Body::Json),
            (None, Some(text)) => {
                let has_type = |headers: &Option<IndexMap<String, String>>| {
                    headers.iter().flatten().any(|(key, _)| key.eq_ignore_ascii_case("content-type"))
                };
                if !has_type(&spec.headers) && !api.as_ref().is_some_and(|api| api.headers.contains_key(CONTENT_TYPE)) {
                    let location = check.host.locate("/run/http/body");
                    check.host.report(Diagnostic::warning(
                        "http-content-type",
                        location,
                        "`body` is sent without a `Content-Type` header",
                    ))
                    .hint = Some("say what the body is in `headers:`, e.g. `Content-Type: text/plain`; for JSON, write `json:` instead of `body:`".to_owned());
                }
                part(check, "/run/http/body", text, &mut templates).map(Body::Text)
            }
            (None, None) => Some(Body::None),
        };
        for (idx, status) in spec.ok_status.iter().flatten().enumerate() {
            if !(100..=599).contains(status) {
                check
                    .error(
                        "http-status",
                        &format!("/run/http/okStatus/{idx}"),
                        format!("{status} is not an HTTP status"),
                    )
                    .hint =
                    Some("list the statuses that are answers, from 100 to 599, such as `[200, 404]`".to_owned());
                ok = false;
            }
        }
        let timeout_of = if spec.timeout.is_some() { "tool's" } else { "api's" };
        let timeout = match spec.timeout.as_ref().map(|t| parse_timeout(t, MAX_TIMEOUT)) {
            None => api.as_ref().map_or(DEFAULT_TIMEOUT, |api| api.timeout),
            Some(Ok(timeout)) => timeout,
            Some(Err(message)) => {
                check.error("http-timeout", "/run/http/timeout", message).hint =
                    Some("write how long one call may take, such as `500ms`, `10s` or `1m` (at most `10m`)".to_owned());
                ok = false;
                DEFAULT_TIMEOUT
            }
        };
        let max_bytes = spec.max_bytes.unwrap_or(DEFAULT_MAX_BYTES);
        if max_bytes == 0 || max_bytes > MAX_MAX_BYTES {
            check
                .error(
                    "http-max-bytes",
                    "/run/http/maxBytes",
                    format!("`maxBytes: {max_bytes}` is not between 1 and 64 MiB"),
                )
                .hint = Some("write how many bytes of the answer to read, such as `65536` (default 1 MiB)".to_owned());
            ok = false;
        }
        if let (Some(api), Some(method)) = (&api, &method)
            && api.retry.is_some()
            && !IDEMPOTENT.contains(&method.as_str())
        {
            let pointer = if spec.method.is_some() { "/run/http/method" } else { "/run/http/api" };
            let location = check.host.locate(pointer);
            check
                .host
                .report(Diagnostic::warning(
                    "http-retry",
                    location,
                    format!(
                        "api `{}` has `retry`, but `{method}` is not idempotent: this tool's requests are sent once",
                        api.name
                    ),
                ))
                .hint = Some(format!(
                "sending a {method} again after a lost answer could do its work twice, so carte never retries it; to silence this, call it through an api declared without `retry`"
            ));
        }
        let (api, method, path, body) = (api?, method?, path?, body?);
        ok.then(|| Http {
            api,
            method,
            path,
            query,
            headers,
            body,
            ok_status: spec.ok_status.clone(),
            timeout,
            timeout_of,
            max_bytes: usize::try_from(max_bytes).unwrap_or(usize::MAX),
            templates,
        })
    }

    fn arguments_used(&self) -> &[String] {
        // Every argument it uses is in a template, counted when checked.
        &[]
    }

    async fn run<T, F, Fut>(&self, call: &dyn Call, _arguments: Map<String, Value>, finish: F) -> Result<T, Failure<T>>
    where
        F: FnOnce(Output) -> Fut,
        Fut: Future<Output = Result<T, T>>,
    {
        let rendered = call.render(&self.templates).await.map_err(Failure::Failed)?;
        let (request, label) = self.request(&rendered).map_err(Failure::Failed)?;
        let exchange = self.exchange(request, &label);
        let answer = match tokio::time::timeout(self.timeout, exchange).await {
            Ok(answer) => answer.map_err(Failure::Failed)?,
            Err(_) => {
                return Err(Failure::Failed(format!(
                    "{label}: no answer within {} (the {} `timeout`)",
                    show_duration(self.timeout),
                    self.timeout_of
                )));
            }
        };
        let ok = match &self.ok_status {
            Some(list) => list.contains(&answer.status.as_u16()),
            None => answer.status.is_success(),
        };
        if !ok {
            return Err(Failure::Failed(format!(
                "{label} answered {}{}",
                show_status(answer.status),
                error_body(&answer.body)
            )));
        }
        let output = answer.output(self.max_bytes);
        finish(output).await.map_err(|reason| Failure::Refused { reason, undone: None })
    }
}

/// The method as written, checked: `GET` if none.
fn check_method(method: Option<&str>, check: &mut Check<'_>) -> Option<Method> {
    let Some(method) = method else { return Some(Method::GET) };
    if METHODS.contains(&method) {
        return Method::from_bytes(method.as_bytes()).ok();
    }
    let upper = method.to_ascii_uppercase();
    let hint = if METHODS.contains(&upper.as_str()) {
        format!("methods are written in capitals: `{upper}`")
    } else {
        match did_you_mean(&upper, METHODS.iter().copied()) {
            Some(close) => format!("did you mean `{close}`?"),
            None => format!("use one of {}", METHODS.join(", ")),
        }
    };
    check.error("http-method", "/run/http/method", format!("`{method}` is not an HTTP method carte sends")).hint =
        Some(hint);
    None
}

/// Reads a `json:` body, registering each string leaf that is a template.
fn shape(
    value: &Value,
    pointer: &str,
    check: &mut Check<'_>,
    templates: &mut Vec<Template>,
    part: &mut impl FnMut(&mut Check<'_>, &str, &str, &mut Vec<Template>) -> Option<Part>,
) -> Option<Shape> {
    match value {
        Value::String(text) => part(check, pointer, text, templates).map(Shape::Part),
        Value::Array(items) => {
            let mut out = Vec::with_capacity(items.len());
            let mut ok = true;
            for (idx, item) in items.iter().enumerate() {
                match shape(item, &format!("{pointer}/{idx}"), check, templates, part) {
                    Some(item) => out.push(item),
                    None => ok = false,
                }
            }
            ok.then_some(Shape::Array(out))
        }
        Value::Object(map) => {
            let mut out = Vec::with_capacity(map.len());
            let mut ok = true;
            for (key, item) in map {
                match shape(item, &format!("{pointer}/{}", escape_pointer(key)), check, templates, part) {
                    Some(item) => out.push((key.clone(), item)),
                    None => ok = false,
                }
            }
            ok.then_some(Shape::Object(out))
        }
        other => Some(Shape::Part(Part::Literal(other.clone()))),
    }
}

/// Where the first of `marks` is in `source` outside `{{ }}`, `{% %}` and
/// `{# #}`, and which.
fn outside_tags(source: &str, marks: &[char]) -> Option<(usize, char)> {
    let mut rest = 0;
    while rest < source.len() {
        let next_tag = ["{{", "{%", "{#"].iter().filter_map(|open| source[rest..].find(open)).min();
        let end = next_tag.map_or(source.len(), |at| rest + at);
        if let Some(found) = source[rest..end].find(marks) {
            let at = rest + found;
            return source[at..].chars().next().map(|mark| (at, mark));
        }
        let Some(close_from) = next_tag.map(|at| rest + at + 2) else { break };
        let close = match &source[close_from - 1..close_from] {
            "{" => "}}",
            "%" => "%}",
            _ => "#}",
        };
        rest = source[close_from..].find(close).map_or(source.len(), |at| close_from + at + 2);
    }
    None
}

/// A JSON pointer segment for `key`.
fn escape_pointer(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// A rendered value as text for a query value or header: `None` for null
/// or empty (left out).
fn text_of(value: &Value) -> Option<String> {
    let text = match value {
        Value::Null => return None,
        Value::String(text) => text.clone(),
        other => other.to_string(),
    };
    (!text.is_empty()).then_some(text)
}

impl Part {
    fn value<'v>(&'v self, rendered: &'v [Value]) -> &'v Value {
        match self {
            Part::Literal(value) => value,
            Part::Rendered(idx) => rendered.get(*idx).unwrap_or(&Value::Null),
        }
    }
}

impl Shape {
    fn value(&self, rendered: &[Value]) -> Value {
        match self {
            Shape::Part(part) => part.value(rendered).clone(),
            Shape::Array(items) => Value::Array(items.iter().map(|item| item.value(rendered)).collect()),
            Shape::Object(entries) => {
                Value::Object(entries.iter().map(|(key, item)| (key.clone(), item.value(rendered))).collect())
            }
        }
    }
}

/// Appends `path` (rendered, its values percent-encoded) to `base`'s path,
/// refusing what would leave it: a `.` or `..` segment, or a URL whose
/// origin or path no longer starts with the base's.
fn join_path(base: &Url, path: &str) -> Result<Url, String> {
    let dot = path.split('/').find(|segment| {
        let lower = segment.to_ascii_lowercase().replace("%2e", ".");
        lower == "." || lower == ".."
    });
    if let Some(segment) = dot {
        return Err(format!("path left the api: it has a `{segment}` segment"));
    }
    let base_path = base.path().trim_end_matches('/');
    let mut url = base.clone();
    url.set_path(&format!("{base_path}{path}"));
    url.set_fragment(None);
    let inside = url.path().strip_prefix(base_path).is_some_and(|rest| rest.starts_with('/'));
    if url.origin() != base.origin() || !inside {
        return Err("path left the api".to_owned());
    }
    Ok(url)
}

impl Http {
    /// The request for the `rendered` templates, and how errors name it
    /// (method, api and path: never the query or headers, which may carry
    /// secrets).
    fn request(&self, rendered: &[Value]) -> Result<(reqwest::Request, String), String> {
        let path = match rendered.get(self.path) {
            Some(Value::String(path)) => path.as_str(),
            _ => "",
        };
        let label = format!("{} {} {path}", self.method, self.api.name);
        let mut url = join_path(&self.api.base, path).map_err(|err| format!("{label}: {err}"))?;
        if !self.query.is_empty() {
            let mut pairs = url.query_pairs_mut();
            for (key, part) in &self.query {
                match part.value(rendered) {
                    Value::Array(items) => {
                        for item in items {
                            if let Some(text) = text_of(item) {
                                pairs.append_pair(key, &text);
                            }
                        }
                    }
                    value => {
                        if let Some(text) = text_of(value) {
                            pairs.append_pair(key, &text);
                        }
                    }
                }
            }
        }
        if url.query() == Some("") {
            url.set_query(None);
        }
        let mut headers = self.api.headers.clone();
        for (name, part) in &self.headers {
            let Some(text) = text_of(part.value(rendered)) else { continue };
            let mut value = HeaderValue::from_str(&text).map_err(|_| {
                format!("{label}: header `{name}` rendered a line break or control character, which cannot be sent")
            })?;
            value.set_sensitive(true);
            headers.insert(name.clone(), value);
        }
        let body = match &self.body {
            Body::None => None,
            Body::Json(shape) => {
                if !headers.contains_key(CONTENT_TYPE) {
                    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
                }
                let json = serde_json::to_vec(&shape.value(rendered))
                    .map_err(|err| format!("{label}: the JSON body cannot be written: {err}"))?;
                Some(json)
            }
            Body::Text(part) => Some(text_of(part.value(rendered)).unwrap_or_default().into_bytes()),
        };
        let mut request = reqwest::Request::new(self.method.clone(), url);
        *request.headers_mut() = headers;
        *request.body_mut() = body.map(reqwest::Body::from);
        Ok((request, label))
    }

    /// Sends `request`, again while `retry` allows, and reads the answer.
    async fn exchange(&self, request: reqwest::Request, label: &str) -> Result<Answer, String> {
        let retry = self.api.retry.as_ref().filter(|_| IDEMPOTENT.contains(&self.method.as_str()));
        let attempts = retry.map_or(1, |retry| retry.attempts);
        let mut attempt = 1;
        loop {
            let last = attempt >= attempts;
            let sent = self.api.client.execute(clone_request(&request)).await;
            let wait = match (&sent, retry) {
                (_, None) => None,
                _ if last => None,
                (Ok(response), Some(retry)) if retry.on.contains(&response.status().as_u16()) => {
                    match retry_after(response.headers()) {
                        Some(wait) if wait > MAX_RETRY_WAIT => None,
                        Some(wait) => Some(wait),
                        None => Some(backoff(retry.backoff, attempt)),
                    }
                }
                (Err(err), Some(retry)) if err.is_connect() => Some(backoff(retry.backoff, attempt)),
                _ => None,
            };
            match (sent, wait) {
                (Ok(response), None) => return Answer::read(response, self.max_bytes, label).await,
                (Err(err), None) => return Err(format!("{label}: {}", describe(&err, &self.api.base))),
                (Ok(response), Some(wait)) => {
                    tracing::debug!(api = %self.api.name, method = %self.method, status = response.status().as_u16(), attempt, "retrying");
                    drop(response);
                    tokio::time::sleep(wait).await;
                }
                (Err(_), Some(wait)) => {
                    tracing::debug!(api = %self.api.name, method = %self.method, attempt, "could not connect; retrying");
                    tokio::time::sleep(wait).await;
                }
            }
            attempt += 1;
        }
    }
}

/// A copy of `request` for one attempt: it always clones, as the bodies
/// carte builds are bytes or none.
fn clone_request(request: &reqwest::Request) -> reqwest::Request {
    request.try_clone().unwrap_or_else(|| reqwest::Request::new(request.method().clone(), request.url().clone()))
}

/// The wait before attempt `attempt + 1`: `first`, doubled each time, at most [`MAX_RETRY_WAIT`].
fn backoff(first: Duration, attempt: u32) -> Duration {
    first.saturating_mul(1 << attempt.saturating_sub(1).min(16)).min(MAX_RETRY_WAIT)
}

/// A `Retry-After` in seconds (an HTTP date is not read: the backoff applies).
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let text = headers.get(RETRY_AFTER)?.to_str().ok()?;
    text.trim().parse::<u64>().ok().map(Duration::from_secs)
}

/// What went wrong, for a person: no URL (its query may hold a secret).
fn describe(err: &reqwest::Error, base: &Url) -> String {
    let place = match (base.host_str(), base.port_or_known_default()) {
        (Some(host), Some(port)) => format!("{host}:{port}"),
        _ => base.origin().ascii_serialization(),
    };
    if err.is_connect() {
        format!("could not connect to {place}: {}", innermost(err))
    } else if err.is_timeout() {
        "the request timed out".to_owned()
    } else {
        format!("the exchange with {place} failed: {}", innermost(err))
    }
}

/// The innermost cause of `err` (an OS error rather than "error sending request").
fn innermost(err: &(dyn std::error::Error + 'static)) -> String {
    let mut current = err;
    while let Some(source) = current.source() {
        current = source;
    }
    current.to_string()
}

/// `404 Not Found`.
fn show_status(status: StatusCode) -> String {
    match status.canonical_reason() {
        Some(reason) => format!("{} {reason}", status.as_u16()),
        None => status.as_u16().to_string(),
    }
}

/// The start of a non-OK answer's body, for its error result.
fn error_body(body: &[u8]) -> String {
    if body.is_empty() {
        return String::new();
    }
    let cut = &body[..body.len().min(ERROR_BODY_BYTES)];
    let text = String::from_utf8_lossy(cut);
    let more = if body.len() > ERROR_BODY_BYTES { " […]" } else { "" };
    format!(": {}{more}", text.trim_end())
}

/// An answer, read.
struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: Vec<u8>,
    truncated: bool,
}

impl Answer {
    /// Reads `response`, at most `max_bytes` of its body.
    async fn read(mut response: reqwest::Response, max_bytes: usize, label: &str) -> Result<Answer, String> {
        let status = response.status();
        let headers = std::mem::take(response.headers_mut());
        let mut body = Vec::new();
        let mut truncated = false;
        loop {
            let chunk = response
                .chunk()
                .await
                .map_err(|err| format!("{label}: the answer could not be read: {}", innermost(&err)))?;
            let Some(chunk) = chunk else { break };
            let room = max_bytes - body.len();
            if chunk.len() > room {
                body.extend_from_slice(&chunk[..room]);
                truncated = true;
                break; // dropping the response closes the connection
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Answer { status, headers, body, truncated })
    }

    /// What the result template sees: `status`, `headers`, then `body` and
    /// `json`, the last being the effect's value (`json` for a JSON answer).
    fn output(self, max_bytes: usize) -> Output {
        let is_json = self.headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).is_some_and(is_json_type);
        let json = if is_json && !self.truncated { serde_json::from_slice(&self.body).ok() } else { None };
        let mut headers = Map::new();
        for (name, value) in &self.headers {
            let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
            match headers.get_mut(name.as_str()) {
                Some(Value::String(previous)) => {
                    previous.push_str(", ");
                    previous.push_str(&value);
                }
                _ => {
                    headers.insert(name.as_str().to_owned(), Value::String(value));
                }
            }
        }
        let notice = self.truncated.then(|| {
            format!(
                "[carte: the answer was longer than {max_bytes} bytes (`maxBytes`); this result was made from its first {max_bytes} bytes only]"
            )
        });
        let body = ("body".to_owned(), Value::String(String::from_utf8_lossy(&self.body).into_owned()));
        let status = ("status".to_owned(), Value::from(self.status.as_u16()));
        let headers = ("headers".to_owned(), Value::Object(headers));
        let variables = match json {
            Some(json) => vec![status, headers, body, ("json".to_owned(), json)],
            None => vec![status, headers, ("json".to_owned(), Value::Null), body],
        };
        Output { variables, notice, changed: None }
    }
}

/// Whether a `Content-Type` is JSON (`application/json`, `…+json`).
fn is_json_type(content_type: &str) -> bool {
    let media = content_type.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    media == "application/json" || media.ends_with("+json")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base(text: &str) -> Url {
        base_url(text).unwrap_or_else(|(message, _)| panic!("{message}"))
    }

    #[test]
    fn the_path_is_appended_to_the_base_path() {
        let url = join_path(&base("https://api.example.com/v1/"), "/users/7").map(String::from);
        assert_eq!(url.as_deref(), Ok("https://api.example.com/v1/users/7"));
        let url = join_path(&base("http://127.0.0.1:8080"), "/a%2F..%2Fb/c").map(String::from);
        assert_eq!(url.as_deref(), Ok("http://127.0.0.1:8080/a%2F..%2Fb/c"), "an encoded `/` stays in its segment");
    }

    #[test]
    fn dot_segments_cannot_leave_the_base() {
        let api = base("https://api.example.com/v1");
        for path in ["/..", "/../admin", "/x/%2e%2E/y", "/./a", "/a/.%2E"] {
            let err = join_path(&api, path).map(String::from);
            assert!(err.as_ref().is_err_and(|e| e.starts_with("path left the api")), "{path}: {err:?}");
        }
        assert!(join_path(&api, "/files/...txt").is_ok(), "dots inside a segment are a name");
        assert!(join_path(&api, "/a\\..\\b").is_ok_and(|url| url.path().starts_with("/v1/")));
    }

    #[test]
    fn base_urls_are_http_with_a_host() {
        assert!(base_url("ftp://example.com").is_err());
        assert!(base_url("http://").is_err());
        assert!(base_url("api.example.com").is_err());
        assert!(base_url("https://user:pw@example.com").is_err());
        assert!(base_url("https://example.com/v1?key=1").is_ok());
    }

    #[test]
    fn query_and_header_values_are_text_and_empty_ones_are_left_out() {
        assert_eq!(text_of(&Value::Null), None);
        assert_eq!(text_of(&Value::String(String::new())), None);
        assert_eq!(text_of(&serde_json::json!(20)).as_deref(), Some("20"));
        assert_eq!(text_of(&serde_json::json!(true)).as_deref(), Some("true"));
        assert_eq!(text_of(&serde_json::json!("a b")).as_deref(), Some("a b"));
    }

    #[test]
    fn marks_are_found_outside_template_tags_only() {
        assert_eq!(outside_tags("/a/{{ x ~ '?' }}/b", &['?', '#']), None);
        assert_eq!(outside_tags("/a{# c #}/b?q=1", &['?', '#']), Some((11, '?')));
        assert_eq!(outside_tags("/a#frag", &['?', '#']), Some((2, '#')));
        assert_eq!(outside_tags("/a/{{ x", &['?']), None);
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let first = Duration::from_millis(200);
        assert_eq!(backoff(first, 1), first);
        assert_eq!(backoff(first, 3), Duration::from_millis(800));
        assert_eq!(backoff(first, 40), MAX_RETRY_WAIT);
    }

    #[test]
    fn json_types_are_recognised() {
        assert!(is_json_type("application/json; charset=utf-8"));
        assert!(is_json_type("application/problem+json"));
        assert!(!is_json_type("text/plain"));
    }

    #[test]
    fn an_error_body_is_cut() {
        let long = vec![b'x'; ERROR_BODY_BYTES + 10];
        let shown = error_body(&long);
        assert!(shown.ends_with(" […]") && shown.len() < ERROR_BODY_BYTES + 10, "{}", shown.len());
        assert_eq!(error_body(b""), "");
    }
}
