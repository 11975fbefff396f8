//! The shipped Reservo catalog, end to end over stdio: the exact lists of
//! the product documents, every tool, prompt, resource and completion, and
//! bookings that survive a restart.

use crate::common;

use common::{Server, TempDir, repo_root, text};
use serde_json::{Value, json};

fn reservo() -> std::path::PathBuf {
    repo_root().join("catalogs/reservo.yaml")
}

fn start(db: &TempDir) -> Server {
    let url = format!("sqlite:{}", db.path("reservo.db").display());
    Server::initialized(&reservo(), &[("RESERVO_DATABASE_URL", &url)])
}

#[test]
fn tools_list_matches_the_product_documents() {
    let db = TempDir::new("tools");
    let mut server = start(&db);
    let result = server.result("tools/list", json!({}));
    let expected = json!([
        {"name": "list_rooms",
         "description": "Lists every Reservo room with its base hourly rate in cents. Use this tool when the user asks what rooms are available, without having chosen a specific room yet.",
         "inputSchema": {"type": "object", "properties": {}}},
        {"name": "get_quote",
         "description": "Quotes the price of a room for a tier and a number of hours, without booking anything. Use this tool when the user asks how much a booking costs.",
         "inputSchema": {"type": "object", "properties": {
             "room": {"type": "string", "enum": ["Focus", "Studio", "Boardroom"]},
             "tier": {"type": "string", "enum": ["basic", "pro"]},
             "hours": {"type": "integer"}}, "required": ["room", "tier", "hours"]}},
        {"name": "book_room",
         "description": "Creates a CONFIRMED booking for a room, a tier, and a number of hours, under a member's name. It has real effects: it generates an actual booking. Use this tool only when the user explicitly asks to book, not when they're just asking about the price.",
         "inputSchema": {"type": "object", "properties": {
             "room": {"type": "string", "enum": ["Focus", "Studio", "Boardroom"]},
             "tier": {"type": "string", "enum": ["basic", "pro"]},
             "hours": {"type": "integer"},
             "member": {"type": "string"}}, "required": ["room", "tier", "hours", "member"]}},
        {"name": "cancel_booking",
         "description": "Cancels an existing booking given its id. It's a destructive, irreversible action. Use this tool when the user asks to cancel or undo a booking they already made.",
         "inputSchema": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}}
    ]);
    let tools = result["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 4);
    for (tool, want) in tools.iter().zip(expected.as_array().unwrap()) {
        for key in ["name", "description", "inputSchema"] {
            assert_eq!(tool[key], want[key], "{key} of {}", want["name"]);
        }
    }
    // Key order of the schema is the catalog's (preserve_order).
    let keys: Vec<&String> = tools[1]["inputSchema"]["properties"].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["room", "tier", "hours"]);
    assert_eq!(tools[0]["annotations"]["readOnlyHint"], true);
    assert_eq!(tools[1]["annotations"]["readOnlyHint"], true);
    assert_eq!(tools[3]["annotations"]["destructiveHint"], true);
    assert!(result.get("nextCursor").is_none());
}

#[test]
fn prompts_list_matches_the_product_documents() {
    let db = TempDir::new("prompts");
    let mut server = start(&db);
    let result = server.result("prompts/list", json!({}));
    // Exactly the product documents' JSON: nothing more (no `title`), nothing less.
    assert_eq!(
        result["prompts"],
        json!([{
            "name": "plan_booking",
            "description": "Guide the assistant through checking policy and quoting before booking a room",
            "arguments": [{"name": "room", "description": "Room to plan a booking for", "required": false}]
        }])
    );
}

#[test]
fn initialize_reports_the_catalog_server() {
    let db = TempDir::new("init");
    let url = format!("sqlite:{}", db.path("reservo.db").display());
    let mut server = Server::start(&reservo(), &[("RESERVO_DATABASE_URL", &url)]);
    let result = server.result(
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}),
    );
    assert_eq!(result["protocolVersion"], "2025-06-18");
    assert_eq!(result["serverInfo"]["name"], "reservo");
    assert_eq!(result["serverInfo"]["version"], "1.0.0");
    assert_eq!(result["serverInfo"]["title"], "Reservo");
    assert!(result["instructions"].as_str().unwrap().starts_with("Reservo books meeting rooms by the hour."));
    let caps = &result["capabilities"];
    assert_eq!(caps["tools"]["listChanged"], true);
    assert_eq!(caps["prompts"]["listChanged"], true);
    assert_eq!(caps["resources"], json!({"subscribe": true, "listChanged": true}));
    assert!(caps["completions"].is_object());
    assert!(caps["logging"].is_object());
}

#[test]
fn quotes_rooms_and_refuses_bad_input() {
    let db = TempDir::new("quote");
    let mut server = start(&db);
    let rooms = server.result("tools/call", json!({"name": "list_rooms", "arguments": {}}));
    let listing = text(&rooms);
    for line in ["Focus: 2500", "Studio: 4000", "Boardroom: 9000"] {
        assert!(listing.contains(line), "{listing}");
    }
    let quote = server
        .result("tools/call", json!({"name": "get_quote", "arguments": {"room": "Focus", "tier": "pro", "hours": 3}}));
    assert_eq!(quote["isError"], false);
    assert!(text(&quote).contains("11250 cents"), "{quote}");
    let quote = server.result(
        "tools/call",
        json!({"name": "get_quote", "arguments": {"room": "Boardroom", "tier": "basic", "hours": 2}}),
    );
    assert!(text(&quote).contains("18000 cents"), "{quote}");

    let zero = server
        .result("tools/call", json!({"name": "get_quote", "arguments": {"room": "Focus", "tier": "pro", "hours": 0}}));
    assert_eq!(zero["isError"], true);
    assert_eq!(text(&zero), "hours must be at least 1, got 0");

    let bad = server.result("tools/call", json!({"name": "get_quote", "arguments": {"room": "Attic", "tier": "pro"}}));
    assert_eq!(bad["isError"], true);
    let message = text(&bad);
    assert!(message.contains("`hours` is required"), "{message}");
    assert!(message.contains("`room` must be one of \"Focus\", \"Studio\", \"Boardroom\", got \"Attic\""), "{message}");

    let wrong_type = server.result(
        "tools/call",
        json!({"name": "get_quote", "arguments": {"room": "Focus", "tier": "pro", "hours": "3"}}),
    );
    assert!(text(&wrong_type).contains("`hours` must be of type integer, got string \"3\""), "{wrong_type}");

    let unknown = server.error("tools/call", json!({"name": "get_quot", "arguments": {}}));
    assert_eq!(unknown["code"], -32602);
    assert!(unknown["message"].as_str().unwrap().contains("get_quot"));
}

#[test]
fn bookings_are_created_cancelled_and_survive_a_restart() {
    let db = TempDir::new("book");
    let mut server = start(&db);
    let booked = server.result(
        "tools/call",
        json!({"name": "book_room", "arguments": {"room": "Studio", "tier": "basic", "hours": 2, "member": "Ada"}}),
    );
    assert_eq!(booked["isError"], false, "{booked}");
    let message = text(&booked);
    let id: i64 = message.rsplit('#').next().unwrap().trim().parse().unwrap_or_else(|_| panic!("{message}"));
    let second = server.result(
        "tools/call",
        json!({"name": "book_room", "arguments": {"room": "Focus", "tier": "pro", "hours": 1, "member": "Bo"}}),
    );
    let second_id: i64 = text(&second).rsplit('#').next().unwrap().trim().parse().unwrap();
    assert_eq!(second_id, id + 1);
    let refused = server.result(
        "tools/call",
        json!({"name": "book_room", "arguments": {"room": "Focus", "tier": "pro", "hours": 0, "member": "Bo"}}),
    );
    assert_eq!(refused["isError"], true, "{refused}");
    assert!(server.finish().success());

    // A new process sees the bookings of the old one.
    let mut server = start(&db);
    let cancelled = server.result("tools/call", json!({"name": "cancel_booking", "arguments": {"id": id}}));
    assert_eq!(cancelled["isError"], false, "{cancelled}");
    assert!(text(&cancelled).contains(&format!("#{id}")));
    assert!(text(&cancelled).contains("Ada"));
    let again = server.result("tools/call", json!({"name": "cancel_booking", "arguments": {"id": id}}));
    assert_eq!(again["isError"], true);
    assert_eq!(text(&again), format!("there is no booking #{id}"));
    let other = server.result("tools/call", json!({"name": "cancel_booking", "arguments": {"id": second_id}}));
    assert_eq!(other["isError"], false);
}

#[test]
fn plan_booking_renders_with_and_without_a_room() {
    let db = TempDir::new("prompt");
    let mut server = start(&db);
    let with_room = server.result("prompts/get", json!({"name": "plan_booking", "arguments": {"room": "Boardroom"}}));
    let messages = with_room["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2);
    let first = messages[0]["content"]["text"].as_str().unwrap();
    assert!(first.contains("Boardroom"), "{first}");
    assert!(first.contains("get_quote") && first.contains("confirm"), "{first}");
    assert_eq!(messages[1]["content"]["type"], "resource");
    assert_eq!(messages[1]["content"]["resource"]["uri"], "reservo://policy");
    assert_eq!(messages[1]["content"]["resource"]["mimeType"], "text/markdown");
    assert!(messages[1]["content"]["resource"]["text"].as_str().unwrap().contains("booking policy"));

    let without = server.result("prompts/get", json!({"name": "plan_booking"}));
    let first = without["messages"][0]["content"]["text"].as_str().unwrap();
    assert!(!first.contains("Boardroom") && first.contains("list_rooms"), "{first}");

    let unknown = server.error("prompts/get", json!({"name": "plan"}));
    assert_eq!(unknown["code"], -32602);
}

#[test]
fn resources_read_and_complete() {
    let db = TempDir::new("resources");
    let mut server = start(&db);
    let list = server.result("resources/list", json!({}));
    let uris: Vec<&str> = list["resources"].as_array().unwrap().iter().map(|r| r["uri"].as_str().unwrap()).collect();
    assert_eq!(uris, ["reservo://policy", "reservo://rooms", "reservo://bookings"]);
    let templates = server.result("resources/templates/list", json!({}));
    assert_eq!(templates["resourceTemplates"][0]["uriTemplate"], "reservo://rooms/{room}");

    let policy = server.result("resources/read", json!({"uri": "reservo://policy"}));
    assert_eq!(policy["contents"][0]["mimeType"], "text/markdown");
    assert!(policy["contents"][0]["text"].as_str().unwrap().starts_with("# Reservo booking policy"));

    let rooms = server.result("resources/read", json!({"uri": "reservo://rooms"}));
    let parsed: Value = serde_json::from_str(rooms["contents"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(parsed["Studio"]["rate_cents"], 4000);

    let studio = server.result("resources/read", json!({"uri": "reservo://rooms/Studio"}));
    assert_eq!(studio["contents"][0]["uri"], "reservo://rooms/Studio");
    let parsed: Value = serde_json::from_str(studio["contents"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(parsed, json!({"rate_cents": 4000}));

    let missing = server.error("resources/read", json!({"uri": "reservo://nothing"}));
    assert_eq!(missing["code"], -32002);
    assert_eq!(missing["data"]["uri"], "reservo://nothing");

    let completion = server.result(
        "completion/complete",
        json!({"ref": {"type": "ref/prompt", "name": "plan_booking"}, "argument": {"name": "room", "value": "S"}}),
    );
    assert_eq!(completion["completion"], json!({"values": ["Studio"], "total": 1, "hasMore": false}));
    let completion = server.result(
        "completion/complete",
        json!({"ref": {"type": "ref/resource", "uri": "reservo://rooms/{room}"}, "argument": {"name": "room", "value": ""}}),
    );
    assert_eq!(completion["completion"]["values"], json!(["Focus", "Studio", "Boardroom"]));
}

#[test]
fn subscribers_of_the_bookings_hear_of_each_booking_and_cancellation() {
    let db = TempDir::new("live-bookings");
    let mut server = start(&db);
    let read = |server: &mut Server| -> Value {
        let read = server.result("resources/read", json!({"uri": "reservo://bookings"}));
        assert_eq!(read["contents"][0]["mimeType"], "application/json");
        serde_json::from_str(read["contents"][0]["text"].as_str().unwrap()).unwrap()
    };
    assert_eq!(read(&mut server), json!([]));
    server.result("resources/subscribe", json!({"uri": "reservo://bookings"}));
    let booking = json!({"room": "Focus", "tier": "basic", "hours": 2, "member": "Ada"});
    server.result("tools/call", json!({"name": "book_room", "arguments": booking}));
    let updated = server.wait_notification("notifications/resources/updated");
    assert_eq!(updated["params"]["uri"], "reservo://bookings");
    assert_eq!(read(&mut server), json!([{"id": 1, "room": "Focus", "tier": "basic", "hours": 2, "member": "Ada"}]));
    server.result("tools/call", json!({"name": "cancel_booking", "arguments": {"id": 1}}));
    let updated = server.wait_notification("notifications/resources/updated");
    assert_eq!(updated["params"]["uri"], "reservo://bookings");
    assert_eq!(read(&mut server), json!([]));
}
