//! What 2026 clients show and keep (DESIGN part 13): icons on the server and
//! on entries, `cache` as `ttlMs`/`cacheScope` on lists, discovery and
//! reads, and MCP Apps (a tool's `ui`, a resource's `app` served as
//! `text/html;profile=mcp-app` with its CSP) — as a client receives them,
//! from the real binary.

use crate::common;

use common::{Server, TempDir, meta_2026};
use serde_json::{Value, json};

const CATALOG: &str = r#"
server:
  name: shop
  version: "1.0"
  icons: [ { src: "https://shop.example/icon.png", mimeType: image/png, sizes: [48x48] } ]
  cache: { ttl: 60s, scope: public }
tools:
  - name: show_cart
    description: Shows the cart.
    icons: [ { src: "data:image/svg+xml;base64,PHN2Zy8+", mimeType: image/svg+xml, theme: dark } ]
    ui: ui://shop/cart.html
    run: { text: two items }
prompts:
  - name: greet
    description: Greets.
    icons: [ { src: "https://shop.example/greet.png" } ]
    messages: [ { role: user, text: hi } ]
resources:
  - uri: ui://shop/cart.html
    name: cart
    app: { file: ui/cart.html, csp: { connectDomains: ["https://api.shop.example"] }, prefersBorder: true }
    cache: { ttl: 5m }
  - uri: shop://note
    name: note
    icons: [ { src: "https://shop.example/note.png", sizes: [any] } ]
    text: hello
resourceTemplates:
  - uriTemplate: shop://items/{id}
    name: item
    cache: { ttl: 0s }
    text: "item {{ id }}"
"#;

const PAGE: &str = "<!doctype html><title>Cart</title><p>two items</p>\n";

fn serve(dir: &TempDir) -> Server {
    dir.write("ui/cart.html", PAGE);
    let path = dir.write("shop.yaml", CATALOG);
    Server::initialized(&path, &[])
}

#[test]
fn icons_and_apps_reach_the_lists() {
    let dir = TempDir::new("presentation-lists");
    let path = {
        dir.write("ui/cart.html", PAGE);
        dir.write("shop.yaml", CATALOG)
    };
    let mut server = Server::start(&path, &[]);
    let init = server.result(
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}),
    );
    assert_eq!(
        init["serverInfo"]["icons"],
        json!([{"src": "https://shop.example/icon.png", "mimeType": "image/png", "sizes": ["48x48"]}])
    );
    server.notify("notifications/initialized", json!({}));

    let tools = server.result("tools/list", json!({}));
    let tool = &tools["tools"][0];
    assert_eq!(tool["icons"][0]["theme"], "dark", "{tool}");
    assert_eq!(tool["_meta"]["ui"]["resourceUri"], "ui://shop/cart.html", "{tool}");
    assert_eq!((tools["ttlMs"].as_u64(), tools["cacheScope"].as_str()), (Some(60_000), Some("public")), "{tools}");

    let prompts = server.result("prompts/list", json!({}));
    assert_eq!(prompts["prompts"][0]["icons"][0]["src"], "https://shop.example/greet.png");

    let resources = server.result("resources/list", json!({}));
    let cart = &resources["resources"][0];
    assert_eq!(cart["mimeType"], "text/html;profile=mcp-app", "{cart}");
    assert_eq!(cart["_meta"]["ui"]["csp"]["connectDomains"], json!(["https://api.shop.example"]), "{cart}");
    assert_eq!(resources["resources"][1]["icons"][0]["sizes"], json!(["any"]));
}

#[test]
fn reads_carry_their_cache_and_an_apps_page_its_csp() {
    let dir = TempDir::new("presentation-reads");
    let mut server = serve(&dir);
    let read = |server: &mut Server, uri: &str| server.result("resources/read", json!({"uri": uri}));

    // An app: its page, as MCP Apps serves it, with the resource's own cache (private by default).
    let cart = read(&mut server, "ui://shop/cart.html");
    let contents = &cart["contents"][0];
    assert_eq!(contents["text"], PAGE);
    assert_eq!(contents["mimeType"], "text/html;profile=mcp-app");
    assert_eq!(
        contents["_meta"]["ui"],
        json!({"csp": {"connectDomains": ["https://api.shop.example"]}, "prefersBorder": true})
    );
    assert_eq!((cart["ttlMs"].as_u64(), cart["cacheScope"].as_str()), (Some(300_000), Some("private")), "{cart}");

    // A resource without its own cache has the server's; a template its own.
    let note = read(&mut server, "shop://note");
    assert_eq!((note["ttlMs"].as_u64(), note["cacheScope"].as_str()), (Some(60_000), Some("public")), "{note}");
    let item = read(&mut server, "shop://items/7");
    assert_eq!(item["contents"][0]["text"], "item 7");
    assert_eq!(item["ttlMs"].as_u64(), Some(0), "{item}");
}

#[test]
fn discovery_on_2026_says_how_long_it_may_be_kept() {
    let dir = TempDir::new("presentation-discover");
    let path = {
        dir.write("ui/cart.html", PAGE);
        dir.write("shop.yaml", CATALOG)
    };
    let mut server = Server::start(&path, &[]);
    let discover = server.result("server/discover", json!({"_meta": meta_2026(json!({}))}));
    assert_eq!(
        (discover["ttlMs"].as_u64(), discover["cacheScope"].as_str()),
        (Some(60_000), Some("public")),
        "{discover}"
    );
    let tools = server.result("tools/list", json!({"_meta": meta_2026(json!({}))}));
    assert_eq!(tools["ttlMs"].as_u64(), Some(60_000), "{tools}");
    let info: &Value = &discover["_meta"]["io.modelcontextprotocol/serverInfo"];
    assert_eq!(info["icons"][0]["src"], "https://shop.example/icon.png", "{discover}");
}
