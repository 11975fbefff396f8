//! carte as an OAuth 2.1 resource server (`--oauth-issuer`): JWT access
//! tokens checked against the issuer's JWKS, the Protected Resource Metadata
//! of RFC 9728, and the answers MCP's authorization spec asks for (401 with
//! `resource_metadata`, 403 `insufficient_scope`).
//!
//! A token is accepted when its signature verifies with the JWKS key its
//! `kid` names (the algorithm comes from the key: RSA, EC P-256/P-384 or
//! Ed25519, never HMAC or `none`), `iss` is the issuer, `aud` holds the
//! audience, and `exp` (required) and `nbf` hold, with 60 s of leeway. The
//! JWKS is fetched at start (in the background: carte starts while the
//! issuer is down, and tokens are refused until it answers), and again when
//! a token names a key it does not hold, at most [`MAX_FETCHES`] times per
//! [`FETCH_WINDOW`] (the fetch at start included), so tokens with made-up
//! `kid`s cannot make carte hammer the issuer. Without `--oauth-jwks-url` the JWKS address comes
//! from the issuer's metadata (RFC 8414, then OpenID Connect discovery).
//!
//! A verified request carries a [`Caller`] in its extensions: the handler
//! reads its claims (templates' `auth`), its scopes (which tools it sees and
//! may call) and its owner (whose tasks it sees).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{Map, Value, json};
use url::Url;

/// The most JWKS fetches in any [`FETCH_WINDOW`].
pub const MAX_FETCHES: usize = 3;
/// See [`MAX_FETCHES`].
pub const FETCH_WINDOW: Duration = Duration::from_secs(60);
/// Clock skew allowed on `exp` and `nbf`.
const LEEWAY_SECONDS: u64 = 60;
/// The largest JWKS or metadata document carte reads.
const MAX_DOCUMENT_BYTES: usize = 256 * 1024;
/// The most keys a JWKS may give (the rest are ignored).
const MAX_KEYS: usize = 64;
/// How long one fetch from the issuer may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// How the resource server is configured (`serve --oauth-*`).
#[derive(Debug, Clone)]
pub struct OAuthOptions {
    /// The authorization server: tokens' `iss` must equal it.
    pub issuer: String,
    /// What tokens' `aud` must hold (default: the resource, `{public_url}/mcp`).
    pub audience: Option<String>,
    /// Where the issuer's keys are (default: discovered from the issuer).
    pub jwks_url: Option<String>,
    /// Where clients reach carte, e.g. `https://mcp.example.com`.
    pub public_url: String,
}

/// Who a verified token says the caller is.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The token's claims, as templates see them (`auth`).
    pub claims: Arc<Map<String, Value>>,
    /// The scopes it grants (`scope`, space-separated, or `scp`, a list).
    pub scopes: HashSet<String>,
    /// Whose tasks it may see: the issuer and subject, stable across token refreshes.
    pub owner: String,
    /// The token itself, for an api that exchanges it (never logged).
    pub token: crate::effect::http::AccessToken,
}

impl Caller {
    /// The scopes of `required` this caller lacks.
    pub fn missing<'a>(&self, required: &'a [String]) -> Vec<&'a str> {
        required.iter().filter(|scope| !self.scopes.contains(*scope)).map(String::as_str).collect()
    }
}

/// A verification key and the algorithms it may verify.
struct Key {
    key: DecodingKey,
    algorithms: Vec<Algorithm>,
}

/// The keys carte holds: by `kid`, and those without one.
#[derive(Default)]
struct Keys {
    by_kid: HashMap<String, Arc<Key>>,
    unnamed: Vec<Arc<Key>>,
}

/// Verifies access tokens and describes the protected resource.
pub struct Verifier {
    options: OAuthOptions,
    audience: String,
    client: reqwest::Client,
    keys: std::sync::RwLock<Arc<Keys>>,
    /// When the JWKS was fetched (or tried) in the last [`FETCH_WINDOW`],
    /// at most [`MAX_FETCHES`]; held while fetching, so one fetch runs at a time.
    fetched: tokio::sync::Mutex<VecDeque<Instant>>,
}

/// Why a token was refused (said to the client in `error_description`; never the token).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Invalid(pub String);

impl Verifier {
    /// A verifier for `options`; an error for an address that is not http(s).
    pub fn new(options: OAuthOptions) -> anyhow::Result<Verifier> {
        for (flag, value) in [("--oauth-issuer", Some(&options.issuer)), ("--public-url", Some(&options.public_url))]
            .into_iter()
            .chain([("--oauth-jwks-url", options.jwks_url.as_ref())])
        {
            if let Some(value) = value {
                let url = Url::parse(value).map_err(|err| anyhow::anyhow!("{flag} {value}: not a URL ({err})"))?;
                if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
                    anyhow::bail!("{flag} {value}: expected an http(s) address such as https://auth.example.com");
                }
            }
        }
        let resource = format!("{}/mcp", options.public_url.trim_end_matches('/'));
        let audience = options.audience.clone().unwrap_or(resource);
        // Fails only if a provider is installed already (an api's client), which is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
        // No redirects: the issuer's documents are read where configured or discovered.
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("carte/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(Verifier {
            options,
            audience,
            client,
            keys: std::sync::RwLock::default(),
            fetched: tokio::sync::Mutex::default(),
        })
    }

    /// Fetches the JWKS once (at start): a failure is logged, and tokens
    /// are refused until a later fetch succeeds.
    pub async fn prefetch(self: Arc<Self>) {
        let mut fetched = self.fetched.lock().await;
        self.refresh(&mut fetched).await;
    }

    /// The issuer's keys as last fetched.
    fn keys(&self) -> Arc<Keys> {
        Arc::clone(&crate::sync::read(&self.keys))
    }

    /// Fetches the JWKS and keeps its keys, noting the attempt in `fetched`.
    async fn refresh(&self, fetched: &mut VecDeque<Instant>) {
        fetched.push_back(Instant::now());
        match self.fetch_keys().await {
            Ok(keys) => {
                tracing::info!("OAuth: {} key(s) from the issuer's JWKS", keys.by_kid.len() + keys.unnamed.len());
                *crate::sync::write(&self.keys) = Arc::new(keys);
            }
            Err(err) => tracing::warn!("OAuth: could not fetch the issuer's JWKS: {err:#}"),
        }
    }

    async fn fetch_keys(&self) -> anyhow::Result<Keys> {
        let jwks_url = match &self.options.jwks_url {
            Some(url) => url.clone(),
            None => self.discover_jwks_url().await?,
        };
        let set: JwkSet = serde_json::from_value(self.get_json(&jwks_url).await?)
            .map_err(|err| anyhow::anyhow!("{jwks_url} is not a JWK set: {err}"))?;
        let mut keys = Keys::default();
        for jwk in set.keys.iter().take(MAX_KEYS) {
            let Some(key) = verification_key(jwk) else { continue };
            match &jwk.common.key_id {
                Some(kid) => {
                    keys.by_kid.insert(kid.clone(), Arc::new(key));
                }
                None => keys.unnamed.push(Arc::new(key)),
            }
        }
        Ok(keys)
    }

    /// The `jwks_uri` of the issuer's metadata: RFC 8414's address, then
    /// OpenID Connect's; the document must name the same issuer.
    async fn discover_jwks_url(&self) -> anyhow::Result<String> {
        let issuer = Url::parse(&self.options.issuer)?;
        let path = issuer.path().trim_end_matches('/');
        let mut rfc8414 = issuer.clone();
        rfc8414.set_path(&format!("/.well-known/oauth-authorization-server{path}"));
        let oidc = format!("{}/.well-known/openid-configuration", self.options.issuer.trim_end_matches('/'));
        let mut reasons = Vec::new();
        for address in [rfc8414.to_string(), oidc] {
            match self.get_json(&address).await {
                Ok(metadata) => {
                    let named = metadata.get("issuer").and_then(Value::as_str);
                    if named.map(|named| named.trim_end_matches('/')) != Some(self.options.issuer.trim_end_matches('/'))
                    {
                        reasons.push(format!("{address} names another issuer ({named:?})"));
                        continue;
                    }
                    match metadata.get("jwks_uri").and_then(Value::as_str) {
                        Some(jwks) => return Ok(jwks.to_owned()),
                        None => reasons.push(format!("{address} has no jwks_uri")),
                    }
                }
                Err(err) => reasons.push(format!("{err:#}")),
            }
        }
        anyhow::bail!("no issuer metadata with a jwks_uri (give --oauth-jwks-url): {}", reasons.join("; "))
    }

    /// GETs a JSON document, at most [`MAX_DOCUMENT_BYTES`], within [`FETCH_TIMEOUT`].
    async fn get_json(&self, address: &str) -> anyhow::Result<Value> {
        let read = async {
            let mut response = self.client.get(address).header(header::ACCEPT, "application/json").send().await?;
            if !response.status().is_success() {
                anyhow::bail!("{address} answered {}", response.status());
            }
            let mut body = Vec::new();
            while let Some(chunk) = response.chunk().await? {
                if body.len() + chunk.len() > MAX_DOCUMENT_BYTES {
                    anyhow::bail!("{address} answered more than {MAX_DOCUMENT_BYTES} bytes");
                }
                body.extend_from_slice(&chunk);
            }
            serde_json::from_slice(&body).map_err(|err| anyhow::anyhow!("{address} did not answer JSON: {err}"))
        };
        tokio::time::timeout(FETCH_TIMEOUT, read)
            .await
            .map_err(|_| anyhow::anyhow!("{address} did not answer in time"))?
    }

    /// The key for a token's `kid`, fetching the JWKS again if it is
    /// unknown and fewer than [`MAX_FETCHES`] were made in the last [`FETCH_WINDOW`].
    async fn key_for(&self, kid: Option<&str>) -> Result<Arc<Key>, Invalid> {
        let find = |keys: &Keys| match kid {
            Some(kid) => keys.by_kid.get(kid).cloned(),
            None if keys.by_kid.len() + keys.unnamed.len() == 1 => {
                keys.by_kid.values().chain(&keys.unnamed).next().cloned()
            }
            None => None,
        };
        if let Some(key) = find(&self.keys()) {
            return Ok(key);
        }
        {
            let mut fetched = self.fetched.lock().await;
            // Another request may have fetched while this one waited.
            if let Some(key) = find(&self.keys()) {
                return Ok(key);
            }
            while fetched.front().is_some_and(|at| at.elapsed() >= FETCH_WINDOW) {
                fetched.pop_front();
            }
            if fetched.len() < MAX_FETCHES {
                self.refresh(&mut fetched).await;
            }
        }
        find(&self.keys()).ok_or_else(|| match kid {
            Some(_) => Invalid("the token is signed with a key the issuer does not publish".to_owned()),
            None => Invalid("the token names no key (kid)".to_owned()),
        })
    }

    /// Verifies `token`: the caller it names, or why it is refused.
    pub async fn verify(&self, token: &str) -> Result<Caller, Invalid> {
        let header = jsonwebtoken::decode_header(token).map_err(|_| Invalid("the token is not a JWT".to_owned()))?;
        let key = self.key_for(header.kid.as_deref()).await?;
        if !key.algorithms.contains(&header.alg) {
            return Err(Invalid("the token's algorithm does not fit its key".to_owned()));
        }
        let mut validation = Validation::new(header.alg);
        validation.leeway = LEEWAY_SECONDS;
        validation.validate_nbf = true;
        validation.set_issuer(&[&self.options.issuer]);
        validation.set_audience(&[&self.audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        let data = jsonwebtoken::decode::<Map<String, Value>>(token, &key.key, &validation).map_err(|err| {
            use jsonwebtoken::errors::ErrorKind;
            Invalid(
                match err.kind() {
                    ErrorKind::ExpiredSignature => "the token has expired",
                    ErrorKind::ImmatureSignature => "the token is not valid yet (nbf)",
                    ErrorKind::InvalidAudience => "the token is not for this resource (aud)",
                    ErrorKind::InvalidIssuer => "the token is from another issuer (iss)",
                    ErrorKind::InvalidSignature => "the token's signature does not verify",
                    ErrorKind::MissingRequiredClaim(_) => "the token lacks exp, iss or aud",
                    _ => "the token is malformed",
                }
                .to_owned(),
            )
        })?;
        let claims = data.claims;
        let mut scopes: HashSet<String> = claims
            .get("scope")
            .and_then(Value::as_str)
            .map(|scope| scope.split(' ').filter(|s| !s.is_empty()).map(str::to_owned).collect())
            .unwrap_or_default();
        if let Some(Value::Array(scp)) = claims.get("scp") {
            scopes.extend(scp.iter().filter_map(Value::as_str).map(str::to_owned));
        }
        let subject = claims.get("sub").and_then(Value::as_str).unwrap_or_default();
        let owner = format!("oauth:{}:{subject}", self.options.issuer);
        let token = crate::effect::http::AccessToken::new(token, claims.get("exp").and_then(Value::as_u64));
        Ok(Caller { claims: Arc::new(claims), scopes, owner, token })
    }

    /// Where the metadata of the resource at `path` (`/mcp`,
    /// `/mcp/{toolset}`) is: RFC 9728 §3.1's path-suffixed address.
    pub fn metadata_url(&self, path: &str) -> String {
        format!("{}/.well-known/oauth-protected-resource{path}", self.options.public_url.trim_end_matches('/'))
    }

    /// The Protected Resource Metadata of the resource at `path` (`""` is
    /// `/mcp`), naming `scopes` (every scope the catalog's tools ask for).
    pub fn metadata(&self, path: &str, scopes: &[String]) -> Value {
        let path = if path.is_empty() { "/mcp" } else { path };
        json!({
            "resource": format!("{}{path}", self.options.public_url.trim_end_matches('/')),
            "authorization_servers": [self.options.issuer],
            "scopes_supported": scopes,
            "bearer_methods_supported": ["header"],
        })
    }

    /// 401 for a request to `path` without a token, or with one refused
    /// for `invalid` (RFC 6750 §3: `invalid_token`).
    pub fn unauthorized(&self, path: &str, invalid: Option<&Invalid>) -> Response {
        let metadata = self.metadata_url(path);
        let (challenge, message) = match invalid {
            None => (format!("Bearer resource_metadata=\"{metadata}\""), "a bearer token is required".to_owned()),
            Some(Invalid(reason)) => (
                format!(
                    "Bearer error=\"invalid_token\", error_description=\"{reason}\", resource_metadata=\"{metadata}\""
                ),
                reason.clone(),
            ),
        };
        let mut response = (StatusCode::UNAUTHORIZED, axum::Json(json!({ "error": message }))).into_response();
        if let Ok(value) = HeaderValue::from_str(&challenge) {
            response.headers_mut().insert(header::WWW_AUTHENTICATE, value);
        }
        response
    }

    /// 403 for a call to tool `name` at `path` that needs `required`
    /// scopes the token lacks: the JSON-RPC error the handler would answer,
    /// with the `insufficient_scope` challenge.
    pub fn insufficient_scope(
        &self,
        path: &str,
        id: Value,
        name: &str,
        required: &[String],
        missing: &[&str],
    ) -> Response {
        let error = insufficient_scope_error(name, required, missing);
        let body = json!({ "jsonrpc": "2.0", "id": id, "error": error });
        let challenge = format!(
            "Bearer error=\"insufficient_scope\", scope=\"{}\", resource_metadata=\"{}\"",
            required.join(" "),
            self.metadata_url(path)
        );
        let mut response = (StatusCode::FORBIDDEN, axum::Json(body)).into_response();
        if let Ok(value) = HeaderValue::from_str(&challenge) {
            response.headers_mut().insert(header::WWW_AUTHENTICATE, value);
        }
        response
    }
}

/// The JSON-RPC error (-32600, `data.error: insufficient_scope`) of a call
/// to tool `name` by a caller that lacks `missing` of its `required` scopes.
pub fn insufficient_scope_error(name: &str, required: &[String], missing: &[&str]) -> rmcp::ErrorData {
    rmcp::ErrorData::invalid_request(
        format!(
            "tool `{name}` needs the scope(s) {}: the access token lacks {}",
            required.join(" "),
            missing.join(" ")
        ),
        Some(
            json!({ "error": "insufficient_scope", "tool": name, "requiredScopes": required, "missingScopes": missing }),
        ),
    )
}

/// A JWK as a verification key, with the algorithms it may verify: its
/// `alg` if it names one, else those of its kind (RSA: RS* and PS*; EC:
/// its curve's; OKP: EdDSA). Symmetric keys and unknown kinds are skipped.
fn verification_key(jwk: &Jwk) -> Option<Key> {
    let of_kind: Vec<Algorithm> = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => vec![
            Algorithm::RS256,
            Algorithm::RS384,
            Algorithm::RS512,
            Algorithm::PS256,
            Algorithm::PS384,
            Algorithm::PS512,
        ],
        AlgorithmParameters::EllipticCurve(ec) => match ec.curve {
            EllipticCurve::P256 => vec![Algorithm::ES256],
            EllipticCurve::P384 => vec![Algorithm::ES384],
            _ => return None,
        },
        AlgorithmParameters::OctetKeyPair(okp) if okp.curve == EllipticCurve::Ed25519 => vec![Algorithm::EdDSA],
        _ => return None,
    };
    let algorithms = match jwk.common.key_algorithm {
        None => of_kind,
        Some(named) => {
            let named: Algorithm = named.to_string().parse().ok()?;
            if !of_kind.contains(&named) {
                return None;
            }
            vec![named]
        }
    };
    let key = DecodingKey::from_jwk(jwk).ok()?;
    Some(Key { key, algorithms })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jwk(value: Value) -> Jwk {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn a_key_verifies_only_its_own_algorithms() {
        let ed = jwk(json!({"kty": "OKP", "crv": "Ed25519", "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}));
        assert_eq!(verification_key(&ed).unwrap().algorithms, vec![Algorithm::EdDSA]);
        let hmac = jwk(json!({"kty": "oct", "k": "c2VjcmV0"}));
        assert!(verification_key(&hmac).is_none(), "a symmetric key is never a verification key");
        let mismatched = jwk(
            json!({"kty": "OKP", "crv": "Ed25519", "alg": "RS256", "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}),
        );
        assert!(verification_key(&mismatched).is_none());
    }

    #[test]
    fn missing_scopes_keep_their_order() {
        let caller = Caller {
            claims: Arc::default(),
            scopes: ["a".to_owned(), "c".to_owned()].into_iter().collect(),
            owner: String::new(),
            token: crate::effect::http::AccessToken::new("t", None),
        };
        let required = ["a", "b", "c", "d"].map(String::from);
        assert_eq!(caller.missing(&required), vec!["b", "d"]);
    }
}
