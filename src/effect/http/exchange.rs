//! One call's exchange: the URL (the base's origin and path, then the
//! tool's path and query), headers and body from the rendered templates;
//! sending with retries (idempotent methods, listed statuses or connect
//! errors, exponential backoff or `Retry-After`, both capped); reading the
//! answer as a stream up to `maxBytes`; and what the result template sees.
//! Errors name the method, api and path, never the query or headers.

use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderValue, RETRY_AFTER};
use serde_json::{Map, Value};
use url::Url;

use super::{Body, ERROR_BODY_BYTES, Http, IDEMPOTENT, MAX_RETRY_WAIT, text_of};
use crate::diag::innermost;
use crate::effect::Output;

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
    pub(super) fn request(&self, rendered: &[Value]) -> Result<(reqwest::Request, String), String> {
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
    pub(super) async fn exchange(&self, request: reqwest::Request, label: &str) -> Result<Answer, String> {
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
    crate::duration::doubling(first, attempt, MAX_RETRY_WAIT)
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

/// `404 Not Found`.
pub(super) fn show_status(status: StatusCode) -> String {
    match status.canonical_reason() {
        Some(reason) => format!("{} {reason}", status.as_u16()),
        None => status.as_u16().to_string(),
    }
}

/// The start of a non-OK answer's body, for its error result: secrets
/// hidden before it is cut (an upstream may echo what it was sent, a token
/// included), also at the end of a body read only up to `maxBytes`
/// (`truncated`).
pub(super) fn error_body(body: &[u8], truncated: bool) -> String {
    if body.is_empty() {
        return String::new();
    }
    let text = String::from_utf8_lossy(body);
    let cut = crate::secret::Cut { after: truncated, ..Default::default() };
    let (shown, more) = crate::secret::excerpt(&text, ERROR_BODY_BYTES, crate::secret::Keep::Start, cut);
    let more = if more || truncated { " […]" } else { "" };
    format!(": {}{more}", shown.trim_end())
}

/// An answer, read.
/// An answer stated instead of asked for (an example's `upstream`): what
/// the api would have said.
#[derive(Debug, Clone, PartialEq)]
pub struct StatedAnswer {
    /// Its status.
    pub status: u16,
    /// Its headers, name → value.
    pub headers: Vec<(String, String)>,
    /// Its body.
    pub body: Vec<u8>,
}

impl StatedAnswer {
    /// The answer, as if read from the api: cut at `max_bytes`; a header
    /// that cannot be one is left out.
    pub(super) fn answer(&self, max_bytes: usize) -> Answer {
        let mut headers = HeaderMap::new();
        for (name, value) in &self.headers {
            if let (Ok(name), Ok(value)) =
                (reqwest::header::HeaderName::from_bytes(name.as_bytes()), HeaderValue::from_str(value))
            {
                headers.append(name, value);
            }
        }
        let truncated = self.body.len() > max_bytes;
        let body = self.body[..self.body.len().min(max_bytes)].to_vec();
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::OK);
        Answer { status, headers, body, truncated }
    }
}

pub(super) struct Answer {
    pub(super) status: StatusCode,
    headers: HeaderMap,
    pub(super) body: Vec<u8>,
    pub(super) truncated: bool,
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
    pub(super) fn output(self, max_bytes: usize) -> Output {
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
        Url::parse(text).expect("a URL")
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
        let shown = error_body(&long, false);
        assert!(shown.ends_with(" […]") && shown.len() < ERROR_BODY_BYTES + 10, "{}", shown.len());
        assert_eq!(error_body(b"", false), "");
    }
}
