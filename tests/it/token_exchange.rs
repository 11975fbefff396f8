//! An api's `auth: { exchange }` (RFC 8693) end to end: the test is the
//! authorization server (RFC 8414 metadata, a JWKS, and a token endpoint
//! that authenticates carte and verifies the subject token it receives
//! with its own key) and the upstream (which records the `Authorization`
//! it gets); the real binary serves HTTP with `--oauth-issuer`, and callers
//! with their own tokens call tools whose api acts as them.

use crate::common;
use crate::oauth::{AUDIENCE, Key, PUBLIC_URL};

use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine as _;
use common::TempDir;
use common::http::{HttpServer, LocalServer};
use serde_json::{Value, json};

const CLIENT_SECRET: &str = "exchange-secret-4711";
const TOKEN_EXCHANGE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
const ACCESS_TOKEN: &str = "urn:ietf:params:oauth:token-type:access_token";

/// An exchange the authorization server granted or refused.
#[derive(Debug, Clone)]
struct Exchanged {
    subject: String,
    audience: String,
    scope: Option<String>,
}

type Log = Arc<Mutex<Vec<Exchanged>>>;

/// The authorization server: metadata, JWKS and token endpoint.
struct AuthServer {
    url: String,
    exchanges: Log,
    _server: LocalServer,
}

impl AuthServer {
    fn start(key: &Key) -> AuthServer {
        let server = LocalServer::bind();
        let url = format!("http://{}", server.addr);
        let exchanges = Log::default();
        let metadata =
            json!({ "issuer": url, "jwks_uri": format!("{url}/jwks"), "token_endpoint": format!("{url}/token") });
        let jwks = json!({ "keys": [key.jwk] });
        let decoding = jsonwebtoken::DecodingKey::from_jwk(&key.jwk).expect("a decoding key");
        let state = (exchanges.clone(), Arc::new(decoding), url.clone());
        let app = Router::new()
            .route("/.well-known/oauth-authorization-server", get(move || async move { Json(metadata) }))
            .route("/jwks", get(move || async move { Json(jwks) }))
            .route("/token", post(token))
            .with_state(state);
        AuthServer { url, exchanges, _server: server.serve(app) }
    }

    fn exchanges(&self) -> Vec<Exchanged> {
        self.exchanges.lock().unwrap().clone()
    }
}

type AuthState = (Log, Arc<jsonwebtoken::DecodingKey>, String);

/// The token endpoint: carte must authenticate (Basic), ask for a token
/// exchange of an access token, and hand over a subject token this server
/// signed for carte; `orders` is the only audience it issues tokens for.
async fn token(
    State((log, key, issuer)): State<AuthState>,
    headers: HeaderMap,
    body: String,
) -> axum::response::Response {
    let refuse = |status: StatusCode, error: &str, description: &str| {
        (status, Json(json!({ "error": error, "error_description": description }))).into_response()
    };
    let basic = format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("carte:{CLIENT_SECRET}")));
    if headers.get("authorization").and_then(|v| v.to_str().ok()) != Some(basic.as_str()) {
        return refuse(StatusCode::UNAUTHORIZED, "invalid_client", "carte did not authenticate");
    }
    let form: std::collections::HashMap<String, String> =
        url::form_urlencoded::parse(body.as_bytes()).into_owned().collect();
    let field = |name: &str| form.get(name).cloned().unwrap_or_default();
    if field("grant_type") != TOKEN_EXCHANGE || field("subject_token_type") != ACCESS_TOKEN {
        return refuse(StatusCode::BAD_REQUEST, "unsupported_grant_type", "not a token exchange");
    }
    let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::EdDSA);
    validation.set_issuer(&[&issuer]);
    validation.set_audience(&[AUDIENCE]);
    let subject = match jsonwebtoken::decode::<Value>(&field("subject_token"), &key, &validation) {
        Ok(data) => data.claims["sub"].as_str().unwrap_or_default().to_owned(),
        Err(_) => {
            let echoed = format!("subject token {} does not verify", field("subject_token"));
            return refuse(StatusCode::BAD_REQUEST, "invalid_grant", &echoed);
        }
    };
    // Slow, as a real exchange can be: concurrent calls overlap for sure.
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let audience = field("audience");
    let exchanged =
        Exchanged { subject: subject.clone(), audience: audience.clone(), scope: form.get("scope").cloned() };
    let count = {
        let mut log = log.lock().unwrap();
        log.push(exchanged);
        log.len()
    };
    if audience != "orders" {
        // Echoes the subject token, as a careless server might: carte must hide it.
        let echoed = format!("no tokens for `{audience}` from {}", field("subject_token"));
        return refuse(StatusCode::BAD_REQUEST, "invalid_target", &echoed);
    }
    Json(json!({
        "access_token": format!("orders-token-{subject}-{count}"),
        "issued_token_type": ACCESS_TOKEN,
        "token_type": "Bearer",
        "expires_in": 300,
    }))
    .into_response()
}

/// The upstream: answers every request with the `Authorization` it got.
fn upstream() -> LocalServer {
    let app = Router::new().fallback(|headers: HeaderMap| async move {
        let authorization = headers.get("authorization").and_then(|v| v.to_str().ok()).unwrap_or("none").to_owned();
        Json(json!({ "authorization": authorization }))
    });
    LocalServer::bind().serve(app)
}

fn catalog(upstream: &LocalServer, auth: &AuthServer) -> String {
    format!(
        r#"
server: {{ name: exchange-test, version: 1.0.0 }}
apis:
  orders:
    baseUrl: http://{upstream}
    auth:
      exchange: {{ tokenUrl: "{auth}/token", audience: orders, scope: "orders:read", clientId: carte, clientSecret: "${{ORDERS_CLIENT_SECRET}}" }}
  billing:
    baseUrl: http://{upstream}
    auth:
      exchange: {{ tokenUrl: "{auth}/token", audience: billing, clientId: carte, clientSecret: "${{ORDERS_CLIENT_SECRET}}" }}
tools:
  - name: my_orders
    description: Lists the caller's orders, as the caller.
    run:
      http: {{ api: orders, path: /orders }}
      text: "{{{{ json.authorization }}}}"
  - name: my_bills
    description: Lists the caller's bills, as the caller.
    run:
      http: {{ api: billing, path: /bills }}
"#,
        upstream = upstream.addr,
        auth = auth.url,
    )
}

/// Calls `tool` as the holder of `token`, in a session of its own: its result.
fn call(server: &HttpServer, token: &str, tool: &str) -> Value {
    let session = crate::oauth::session(server, token);
    let answer = crate::oauth::request(server, token, &session, "tools/call", json!({"name": tool, "arguments": {}}));
    answer["result"].clone()
}

/// What every test here runs against: a signing key, its authorization
/// server, the upstream, and the catalog (in its folder).
struct Setup {
    key: Key,
    auth: AuthServer,
    _upstream: LocalServer,
    _dir: TempDir,
    path: std::path::PathBuf,
}

fn setup(name: &str) -> Setup {
    let key = Key::new("k1");
    let auth = AuthServer::start(&key);
    let upstream = upstream();
    let dir = TempDir::new(name);
    let path = dir.write("catalog.yaml", &catalog(&upstream, &auth));
    Setup { key, auth, _upstream: upstream, _dir: dir, path }
}

#[test]
fn an_api_acts_as_the_caller_with_an_exchanged_token() {
    let setup = setup("token-exchange");
    let (key, auth, path) = (&setup.key, &setup.auth, &setup.path);
    let envs = [("ORDERS_CLIENT_SECRET", CLIENT_SECRET)];
    let server = HttpServer::start(path, &["--oauth-issuer", &auth.url, "--public-url", PUBLIC_URL], &envs);
    let alice = key.sign(&auth.url, json!({ "sub": "alice" }));
    let bob = key.sign(&auth.url, json!({ "sub": "bob" }));

    let first = call(&server, &alice, "my_orders");
    assert_eq!(first["isError"], json!(false), "{first}");
    assert_eq!(common::text(&first), "Bearer orders-token-alice-1", "the upstream got alice's exchanged token");
    let again = call(&server, &alice, "my_orders");
    assert_eq!(common::text(&again), "Bearer orders-token-alice-1", "kept until it expires");
    let exchanges = auth.exchanges();
    assert_eq!(exchanges.len(), 1, "one exchange for two calls: {exchanges:?}");
    assert_eq!(
        (exchanges[0].subject.as_str(), exchanges[0].audience.as_str(), exchanges[0].scope.as_deref()),
        ("alice", "orders", Some("orders:read"))
    );

    // Concurrent first calls of one caller wait for one exchange.
    let carol = key.sign(&auth.url, json!({ "sub": "carol" }));
    let answers: Vec<String> = std::thread::scope(|scope| {
        let calls: Vec<_> = (0..4).map(|_| scope.spawn(|| common::text(&call(&server, &carol, "my_orders")))).collect();
        calls.into_iter().map(|call| call.join().unwrap()).collect()
    });
    assert!(answers.iter().all(|answer| answer == "Bearer orders-token-carol-2"), "{answers:?}");
    assert_eq!(auth.exchanges().len(), 2, "one exchange for carol's four calls");

    let for_bob = call(&server, &bob, "my_orders");
    assert_eq!(common::text(&for_bob), "Bearer orders-token-bob-3", "another caller, another exchange");

    let refused = call(&server, &alice, "my_bills");
    assert_eq!(refused["isError"], json!(true), "{refused}");
    let said = common::text(&refused);
    assert!(
        said.contains("api `billing`: the token exchange at")
            && said.contains("was refused (400 Bad Request): invalid_target"),
        "{said}"
    );
    assert!(said.contains("[the caller's token]") && !said.contains(&alice), "the echoed token is hidden: {said}");
    assert!(!said.contains(CLIENT_SECRET));
}

#[test]
fn a_call_without_an_access_token_is_refused_before_anything_is_sent() {
    let setup = setup("token-exchange-stdio");
    let (auth, path) = (&setup.auth, &setup.path);
    let mut server = common::Server::initialized(path, &[("ORDERS_CLIENT_SECRET", CLIENT_SECRET)]);
    let result = server.result("tools/call", json!({"name": "my_orders", "arguments": {}}));
    assert_eq!(result["isError"], json!(true), "{result}");
    let said = common::text(&result);
    assert!(
        said.contains("api `orders` acts as the caller (`auth.exchange`), but this call carries no access token"),
        "{said}"
    );
    assert!(auth.exchanges().is_empty(), "nothing was exchanged");

    // The operator hears it when carte starts.
    let ran = common::run_to_end(
        common::carte()
            .arg("serve")
            .arg(path)
            .env("ORDERS_CLIENT_SECRET", CLIENT_SECRET)
            .stdin(std::process::Stdio::null()),
        "carte serve over stdio",
        common::TIMEOUT,
    );
    let stderr = String::from_utf8_lossy(&ran.stderr);
    assert!(
        stderr.contains("api `orders` acts as the caller (`auth.exchange`), but carte verifies no caller"),
        "{stderr}"
    );
}

#[test]
fn a_wrong_client_secret_is_the_authorization_servers_refusal() {
    let setup = setup("token-exchange-client");
    let (key, auth, path) = (&setup.key, &setup.auth, &setup.path);
    let envs = [("ORDERS_CLIENT_SECRET", "not-the-secret")];
    let server = HttpServer::start(path, &["--oauth-issuer", &auth.url, "--public-url", PUBLIC_URL], &envs);
    let alice = key.sign(&auth.url, json!({ "sub": "alice" }));
    let result = call(&server, &alice, "my_orders");
    let said = common::text(&result);
    assert!(said.contains("was refused (401 Unauthorized): invalid_client (carte did not authenticate)"), "{said}");
    assert!(!said.contains("not-the-secret"), "{said}");
}
