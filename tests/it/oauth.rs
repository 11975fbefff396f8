//! carte as an OAuth 2.1 resource server (`--oauth-issuer`), as a client
//! sees it: the test is its own authorization server (an axum app on
//! 127.0.0.1:0 serving RFC 8414 metadata and a JWKS it can rotate), makes
//! Ed25519, RSA and P-256 keys, signs tokens, and speaks MCP over HTTP to
//! the real binary.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use common::TempDir;
use common::http::{HttpServer, Response, send};
use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};

/// Where the test's carte says clients reach it.
pub(crate) const PUBLIC_URL: &str = "https://mcp.example.test";
/// The audience carte expects by default: its resource.
pub(crate) const AUDIENCE: &str = "https://mcp.example.test/mcp";

/// A signing key, its algorithm and its public JWK (with its `kid`).
pub(crate) struct Key {
    encoding: EncodingKey,
    algorithm: Algorithm,
    pub(crate) jwk: Jwk,
}

impl Key {
    /// A new Ed25519 key: 32 random bytes as a PKCS#8 document.
    pub(crate) fn new(kid: &str) -> Key {
        const PKCS8_ED25519: [u8; 16] =
            [0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20];
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).expect("random bytes");
        let der: Vec<u8> = PKCS8_ED25519.iter().chain(&seed).copied().collect();
        Key::with(kid, EncodingKey::from_ed_der(&der), Algorithm::EdDSA)
    }

    /// A new 2048-bit RSA key, signing RS256 (what most issuers use).
    fn rsa(kid: &str) -> Key {
        use rsa::Generate as _;
        use rsa::pkcs1::EncodeRsaPrivateKey as _;
        let der = rsa::PrivateKey::generate().to_pkcs1_der().expect("a PKCS#1 document");
        Key::with(kid, EncodingKey::from_rsa_der(der.as_bytes()), Algorithm::RS256)
    }

    /// A new P-256 key, signing ES256.
    fn p256(kid: &str) -> Key {
        use p256::elliptic_curve::Generate as _;
        use p256::pkcs8::EncodePrivateKey as _;
        let der = p256::SecretKey::generate().to_pkcs8_der().expect("a PKCS#8 document");
        Key::with(kid, EncodingKey::from_ec_der(der.as_bytes()), Algorithm::ES256)
    }

    fn with(kid: &str, encoding: EncodingKey, algorithm: Algorithm) -> Key {
        let mut jwk = Jwk::from_encoding_key(&encoding, algorithm).expect("a public JWK");
        jwk.common.key_id = Some(kid.to_owned());
        Key { encoding, algorithm, jwk }
    }

    /// A token with `claims` (exp, iss and aud filled in unless given).
    pub(crate) fn sign(&self, issuer: &str, claims: Value) -> String {
        let now = jsonwebtoken::get_current_timestamp();
        let mut full = json!({ "iss": issuer, "aud": AUDIENCE, "exp": now + 300, "iat": now, "sub": "alice" });
        if let (Some(full), Value::Object(claims)) = (full.as_object_mut(), claims) {
            full.extend(claims);
        }
        let mut header = Header::new(self.algorithm);
        header.kid = self.jwk.common.key_id.clone();
        jsonwebtoken::encode(&header, &full, &self.encoding).expect("a signed token")
    }
}

/// The test's authorization server: its JWKS (replaceable) and how often it was fetched.
struct Issuer {
    url: String,
    jwks: Arc<Mutex<JwkSet>>,
    fetches: Arc<AtomicUsize>,
    _server: common::http::LocalServer,
}

impl Issuer {
    fn start(keys: &[&Key]) -> Issuer {
        let server = common::http::LocalServer::bind();
        let url = format!("http://{}", server.addr);
        let jwks = Arc::new(Mutex::new(JwkSet { keys: keys.iter().map(|key| key.jwk.clone()).collect() }));
        let fetches = Arc::new(AtomicUsize::new(0));
        let metadata = json!({ "issuer": url, "jwks_uri": format!("{url}/jwks") });
        let app = Router::new()
            .route("/.well-known/oauth-authorization-server", get(move || async move { Json(metadata) }))
            .route(
                "/jwks",
                get(|State((jwks, fetches)): State<(Arc<Mutex<JwkSet>>, Arc<AtomicUsize>)>| async move {
                    fetches.fetch_add(1, Ordering::SeqCst);
                    Json(jwks.lock().unwrap().clone())
                }),
            )
            .with_state((jwks.clone(), fetches.clone()));
        Issuer { url, jwks, fetches, _server: server.serve(app) }
    }

    fn publish(&self, keys: &[&Key]) {
        *self.jwks.lock().unwrap() = JwkSet { keys: keys.iter().map(|key| key.jwk.clone()).collect() };
    }
}

const CATALOG: &str = r#"
server:
  name: oauth-test
  version: 1.0.0
tools:
  - name: whoami
    description: Says who calls.
    run:
      text: "you are {{ auth.sub }}"
  - name: orders
    description: Lists the caller's orders.
    scopes: [orders:read]
    run:
      text: "orders of {{ auth.sub }} ({{ auth.tenant }})"
toolsets:
  public: [whoami]
prompts:
  - name: greeting
    description: Greets the caller by name.
    messages:
      - role: user
        text: "Hello, I am {{ auth.sub if auth is defined else 'the operator' }}."
"#;

fn start(dir: &TempDir, issuer: &Issuer) -> HttpServer {
    let catalog = dir.write("catalog.yaml", CATALOG);
    HttpServer::start(&catalog, &["--oauth-issuer", &issuer.url, "--public-url", PUBLIC_URL], &[])
}

/// POSTs a message to /mcp with `token` (if any) as a 2025-11-25 client without a session.
fn post(server: &HttpServer, token: Option<&str>, session: Option<&str>, message: &Value) -> Response {
    let bearer = token.map(|token| format!("Bearer {token}"));
    let mut headers = vec![("MCP-Protocol-Version", "2025-11-25")];
    if let Some(bearer) = &bearer {
        headers.push(("Authorization", bearer));
    }
    if let Some(session) = session {
        headers.push(("Mcp-Session-Id", session));
    }
    send(server.addr, "POST", "/mcp", &headers, Some(message))
}

/// A legacy session opened with `token`; its id.
pub(crate) fn session(server: &HttpServer, token: &str) -> String {
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "oauth-test", "version": "1"}}});
    let response = post(server, Some(token), None, &init);
    assert_eq!(response.status, 200, "initialize with a good token");
    let id = response.header("mcp-session-id").expect("a session id").to_owned();
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert!(matches!(post(server, Some(token), Some(&id), &initialized).status, 200 | 202));
    id
}

/// A request on `session` with `token`: the response message.
pub(crate) fn request(server: &HttpServer, token: &str, session: &str, method: &str, params: Value) -> Value {
    let response = post(
        server,
        Some(token),
        Some(session),
        &json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}),
    );
    assert_eq!(response.status, 200, "{method}");
    response.messages().into_iter().find(|m| m["id"] == 7).unwrap_or_else(|| panic!("no answer to {method}"))
}

fn tool_names(listed: &Value) -> Vec<String> {
    listed["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_owned()).collect()
}

fn initialize() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "oauth-test", "version": "1"}}})
}

#[test]
fn tokens_are_checked_and_the_metadata_says_where_to_get_one() {
    let key = Key::new("k1");
    let issuer = Issuer::start(&[&key]);
    let dir = TempDir::new("oauth-refusals");
    let server = start(&dir, &issuer);
    let metadata_url = format!("{PUBLIC_URL}/.well-known/oauth-protected-resource/mcp");

    let none = post(&server, None, None, &initialize());
    assert_eq!(none.status, 401);
    assert_eq!(none.header("www-authenticate"), Some(format!("Bearer resource_metadata=\"{metadata_url}\"").as_str()));

    let now = jsonwebtoken::get_current_timestamp();
    let impostor = Key::new("k1");
    let refused = [
        ("a bad signature", impostor.sign(&issuer.url, json!({}))),
        ("an expired token", key.sign(&issuer.url, json!({ "exp": now - 3600 }))),
        ("another audience", key.sign(&issuer.url, json!({ "aud": "https://other.example.test/mcp" }))),
        ("another issuer", key.sign(&issuer.url, json!({ "iss": "https://evil.example.test" }))),
        ("not yet valid", key.sign(&issuer.url, json!({ "nbf": now + 3600 }))),
        ("not a JWT", "not.a.jwt".to_owned()),
    ];
    for (what, token) in refused {
        let response = post(&server, Some(&token), None, &initialize());
        assert_eq!(response.status, 401, "{what}");
        let challenge = response.header("www-authenticate").unwrap_or_default().to_owned();
        assert!(challenge.starts_with("Bearer error=\"invalid_token\""), "{what}: {challenge}");
        assert!(challenge.contains(&format!("resource_metadata=\"{metadata_url}\"")), "{what}: {challenge}");
        assert!(!response.text().contains(&token), "{what}: the token is never echoed");
    }

    for path in ["/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"] {
        let response = send(server.addr, "GET", path, &[], None);
        assert_eq!(response.status, 200, "{path}");
        let metadata: Value = serde_json::from_str(&response.text()).unwrap();
        assert_eq!(
            metadata,
            json!({
                "resource": AUDIENCE,
                "authorization_servers": [issuer.url],
                "scopes_supported": ["orders:read"],
                "bearer_methods_supported": ["header"],
            }),
            "{path}"
        );
    }
    assert_eq!(send(server.addr, "GET", "/.well-known/oauth-protected-resource/elsewhere", &[], None).status, 404);
}

#[test]
fn scopes_choose_the_tools_and_auth_names_the_caller() {
    let key = Key::new("k1");
    let issuer = Issuer::start(&[&key]);
    let dir = TempDir::new("oauth-scopes");
    let server = start(&dir, &issuer);

    let plain = key.sign(&issuer.url, json!({ "scope": "profile", "tenant": "acme" }));
    let id = session(&server, &plain);
    assert_eq!(tool_names(&request(&server, &plain, &id, "tools/list", json!({}))), ["whoami"]);
    let whoami = request(&server, &plain, &id, "tools/call", json!({"name": "whoami", "arguments": {}}));
    assert_eq!(common::text(&whoami["result"]), "you are alice");
    // Prompts see the caller too.
    let greeting = request(&server, &plain, &id, "prompts/get", json!({"name": "greeting"}));
    assert_eq!(greeting["result"]["messages"][0]["content"]["text"], "Hello, I am alice.", "{greeting}");

    let call =
        json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "orders", "arguments": {}}});
    let forbidden = post(&server, Some(&plain), Some(&id), &call);
    assert_eq!(forbidden.status, 403);
    let challenge = forbidden.header("www-authenticate").unwrap_or_default().to_owned();
    assert!(challenge.starts_with("Bearer error=\"insufficient_scope\", scope=\"orders:read\""), "{challenge}");
    let body: Value = serde_json::from_str(&forbidden.text()).unwrap();
    assert_eq!(body["id"], 9);
    assert_eq!(body["error"]["data"]["error"], "insufficient_scope");
    assert!(body["error"]["message"].as_str().unwrap().contains("orders:read"), "{body}");

    // The same caller with the scope, as a list (`scp`) this time.
    let scoped = key.sign(&issuer.url, json!({ "scp": ["orders:read"], "tenant": "acme" }));
    let id = session(&server, &scoped);
    assert_eq!(tool_names(&request(&server, &scoped, &id, "tools/list", json!({}))), ["whoami", "orders"]);
    let orders = request(&server, &scoped, &id, "tools/call", json!({"name": "orders", "arguments": {}}));
    assert_eq!(common::text(&orders["result"]), "orders of alice (acme)");

    // A claim the token does not carry fails the call, naming it.
    let bare = key.sign(&issuer.url, json!({ "scope": "orders:read" }));
    let id = session(&server, &bare);
    let failed = request(&server, &bare, &id, "tools/call", json!({"name": "orders", "arguments": {}}));
    assert_eq!(failed["result"]["isError"], true, "{failed}");
    assert!(common::text(&failed["result"]).contains("auth has no key \"tenant\""), "{failed}");
}

/// A 2026-07-28 request (no session) with `token` to `path`: the status and its answer.
fn post_2026(server: &HttpServer, token: &str, path: &str, method: &str, params: Value) -> (u16, Value) {
    let mut params = params;
    params["_meta"] = common::meta_2026(json!({}));
    let body = json!({"jsonrpc": "2.0", "id": 5, "method": method, "params": params});
    let bearer = format!("Bearer {token}");
    let mut headers = vec![("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", method), ("Authorization", &bearer)];
    let name = params["name"].as_str().unwrap_or_default().to_owned();
    if !name.is_empty() {
        headers.push(("Mcp-Name", &name));
    }
    let response = send(server.addr, "POST", path, &headers, Some(&body));
    let status = response.status;
    let answer = response.messages().into_iter().find(|m| m["id"] == 5).unwrap_or_default();
    (status, answer)
}

#[test]
fn stateless_requests_and_toolsets_see_the_caller_too() {
    let key = Key::new("k1");
    let issuer = Issuer::start(&[&key]);
    let dir = TempDir::new("oauth-stateless");
    let server = start(&dir, &issuer);
    let plain = key.sign(&issuer.url, json!({ "sub": "bob" }));
    let (status, listed) = post_2026(&server, &plain, "/mcp", "tools/list", json!({}));
    assert_eq!((status, tool_names(&listed)), (200, vec!["whoami".to_owned()]));
    let (_, called) = post_2026(&server, &plain, "/mcp", "tools/call", json!({"name": "whoami", "arguments": {}}));
    assert_eq!(common::text(&called["result"]), "you are bob");
    let (status, _) = post_2026(&server, &plain, "/mcp", "tools/call", json!({"name": "orders", "arguments": {}}));
    assert_eq!(status, 403);

    // At a toolset's endpoint, a tool outside it is unknown there, whatever its scopes.
    let (status, refused) =
        post_2026(&server, &plain, "/mcp/public", "tools/call", json!({"name": "orders", "arguments": {}}));
    assert_ne!(status, 403, "{refused}");
    assert!(refused["error"]["message"].as_str().unwrap_or_default().contains("orders"), "{refused}");
    let none = send(server.addr, "POST", "/mcp/public", &[("MCP-Protocol-Version", "2026-07-28")], Some(&initialize()));
    assert_eq!(none.status, 401);
    let challenge = none.header("www-authenticate").unwrap_or_default().to_owned();
    assert!(
        challenge.contains(&format!("{PUBLIC_URL}/.well-known/oauth-protected-resource/mcp/public")),
        "{challenge}"
    );
    let metadata = send(server.addr, "GET", "/.well-known/oauth-protected-resource/mcp/public", &[], None);
    assert_eq!(metadata.status, 200);
    let metadata: Value = serde_json::from_str(&metadata.text()).unwrap();
    assert_eq!(metadata["resource"], format!("{PUBLIC_URL}/mcp/public"));
}

#[test]
fn a_new_key_is_fetched_when_a_token_names_it_and_unknown_keys_are_not_a_flood() {
    let old = Key::new("old");
    let issuer = Issuer::start(&[&old]);
    let dir = TempDir::new("oauth-rotation");
    let server = start(&dir, &issuer);
    let token = old.sign(&issuer.url, json!({}));
    assert_eq!(post(&server, Some(&token), None, &initialize()).status, 200);

    let new = Key::new("new");
    issuer.publish(&[&new]);
    let rotated = new.sign(&issuer.url, json!({}));
    assert_eq!(post(&server, Some(&rotated), None, &initialize()).status, 200, "the new kid is fetched");

    let before = issuer.fetches.load(Ordering::SeqCst);
    for n in 0..10 {
        let stranger = Key::new(&format!("made-up-{n}"));
        assert_eq!(post(&server, Some(&stranger.sign(&issuer.url, json!({}))), None, &initialize()).status, 401);
    }
    let flood = issuer.fetches.load(Ordering::SeqCst) - before;
    assert!(flood <= 3, "ten unknown kids made {flood} JWKS fetches");
}

#[test]
fn the_static_token_beside_oauth_is_the_operators() {
    let key = Key::new("k1");
    let issuer = Issuer::start(&[&key]);
    let dir = TempDir::new("oauth-beside-token");
    let catalog = dir.write("catalog.yaml", CATALOG);
    let server = HttpServer::start(
        &catalog,
        &["--oauth-issuer", &issuer.url, "--public-url", PUBLIC_URL, "--auth-token-env", "OPERATOR_TOKEN"],
        &[("OPERATOR_TOKEN", "operator-secret-0123456789")],
    );

    // The operator's token sees every tool, scoped or not, and has no `auth`.
    let id = session(&server, "operator-secret-0123456789");
    let listed = request(&server, "operator-secret-0123456789", &id, "tools/list", json!({}));
    assert_eq!(tool_names(&listed), ["whoami", "orders"]);
    let whoami =
        request(&server, "operator-secret-0123456789", &id, "tools/call", json!({"name": "whoami", "arguments": {}}));
    assert_eq!(whoami["result"]["isError"], true, "{whoami}");
    assert!(common::text(&whoami["result"]).contains("no verified caller"), "{whoami}");
    let greeting = request(&server, "operator-secret-0123456789", &id, "prompts/get", json!({"name": "greeting"}));
    assert_eq!(greeting["result"]["messages"][0]["content"]["text"], "Hello, I am the operator.", "{greeting}");

    // An OAuth token still works beside it, with its scopes; a wrong token is refused.
    let plain = key.sign(&issuer.url, json!({ "scope": "profile" }));
    let operators = id;
    let id = session(&server, &plain);
    assert_eq!(tool_names(&request(&server, &plain, &id, "tools/list", json!({}))), ["whoami"]);
    // Neither may use the other's session.
    let list = json!({"jsonrpc": "2.0", "id": 8, "method": "tools/list", "params": {}});
    assert_eq!(post(&server, Some(&plain), Some(&operators), &list).status, 404);
    assert_eq!(post(&server, Some("operator-secret-0123456789"), Some(&id), &list).status, 404);
    let refused = post(&server, Some("operator-secret-0123456780"), None, &initialize());
    assert_eq!(refused.status, 401);
    assert!(refused.header("www-authenticate").unwrap_or_default().contains("invalid_token"));
}

#[test]
fn a_session_belongs_to_the_caller_who_started_it() {
    let key = Key::new("k1");
    let issuer = Issuer::start(&[&key]);
    let dir = TempDir::new("oauth-session-owner");
    let server = start(&dir, &issuer);
    let alice = key.sign(&issuer.url, json!({}));
    let bob = key.sign(&issuer.url, json!({ "sub": "bob" }));
    let id = session(&server, &alice);

    // Bob's token is good, but the session is Alice's: as if it did not exist.
    let list = json!({"jsonrpc": "2.0", "id": 8, "method": "tools/list", "params": {}});
    let refused = post(&server, Some(&bob), Some(&id), &list);
    assert_eq!(refused.status, 404);
    assert_eq!(refused.text(), "Not Found: Session not found");
    let bearer = format!("Bearer {bob}");
    let headers = [("Authorization", bearer.as_str()), ("Mcp-Session-Id", id.as_str())];
    assert_eq!(send(server.addr, "GET", "/mcp", &headers, None).status, 404, "nor its stream");
    assert_eq!(send(server.addr, "DELETE", "/mcp", &headers, None).status, 404, "nor closing it");

    // Alice goes on, with the same token or a fresh one (the same subject).
    let whoami = request(&server, &alice, &id, "tools/call", json!({"name": "whoami", "arguments": {}}));
    assert_eq!(common::text(&whoami["result"]), "you are alice");
    let refreshed = key.sign(&issuer.url, json!({ "jti": "second" }));
    assert_eq!(tool_names(&request(&server, &refreshed, &id, "tools/list", json!({}))), ["whoami"]);
}

#[test]
fn rsa_and_p256_keys_verify_as_issuers_sign_and_a_key_signs_only_for_itself() {
    let (rsa, ec) = (Key::rsa("rsa-1"), Key::p256("ec-1"));
    let issuer = Issuer::start(&[&rsa, &ec]);
    let dir = TempDir::new("oauth-algorithms");
    let server = start(&dir, &issuer);
    for key in [&rsa, &ec] {
        let token = key.sign(&issuer.url, json!({ "sub": format!("{:?}", key.algorithm) }));
        let id = session(&server, &token);
        let whoami = request(&server, &token, &id, "tools/call", json!({"name": "whoami", "arguments": {}}));
        assert_eq!(common::text(&whoami["result"]), format!("you are {:?}", key.algorithm));
    }
    // A P-256 signature under the RSA key's `kid`: the algorithm is the key's, so it is refused.
    let claims =
        json!({ "iss": issuer.url, "aud": AUDIENCE, "exp": jsonwebtoken::get_current_timestamp() + 300, "sub": "x" });
    let mut header = Header::new(Algorithm::ES256);
    header.kid = Some("rsa-1".to_owned());
    let forged = jsonwebtoken::encode(&header, &claims, &ec.encoding).expect("signed");
    assert_eq!(post(&server, Some(&forged), None, &initialize()).status, 401, "an ES256 token naming an RSA key");
}
