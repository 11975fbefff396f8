//! The ceiling: Reservo's four tools as a careful person would write them by
//! hand with rmcp, for `bench ceiling` to hold carte against.
//!
//! A current-thread tokio runtime; stdin/stdout as epoll-driven pipes
//! (`rmcp::transport::stdio_pipes`, which falls back to tokio's stdio when
//! they are not pipes); `rmcp::ServerHandler` implemented by hand (no
//! macros); each tool's arguments parsed with serde into a struct; the same
//! tool list (names, titles, descriptions, input schemas, annotations) and the
//! same answers as `catalogs/reservo.yaml` served by carte: `list_rooms` and
//! `get_quote` computed from the same rates, `book_room` and `cancel_booking`
//! on SQLite with rusqlite, the same table and statements, each statement on
//! tokio's blocking pool (a statement may wait for the database's lock).
//!
//! Run as `ceiling reference DATABASE`: DATABASE is a file path, `sqlite:PATH`
//! or `sqlite::memory:` (what `RESERVO_DATABASE_URL` holds for carte).

use std::sync::{Arc, Mutex};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler, ServiceExt};
use rusqlite::{Connection, OptionalExtension};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

/// The catalog's `setup`.
const SETUP: &str = "CREATE TABLE IF NOT EXISTS bookings (id INTEGER PRIMARY KEY, room TEXT NOT NULL, \
                     tier TEXT NOT NULL, hours INTEGER NOT NULL, member TEXT NOT NULL)";

/// `book_room`'s statement: nothing is inserted unless `hours >= 1`.
const BOOK: &str = "INSERT INTO bookings (room, tier, hours, member) \
                    SELECT :room, :tier, :hours, :member WHERE :hours >= 1 RETURNING id";

/// `cancel_booking`'s statement.
const CANCEL: &str = "DELETE FROM bookings WHERE id = :id RETURNING id, room, member";

const INSTRUCTIONS: &str = "Reservo books meeting rooms by the hour. Quote a price with get_quote before booking, \
                            and book only after the user confirms.";

#[derive(Deserialize, Clone, Copy)]
enum Room {
    Focus,
    Studio,
    Boardroom,
}

impl Room {
    const ALL: [Room; 3] = [Room::Focus, Room::Studio, Room::Boardroom];

    fn name(self) -> &'static str {
        match self {
            Room::Focus => "Focus",
            Room::Studio => "Studio",
            Room::Boardroom => "Boardroom",
        }
    }

    fn rate_cents(self) -> i64 {
        match self {
            Room::Focus => 2500,
            Room::Studio => 4000,
            Room::Boardroom => 9000,
        }
    }
}

#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "lowercase")]
enum Tier {
    Basic,
    Pro,
}

impl Tier {
    fn name(self) -> &'static str {
        match self {
            Tier::Basic => "basic",
            Tier::Pro => "pro",
        }
    }

    fn factor(self) -> f64 {
        match self {
            Tier::Basic => 1.0,
            Tier::Pro => 1.5,
        }
    }
}

#[derive(Deserialize)]
struct Quote {
    room: Room,
    tier: Tier,
    hours: i64,
}

#[derive(Deserialize)]
struct Booking {
    room: Room,
    tier: Tier,
    hours: i64,
    member: String,
}

#[derive(Deserialize)]
struct Cancel {
    id: i64,
}

/// The server: its tool list, made once, and the database.
#[derive(Clone)]
pub struct Reservo {
    tools: Arc<Vec<Tool>>,
    database: Arc<Mutex<Connection>>,
}

impl Reservo {
    /// Opens the database and applies the catalog's `setup`.
    pub fn open(database: &str) -> rusqlite::Result<Reservo> {
        let path = database.strip_prefix("sqlite:").unwrap_or(database);
        let connection = if path == ":memory:" { Connection::open_in_memory()? } else { Connection::open(path)? };
        connection.execute_batch(SETUP)?;
        Ok(Reservo { tools: Arc::new(tools()), database: Arc::new(Mutex::new(connection)) })
    }

    /// Runs `work` on the database, on the blocking pool.
    async fn with_database<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T, ErrorData> {
        let database = self.database.clone();
        let done = tokio::task::spawn_blocking(move || {
            let connection = database.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            work(&connection)
        })
        .await
        .map_err(|err| ErrorData::internal_error(err.to_string(), None))?;
        done.map_err(|err| ErrorData::internal_error(format!("database: {err}"), None))
    }
}

fn tools() -> Vec<Tool> {
    let schema = |value: Value| -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => unreachable!("a schema is an object"),
        }
    };
    let room = json!({ "type": "string", "enum": ["Focus", "Studio", "Boardroom"] });
    let tier = json!({ "type": "string", "enum": ["basic", "pro"] });
    vec![
        Tool::new(
            "list_rooms",
            "Lists every Reservo room with its base hourly rate in cents. Use this tool when the user asks what rooms \
             are available, without having chosen a specific room yet.",
            schema(json!({ "type": "object", "properties": {} })),
        )
        .with_title("List rooms")
        .with_annotations(ToolAnnotations::new().read_only(true)),
        Tool::new(
            "get_quote",
            "Quotes the price of a room for a tier and a number of hours, without booking anything. Use this tool \
             when the user asks how much a booking costs.",
            schema(json!({
                "type": "object",
                "properties": { "room": room, "tier": tier, "hours": { "type": "integer" } },
                "required": ["room", "tier", "hours"],
            })),
        )
        .with_title("Get a quote")
        .with_annotations(ToolAnnotations::new().read_only(true)),
        Tool::new(
            "book_room",
            "Creates a CONFIRMED booking for a room, a tier, and a number of hours, under a member's name. It has \
             real effects: it generates an actual booking. Use this tool only when the user explicitly asks to \
             book, not when they're just asking about the price.",
            schema(json!({
                "type": "object",
                "properties": { "room": room, "tier": tier, "hours": { "type": "integer" }, "member": { "type": "string" } },
                "required": ["room", "tier", "hours", "member"],
            })),
        )
        .with_title("Book a room")
        .with_annotations(ToolAnnotations::new().read_only(false).destructive(false)),
        Tool::new(
            "cancel_booking",
            "Cancels an existing booking given its id. It's a destructive, irreversible action. Use this tool when \
             the user asks to cancel or undo a booking they already made.",
            schema(json!({
                "type": "object",
                "properties": { "id": { "type": "integer" } },
                "required": ["id"],
            })),
        )
        .with_title("Cancel a booking")
        .with_annotations(ToolAnnotations::new().read_only(false).destructive(true).idempotent(true)),
    ]
}

/// The arguments of a call as `T`, or why not: the text of the error result
/// (a tool error, as MCP asks, so that the model can correct its call).
fn arguments<T: DeserializeOwned>(request: CallToolRequestParams) -> Result<T, String> {
    let arguments = Value::Object(request.arguments.unwrap_or_default());
    serde_json::from_value(arguments).map_err(|err| format!("invalid arguments for tool `{}`: {err}", request.name))
}

fn answer(text: String) -> CallToolResponse {
    CallToolResponse::Complete(CallToolResult::success(vec![ContentBlock::text(text)]))
}

fn refusal(text: String) -> CallToolResponse {
    CallToolResponse::Complete(CallToolResult::error(vec![ContentBlock::text(text)]))
}

/// `get_quote`: the rate times the hours times the tier, rounded to a cent
/// (half to even, as minijinja's `round`).
fn quote(quote: Quote) -> CallToolResponse {
    let Quote { room, tier, hours } = quote;
    if hours < 1 {
        return refusal(format!("hours must be at least 1, got {hours}"));
    }
    let cents = (room.rate_cents() as f64 * hours as f64 * tier.factor()).round_ties_even() as i64;
    answer(format!("{} ({}), {hours} h: {cents} cents", room.name(), tier.name()))
}

fn list_rooms() -> CallToolResponse {
    let mut text = String::new();
    for room in Room::ALL {
        text.push_str(&format!("{}: {} cents per hour\n", room.name(), room.rate_cents()));
    }
    answer(text)
}

impl Reservo {
    async fn book(&self, booking: Booking) -> Result<CallToolResponse, ErrorData> {
        let Booking { room, tier, hours, member } = booking;
        let who = member.clone();
        let id = self
            .with_database(move |connection| {
                connection
                    .prepare_cached(BOOK)?
                    .query_row(
                        rusqlite::named_params! {
                            ":room": room.name(), ":tier": tier.name(), ":hours": hours, ":member": who,
                        },
                        |row| row.get::<_, i64>(0),
                    )
                    .optional()
            })
            .await?;
        Ok(match id {
            Some(id) => {
                answer(format!("Booked {} ({}, {hours} h) for {member}: booking #{id}", room.name(), tier.name()))
            }
            None => refusal(format!("hours must be at least 1, got {hours}")),
        })
    }

    async fn cancel(&self, cancel: Cancel) -> Result<CallToolResponse, ErrorData> {
        let id = cancel.id;
        let cancelled = self
            .with_database(move |connection| {
                connection
                    .prepare_cached(CANCEL)?
                    .query_row(rusqlite::named_params! { ":id": id }, |row| {
                        Ok((row.get::<_, String>(1)?, row.get::<_, String>(2)?))
                    })
                    .optional()
            })
            .await?;
        Ok(match cancelled {
            Some((room, member)) => answer(format!("Cancelled booking #{id} ({room} for {member})")),
            None => refusal(format!("there is no booking #{id}")),
        })
    }
}

impl ServerHandler for Reservo {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder().enable_tools().build();
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new("reservo", "1.0.0").with_title("Reservo"))
            .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools.as_ref().clone()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        match &*request.name {
            "get_quote" => Ok(arguments(request).map_or_else(refusal, quote)),
            "list_rooms" => Ok(list_rooms()),
            "book_room" => match arguments(request) {
                Ok(booking) => self.book(booking).await,
                Err(why) => Ok(refusal(why)),
            },
            "cancel_booking" => match arguments(request) {
                Ok(cancel) => self.cancel(cancel).await,
                Err(why) => Ok(refusal(why)),
            },
            name => Err(ErrorData::invalid_params(format!("unknown tool: {name}"), None)),
        }
    }
}

/// Serves Reservo on stdin/stdout until the client closes stdin.
pub fn serve(database: &str) -> Result<(), Box<dyn std::error::Error>> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let server = Reservo::open(database)?;
    runtime.block_on(async {
        let running = server.serve(rmcp::transport::stdio_pipes()).await?;
        running.waiting().await?;
        Ok(())
    })
}
