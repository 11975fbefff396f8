//! An api's `auth: { exchange }`: carte acts as the caller upstream. The
//! caller's access token (the one carte verified, `serve --oauth-issuer`)
//! is exchanged at the api's authorization server for a token meant for
//! the api (RFC 8693), which goes out as `Authorization: Bearer …`; a call
//! that carries no access token fails before anything is sent.
//!
//! Exchanged tokens are kept per subject token (its SHA-256, never the
//! text) until 30 s before they expire, and never past the subject token's
//! own `exp`; an answer without `expires_in` serves its call only.
//! Concurrent calls with one subject token wait for one exchange. At most
//! [`MAX_CACHED`] are kept per api, and the cache stays across reloads
//! while the exchange is configured the same. Neither token, nor the client
//! secret, is ever logged or shown: a refusal says what the authorization
//! server said (`error`, `error_description`), with both tokens hidden.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderValue};
use schemars::JsonSchema;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use url::Url;

use crate::diag::innermost;

/// The most exchanged tokens one api keeps.
pub const MAX_CACHED: usize = 10_000;
/// An exchanged token is not reused in the last this-much of its life.
const MARGIN: Duration = Duration::from_secs(30);
/// The largest answer read from a token endpoint.
const MAX_ANSWER_BYTES: usize = 64 * 1024;
/// How much of a refusal's `error_description` is shown.
const MAX_DESCRIPTION_BYTES: usize = 300;

const GRANT_TYPE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
const ACCESS_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:access_token";

/// How carte authenticates to an api as the caller.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "api auth")]
pub struct AuthSpec {
    /// Exchanges the caller's access token (RFC 8693) for one meant for this api, per call;
    /// needs `serve --oauth-issuer`, which verifies the caller's token first.
    pub exchange: ExchangeSpec,
}

/// Where and how the caller's token is exchanged.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "token exchange")]
pub struct ExchangeSpec {
    /// The authorization server's token endpoint, such as `https://auth.example.com/oauth/token`.
    #[serde(rename = "tokenUrl")]
    pub token_url: String,
    /// Who the exchanged token is for (the `audience` of the request), such as `orders`.
    pub audience: String,
    /// The scopes asked for, space-separated (default: what the authorization server gives).
    #[serde(default)]
    pub scope: Option<String>,
    /// carte's client id at the authorization server.
    #[serde(default, rename = "clientId")]
    pub client_id: Option<String>,
    /// Its secret (write `${VAR}`: it is never logged); sent with HTTP Basic authentication.
    #[serde(default, rename = "clientSecret")]
    pub client_secret: Option<String>,
}

/// The caller's access token as carte verified it: never logged or shown
/// (its `Debug` says only that it is there).
#[derive(Clone)]
pub struct AccessToken {
    text: Arc<str>,
    /// Its `exp`, in seconds since the epoch.
    expires: Option<u64>,
}

impl AccessToken {
    /// The token `text`, which expires at `expires` (its `exp` claim).
    pub fn new(text: &str, expires: Option<u64>) -> AccessToken {
        AccessToken { text: text.into(), expires }
    }
}

impl std::fmt::Debug for AccessToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AccessToken(…)")
    }
}

/// A checked `auth: { exchange }`, with its cache.
pub struct TokenExchange {
    spec: ExchangeSpec,
    url: Url,
    cache: Arc<Mutex<Cache>>,
}

/// Exchanged tokens by the SHA-256 of their subject token.
#[derive(Default)]
struct Cache {
    tokens: HashMap<[u8; 32], Cached>,
    /// The subject tokens being exchanged now, each with the turn its
    /// concurrent calls take: one exchange, the others then find it kept.
    exchanging: HashMap<[u8; 32], Arc<tokio::sync::Mutex<()>>>,
}

/// A call's place among those exchanging one subject token; the last to
/// leave (also by cancellation) forgets the entry.
struct Exchanging<'a> {
    owner: &'a TokenExchange,
    key: [u8; 32],
    turn: Arc<tokio::sync::Mutex<()>>,
}

impl Drop for Exchanging<'_> {
    fn drop(&mut self) {
        let mut cache = self.owner.lock();
        // Held by the map and by this call only: nobody else waits.
        if Arc::strong_count(&self.turn) == 2 {
            cache.exchanging.remove(&self.key);
        }
    }
}

struct Cached {
    authorization: HeaderValue,
    until: Instant,
}

/// Why no token could be had for a call.
#[derive(Debug, PartialEq)]
pub struct Refused(pub String);

/// What a token endpoint answers.
#[derive(Deserialize)]
struct Issued {
    access_token: String,
    #[serde(default)]
    token_type: Option<String>,
    #[serde(default)]
    expires_in: Option<u64>,
}

/// What it answers when it refuses (RFC 6749 §5.2).
#[derive(Deserialize)]
struct Refusal {
    error: String,
    #[serde(default)]
    error_description: Option<String>,
}

impl TokenExchange {
    /// Checks `spec`: the exchange (with `previous`'s cache if configured
    /// the same) and what to warn about, or what is wrong; pointers are
    /// below `/auth/exchange`.
    pub(super) fn check(
        spec: &ExchangeSpec,
        previous: Option<&TokenExchange>,
    ) -> Result<(TokenExchange, Option<Problem>), Problem> {
        let url = token_url(&spec.token_url)?;
        if spec.audience.trim().is_empty() {
            return Err(Problem {
                pointer: "/audience",
                message: "`audience` is empty".to_owned(),
                hint:
                    "name whom the exchanged token is for, as the authorization server knows the api, such as `orders`"
                        .to_owned(),
            });
        }
        if spec.scope.as_deref().is_some_and(|scope| scope.trim().is_empty()) {
            return Err(Problem {
                pointer: "/scope",
                message: "`scope` is empty".to_owned(),
                hint: "list the scopes to ask for, space-separated, or leave `scope` out".to_owned(),
            });
        }
        if spec.client_secret.is_some() && spec.client_id.as_deref().is_none_or(str::is_empty) {
            return Err(Problem {
                pointer: "/clientSecret",
                message: "`clientSecret` without a `clientId`".to_owned(),
                hint: "give carte's `clientId` at the authorization server too: the two are sent together".to_owned(),
            });
        }
        let warning = (url.scheme() == "http" && !is_loopback(&url)).then(|| Problem {
            pointer: "/tokenUrl",
            message: "`tokenUrl` is plain `http:`: the caller's token and the client secret would cross the network unencrypted".to_owned(),
            hint: "use the authorization server's `https:` address".to_owned(),
        });
        let cache = previous
            .filter(|previous| previous.spec == *spec)
            .map_or_else(Default::default, |previous| Arc::clone(&previous.cache));
        Ok((TokenExchange { spec: spec.clone(), url, cache }, warning))
    }

    /// The `Authorization` header for a call of `caller` through `client`
    /// (api `api`): from the cache, or exchanged now.
    pub(super) async fn authorization(
        &self,
        client: &reqwest::Client,
        api: &str,
        caller: Option<&AccessToken>,
    ) -> Result<HeaderValue, Refused> {
        let Some(subject) = caller else {
            return Err(Refused(format!(
                "api `{api}` acts as the caller (`auth.exchange`), but this call carries no access token: serve it over HTTP with `--oauth-issuer`"
            )));
        };
        let key: [u8; 32] = Sha256::digest(subject.text.as_bytes()).into();
        if let Some(kept) = self.kept(&key) {
            return Ok(kept);
        }
        // Concurrent calls of one caller wait for one exchange.
        let turn = Arc::clone(self.lock().exchanging.entry(key).or_default());
        let place = Exchanging { owner: self, key, turn };
        let _turn = place.turn.lock().await;
        if let Some(kept) = self.kept(&key) {
            return Ok(kept);
        }
        let now = Instant::now();
        let (authorization, lifetime) = self.exchange(client, api, subject).await?;
        if let Some(lifetime) = lifetime.and_then(|lifetime| lifetime.checked_sub(MARGIN)) {
            let until = now + lifetime.min(subject.remaining());
            self.lock().insert(key, Cached { authorization: authorization.clone(), until }, now);
        }
        Ok(authorization)
    }

    /// The kept token for the subject token `key`, while it is good.
    fn kept(&self, key: &[u8; 32]) -> Option<HeaderValue> {
        let now = Instant::now();
        self.lock().tokens.get(key).filter(|cached| cached.until > now).map(|cached| cached.authorization.clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// One exchange at the token endpoint: the header and how long the
    /// token lives (if the answer said).
    async fn exchange(
        &self,
        client: &reqwest::Client,
        api: &str,
        subject: &AccessToken,
    ) -> Result<(HeaderValue, Option<Duration>), Refused> {
        let place = format!("api `{api}`: the token exchange at {}", shown(&self.url));
        let mut form = vec![
            ("grant_type", GRANT_TYPE),
            ("subject_token", &*subject.text),
            ("subject_token_type", ACCESS_TOKEN_TYPE),
            ("requested_token_type", ACCESS_TOKEN_TYPE),
            ("audience", &self.spec.audience),
        ];
        form.extend(self.spec.scope.as_deref().map(|scope| ("scope", scope)));
        let mut request = client
            .post(self.url.clone())
            .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(ACCEPT, "application/json");
        match (&self.spec.client_id, &self.spec.client_secret) {
            (Some(id), Some(secret)) => {
                // RFC 6749 §2.3.1: each form-encoded, then Basic.
                let encode = |text: &str| url::form_urlencoded::byte_serialize(text.as_bytes()).collect::<String>();
                request = request.basic_auth(encode(id), Some(encode(secret)));
            }
            (Some(id), None) => form.push(("client_id", id)),
            _ => {}
        }
        let body = url::form_urlencoded::Serializer::new(String::new()).extend_pairs(form).finish();
        let response = request
            .body(body)
            .send()
            .await
            .map_err(|err| Refused(format!("{place} got no answer: {}", innermost(&err))))?;
        let status = response.status();
        let body = read_limited(response)
            .await
            .map_err(|err| Refused(format!("{place}: the answer could not be read: {err}")))?;
        let hide = |text: &str| hide_tokens(text, &subject.text);
        if !status.is_success() {
            let said = match serde_json::from_slice::<Refusal>(&body) {
                Ok(refusal) => match refusal.error_description {
                    Some(description) => {
                        let (description, more) = crate::secret::excerpt(
                            &hide(&description),
                            MAX_DESCRIPTION_BYTES,
                            crate::secret::Keep::Start,
                            crate::secret::Cut::default(),
                        );
                        format!(": {} ({description}{})", hide(&refusal.error), if more { " […]" } else { "" })
                    }
                    None => format!(": {}", hide(&refusal.error)),
                },
                Err(_) => String::new(),
            };
            return Err(Refused(format!("{place} was refused ({}){said}", super::exchange::show_status(status))));
        }
        let issued: Issued = serde_json::from_slice(&body)
            .map_err(|_| Refused(format!("{place} answered without an `access_token`")))?;
        let kind = issued.token_type.as_deref().unwrap_or("Bearer");
        if !kind.eq_ignore_ascii_case("bearer") && !kind.eq_ignore_ascii_case("n_a") {
            return Err(Refused(format!(
                "{place} issued a `{}` token; carte sends bearer tokens",
                hide(kind).chars().take(40).collect::<String>()
            )));
        }
        let mut authorization = HeaderValue::from_str(&format!("Bearer {}", issued.access_token))
            .map_err(|_| Refused(format!("{place} issued a token that cannot be sent in a header")))?;
        authorization.set_sensitive(true);
        Ok((authorization, issued.expires_in.map(Duration::from_secs)))
    }
}

impl AccessToken {
    /// How long it is still valid (a token without `exp` is not bounded here).
    fn remaining(&self) -> Duration {
        let Some(expires) = self.expires else { return Duration::MAX };
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
        Duration::from_secs(expires.saturating_sub(now))
    }
}

impl Cache {
    /// Keeps `cached` under `key`; a full cache first forgets what expired,
    /// then, if still full, the token that expires first.
    fn insert(&mut self, key: [u8; 32], cached: Cached, now: Instant) {
        if self.tokens.len() >= MAX_CACHED && !self.tokens.contains_key(&key) {
            self.tokens.retain(|_, cached| cached.until > now);
            if self.tokens.len() >= MAX_CACHED
                && let Some(first) = self.tokens.iter().min_by_key(|(_, cached)| cached.until).map(|(key, _)| *key)
            {
                self.tokens.remove(&first);
            }
        }
        self.tokens.insert(key, cached);
    }
}

/// A check's complaint about `auth.exchange`, below it.
#[derive(Debug)]
pub(super) struct Problem {
    pub(super) pointer: &'static str,
    pub(super) message: String,
    pub(super) hint: String,
}

/// Reads `tokenUrl`: http(s), a host, no credentials.
fn token_url(text: &str) -> Result<Url, Problem> {
    let problem = |message: String| Problem {
        pointer: "/tokenUrl",
        message,
        hint: "write the authorization server's token endpoint, such as `https://auth.example.com/oauth/token`"
            .to_owned(),
    };
    let url = Url::parse(text.trim()).map_err(|err| match err {
        url::ParseError::RelativeUrlWithoutBase => Problem {
            pointer: "/tokenUrl",
            message: "`tokenUrl` has no scheme".to_owned(),
            hint: format!("write the scheme before the host: `https://{}`", text.trim()),
        },
        err => problem(format!("`tokenUrl` is not a URL ({err})")),
    })?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none_or(str::is_empty) {
        return Err(problem("`tokenUrl` must be an `https://` address with a host".to_owned()));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(Problem {
            pointer: "/tokenUrl",
            message: "`tokenUrl` has a user name or password in it".to_owned(),
            hint: "give carte's credentials as `clientId` and `clientSecret`".to_owned(),
        });
    }
    Ok(url)
}

/// Whether `url`'s host is this machine.
fn is_loopback(url: &Url) -> bool {
    match url.host() {
        Some(url::Host::Domain(name)) => name.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    }
}

/// The token endpoint for messages: its origin and path, never a query.
fn shown(url: &Url) -> String {
    format!("{}{}", url.origin().ascii_serialization(), url.path())
}

/// `text` with the caller's token hidden (an authorization server may echo
/// it), then the catalog's secrets.
fn hide_tokens(text: &str, subject: &str) -> String {
    let text = if subject.is_empty() { text.to_owned() } else { text.replace(subject, "[the caller's token]") };
    crate::secret::redact(&text).into_owned()
}

/// At most [`MAX_ANSWER_BYTES`] of `response`'s body.
async fn read_limited(mut response: reqwest::Response) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|err| innermost(&err).to_string())? {
        if body.len() + chunk.len() > MAX_ANSWER_BYTES {
            return Err(format!("it is longer than {} KiB", MAX_ANSWER_BYTES / 1024));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(url: &str) -> ExchangeSpec {
        ExchangeSpec {
            token_url: url.to_owned(),
            audience: "orders".to_owned(),
            scope: None,
            client_id: Some("carte".to_owned()),
            client_secret: Some("s3cret-value".to_owned()),
        }
    }

    #[test]
    fn token_urls_are_checked_and_plain_http_is_warned_off_this_machine() {
        assert!(TokenExchange::check(&spec("https://auth.example.com/token"), None).is_ok_and(|(_, w)| w.is_none()));
        assert!(TokenExchange::check(&spec("http://127.0.0.1:9/token"), None).is_ok_and(|(_, w)| w.is_none()));
        let warned = TokenExchange::check(&spec("http://auth.example.com/token"), None);
        assert!(warned.is_ok_and(|(_, w)| w.is_some_and(|w| w.pointer == "/tokenUrl")));
        for bad in ["auth/token", "ftp://auth/token", "https://u:p@auth/token"] {
            let err = TokenExchange::check(&spec(bad), None).err();
            assert_eq!(err.map(|p| p.pointer), Some("/tokenUrl"), "{bad}");
        }
        let mut secret_alone = spec("https://auth/token");
        secret_alone.client_id = None;
        assert_eq!(TokenExchange::check(&secret_alone, None).err().map(|p| p.pointer), Some("/clientSecret"));
    }

    #[test]
    fn the_cache_survives_a_reload_only_while_the_exchange_is_the_same() {
        let (first, _) = TokenExchange::check(&spec("https://auth/token"), None).unwrap();
        let (same, _) = TokenExchange::check(&spec("https://auth/token"), Some(&first)).unwrap();
        assert!(std::sync::Arc::ptr_eq(&first.cache, &same.cache));
        let mut other = spec("https://auth/token");
        other.audience = "billing".to_owned();
        let (other, _) = TokenExchange::check(&other, Some(&first)).unwrap();
        assert!(!std::sync::Arc::ptr_eq(&first.cache, &other.cache));
    }

    #[test]
    fn a_full_cache_forgets_the_token_that_expires_first() {
        let mut cache = Cache::default();
        let now = Instant::now();
        let value = HeaderValue::from_static("Bearer x");
        for idx in 0..MAX_CACHED {
            let mut key = [0u8; 32];
            key[..8].copy_from_slice(&(idx as u64).to_le_bytes());
            let until = now + Duration::from_secs(100 + idx as u64);
            cache.insert(key, Cached { authorization: value.clone(), until }, now);
        }
        cache.insert([9; 32], Cached { authorization: value, until: now + Duration::from_secs(1) }, now);
        assert_eq!(cache.tokens.len(), MAX_CACHED);
        assert!(!cache.tokens.contains_key(&[0u8; 32]), "the first to expire went");
    }

    #[test]
    fn the_callers_token_is_hidden_in_what_is_shown() {
        assert_eq!(hide_tokens("bad token eyJabc.def for you", "eyJabc.def"), "bad token [the caller's token] for you");
        assert_eq!(format!("{:?}", AccessToken::new("eyJabc.def", None)), "AccessToken(…)");
    }
}
