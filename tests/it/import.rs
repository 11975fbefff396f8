//! `carte import openapi`: the catalog it writes passes `carte check` (also for
//! the Swagger Petstore, `tests/openapi/petstore.json`), and
//! its tools call a real (local) upstream as the description says — path
//! and query parameters, a JSON body, the method.

use crate::common;

use std::sync::{Arc, Mutex};

use axum::extract::{Request, State};
use axum::response::IntoResponse;
use common::{Server, TIMEOUT, TempDir, run_to_end, text};
use serde_json::json;

const SPEC: &str = r##"
openapi: 3.0.3
info: { title: Pet Store, version: "1.2", description: Pets for sale. }
servers: [ { url: "https://pets.example/v1" } ]
paths:
  /pets:
    get:
      operationId: listPets
      summary: List pets
      parameters: [ { name: limit, in: query, schema: { type: integer } } ]
    post:
      operationId: createPet
      summary: Add a pet
      requestBody:
        required: true
        content: { application/json: { schema: { $ref: "#/components/schemas/Pet" } } }
  /pets/{pet-id}:
    delete: { operationId: deletePet, parameters: [ { name: pet-id, in: path, required: true, schema: { type: string } } ] }
components:
  schemas:
    Pet: { type: object, properties: { name: { type: string }, age: { type: integer } }, required: [name] }
"##;

type Log = Arc<Mutex<Vec<String>>>;

async fn upstream(State(log): State<Log>, request: Request) -> axum::response::Response {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, 1 << 20).await.unwrap();
    let line = format!("{} {} {}", parts.method, parts.uri, String::from_utf8_lossy(&body));
    log.lock().unwrap().push(line.trim_end().to_owned());
    axum::Json(json!({"ok": true})).into_response()
}

/// The catalog `carte import openapi SPEC` writes (into `dir`), checked: no error, no warning.
fn imported(spec: &std::path::Path, dir: &TempDir) -> std::path::PathBuf {
    let ran = run_to_end(common::carte().args(["import", "openapi"]).arg(spec), "carte import openapi", TIMEOUT);
    assert_eq!(ran.status.code(), Some(0), "{}", String::from_utf8_lossy(&ran.stderr));
    let catalog = dir.write("imported.yaml", &String::from_utf8(ran.stdout).unwrap());
    let (code, _, stderr) = common::run_cli("check", &catalog, &[], &[]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!stderr.contains("warning"), "{stderr}");
    catalog
}

/// An upstream that records each request as `METHOD URI BODY`.
fn recording_upstream() -> (Log, common::http::LocalServer) {
    let log: Log = Arc::default();
    let app = axum::Router::new().fallback(upstream).with_state(log.clone());
    (log, common::http::LocalServer::bind().serve(app))
}

#[test]
fn an_imported_description_checks_clean_and_calls_its_api() {
    let dir = TempDir::new("import-openapi");
    let spec = dir.write("pets.yaml", SPEC);
    let catalog = imported(&spec, &dir);
    let (log, local) = recording_upstream();
    let base = format!("http://{}/v1", local.addr);
    let mut server = Server::initialized(&catalog, &[("PET_STORE_BASE_URL", base.as_str())]);
    let call = |server: &mut Server, name: &str, arguments| {
        server.result("tools/call", json!({"name": name, "arguments": arguments}))
    };
    assert_eq!(text(&call(&mut server, "listPets", json!({"limit": 2}))), r#"{"ok":true}"#);
    call(&mut server, "listPets", json!({}));
    call(&mut server, "createPet", json!({"body": {"name": "Rex", "age": 3}}));
    call(&mut server, "deletePet", json!({"pet-id": "r/x"}));
    let seen = log.lock().unwrap().clone();
    assert_eq!(
        seen,
        ["GET /v1/pets?limit=2", "GET /v1/pets", r#"POST /v1/pets {"name":"Rex","age":3}"#, "DELETE /v1/pets/r%2Fx",]
    );
}

#[test]
fn what_is_not_openapi_is_refused() {
    let dir = TempDir::new("import-not-openapi");
    let spec = dir.write("swagger.yaml", "swagger: '2.0'\npaths: {}\n");
    let ran = run_to_end(common::carte().args(["import", "openapi"]).arg(&spec), "carte import openapi", TIMEOUT);
    let stderr = String::from_utf8_lossy(&ran.stderr);
    assert_eq!(ran.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("not an OpenAPI 3 description"), "{stderr}");
}

#[test]
fn the_swagger_petstore_imports_checks_clean_and_calls_its_api() {
    let dir = TempDir::new("import-petstore");
    let catalog = imported(&common::repo_root().join("tests/openapi/petstore.json"), &dir);
    let (log, local) = recording_upstream();
    let base = format!("http://{}/v2", local.addr);
    let mut server = Server::initialized(&catalog, &[("SWAGGER_PETSTORE_BASE_URL", base.as_str())]);
    let listed = server.result("tools/list", json!({}));
    let names: Vec<&str> = listed["tools"].as_array().unwrap().iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(names.len(), 20, "one tool per operation: {names:?}");
    assert!(names.contains(&"findPetsByStatus") && names.contains(&"updatePetWithForm"), "{names:?}");
    let mut call = |name: &str, arguments| {
        let result = server.result("tools/call", json!({"name": name, "arguments": arguments}));
        assert_eq!(result["isError"], json!(false), "{name}: {result}");
    };
    call("getPetById", json!({"petId": 7}));
    call("findPetsByStatus", json!({"status": ["available", "sold"]}));
    call("addPet", json!({"body": {"name": "Rex", "photoUrls": ["a.png"], "status": "available"}}));
    call("updatePetWithForm", json!({"petId": 7, "body": {"name": "Rex & Co", "status": "sold"}}));
    call("deletePet", json!({"petId": 7}));
    call("loginUser", json!({"username": "ann", "password": "pw"}));
    let seen = log.lock().unwrap().clone();
    assert_eq!(
        seen,
        [
            "GET /v2/pet/7",
            "GET /v2/pet/findByStatus?status=available&status=sold",
            r#"POST /v2/pet {"name":"Rex","photoUrls":["a.png"],"status":"available"}"#,
            "POST /v2/pet/7 name=Rex%20%26%20Co&status=sold",
            "DELETE /v2/pet/7",
            "GET /v2/user/login?username=ann&password=pw",
        ]
    );
}
