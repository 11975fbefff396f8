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
//!
//! Here: the `http` spec and each tool's check; `apis.rs`: `apis:` (its
//! spec, checks and clients); `exchange.rs`: building, sending and reading
//! one request; `token_exchange.rs`: an api's `auth: { exchange }`, the
//! caller's token exchanged for the api's (RFC 8693).

use std::sync::Arc;
use std::time::Duration;

use indexmap::IndexMap;
use reqwest::Method;
use reqwest::header::{CONTENT_TYPE, HeaderName};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};
use url::Url;

mod apis;
mod exchange;
mod token_exchange;

use apis::parse_timeout;
pub use apis::{Api, ApiSpec, Apis, DeclaredApi, RetrySpec};
pub use exchange::StatedAnswer;
use exchange::{error_body, show_status};
pub use token_exchange::{AccessToken, AuthSpec, ExchangeSpec};

use super::{Call, Check, EffectError, Failure, Kind, Output, Reads, Sections, Template};
use crate::diag::{Diagnostic, did_you_mean, escape_pointer};
use crate::duration::{DurationSpec, show_duration};
use crate::telemetry;
use tracing::Instrument as _;

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
    const READS: Reads = Reads {
        does: "calls an api",
        when: "its request is sent",
        instead: "send the request",
        output: "the answer",
        value: "its `json`",
    };
    const VALUE_MIME: &'static str = "application/json";

    type Spec = HttpSpec;
    type ReadSpec = HttpSpec;
    type Read = Http;

    fn read_uses(http: &Http) -> &[String] {
        http.arguments_used()
    }

    /// A resource is read, so its request is a GET.
    fn check_read(spec: &HttpSpec, sections: &Sections, check: &mut Check<'_>) -> Option<Http> {
        if let Some(method) = spec.method.as_deref().filter(|method| *method != "GET") {
            check
                .error("http-method", "/run/http/method", format!("a resource is read with GET, not `{method}`"))
                .hint = Some("leave `method` out (or write `GET`); change things with a tool's `http`".to_owned());
            return None;
        }
        let http = Http::check(spec, sections, check)?;
        if http.api.exchange.is_some() {
            check
                .error(
                    "http-auth",
                    "/run/http/api",
                    format!(
                        "api `{}` acts as the caller (`auth.exchange`), but a resource is the same for every reader",
                        spec.api
                    ),
                )
                .hint = Some("read it with a tool, whose call carries its caller's token".to_owned());
            return None;
        }
        Some(http)
    }

    fn read<'a>(
        http: &'a Http,
        call: &'a dyn Call,
        variables: Map<String, Value>,
    ) -> impl Future<Output = Result<Output, String>> + Send + 'a {
        super::run_as_read(http, call, variables)
    }

    fn check(spec: &HttpSpec, sections: &Sections, check: &mut Check<'_>) -> Option<Http> {
        let apis = &sections.apis.block;
        let api = match apis.entries.get(&spec.api) {
            Some(api) => Some(api.clone()),
            None if sections.apis.may_declare(&spec.api) => None,
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
            if name == reqwest::header::AUTHORIZATION
                && let Some(api) = api.as_ref().filter(|api| api.exchange.is_some())
            {
                check
                    .error(
                        "http-header",
                        &pointer,
                        format!("api `{}` sends the caller's exchanged token as `{key}`", api.name),
                    )
                    .hint =
                    Some("the api's `auth: { exchange }` sets this header on every call: remove it here".to_owned());
                ok = false;
                continue;
            }
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
        let rendered = call.render(&self.templates).await.map_err(Failure::render)?;
        let (mut request, label) = self.request(&rendered).map_err(Failure::render)?;
        let span = self.client_span(&request);
        telemetry::inject(&span, request.headers_mut());
        let exchange = async {
            if let Some(exchange) = &self.api.exchange {
                let authorization = exchange
                    .authorization(&self.api.client, &self.api.name, call.access_token())
                    .await
                    .map_err(|refused| (EffectError::TokenExchange, refused.0))?;
                request.headers_mut().insert(reqwest::header::AUTHORIZATION, authorization);
            }
            self.exchange(request, &label).await.map_err(|err| (EffectError::NoAnswer, err))
        };
        let answer = match call.stated_answer() {
            Some(stated) => stated.answer(self.max_bytes),
            None => match tokio::time::timeout(self.timeout, exchange.instrument(span.clone())).await {
                Ok(answer) => answer.map_err(|(error, reason)| Failure::of(&span, error, reason))?,
                Err(_) => {
                    let reason = format!(
                        "{label}: no answer within {} (the {} `timeout`)",
                        show_duration(self.timeout),
                        self.timeout_of
                    );
                    return Err(Failure::of(&span, EffectError::Timeout, reason));
                }
            },
        };
        let ok = match &self.ok_status {
            Some(list) => list.contains(&answer.status.as_u16()),
            None => answer.status.is_success(),
        };
        telemetry::attribute(&span, "http.response.status_code", i64::from(answer.status.as_u16()));
        if !ok {
            let reason = format!(
                "{label} answered {}{}",
                show_status(answer.status),
                error_body(&answer.body, answer.truncated)
            );
            return Err(Failure::of(&span, EffectError::Status(answer.status.as_u16()), reason));
        }
        let output = answer.output(self.max_bytes);
        finish(output).await.map_err(|reason| Failure::Refused { reason, undone: None })
    }
}

impl Http {
    /// The CLIENT span of one exchange (disabled while traces are off):
    /// `http.request.method` and `url.full` without the query, which may
    /// carry a key; its trace context goes upstream in `traceparent`.
    fn client_span(&self, request: &reqwest::Request) -> tracing::Span {
        let span = tracing::info_span!(
            target: telemetry::TARGET,
            "http",
            otel.name = %self.method,
            otel.kind = "client",
            http.request.method = %self.method,
            url.full = tracing::field::Empty,
            server.address = tracing::field::Empty,
        );
        if !span.is_disabled() {
            let url = request.url();
            let full = format!("{}{}", url.origin().ascii_serialization(), url.path());
            span.record("url.full", crate::secret::redact(&full).as_ref());
            if let Some(host) = url.host_str() {
                span.record("server.address", host);
            }
        }
        span
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

#[cfg(test)]
mod tests;
