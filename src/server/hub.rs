//! The notification hub: every connected client, so that something that
//! happens outside a request (a reload) can reach each of them.
//!
//! Two kinds of members join: a legacy session (after `initialize`; it has a
//! log level and `resources/subscribe` URIs) and a 2026-07-28
//! `subscriptions/listen` stream (its accepted filter says what it hears).
//! Each member has its own queue and its own delivery task, so a client gets
//! its notifications in order, and a slow or vanished client never delays
//! the others or the reload: when its queue is full, notes for it are
//! dropped (and logged); each send is bounded by [`SEND_TIMEOUT`].
//!
//! Every per-client structure is bounded: a member subscribes to at most
//! [`MAX_SUBSCRIPTIONS`] resources, and finding who subscribed to a changed
//! resource is a lookup in an index (URI → members), not a scan of every
//! member's subscriptions.
#![allow(deprecated)] // MCP logging/subscribe are deprecated by SEP-2577 but part of every version carte serves

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::sync::lock;

use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam, ResourceUpdatedNotificationParam};
use rmcp::service::{Peer, RoleServer, SubscriptionSink};
use serde_json::Value;
use tokio::sync::mpsc;

use crate::catalog::Fingerprint;
use crate::catalog::model::LogLevel;

/// Longest one notification may take to hand to a client's transport.
pub const SEND_TIMEOUT: Duration = Duration::from_secs(5);

/// Most resources one client may subscribe to (with `resources/subscribe`, or
/// in the filter of one `subscriptions/listen`).
pub const MAX_SUBSCRIPTIONS: usize = 1_000;

/// Notes waiting for one client before further ones are dropped.
const QUEUE: usize = 256;

/// The level a session gets log messages at until it asks for another.
pub const DEFAULT_LEVEL: LoggingLevel = LoggingLevel::Warning;

/// One notification for one client.
#[derive(Debug, Clone, PartialEq)]
pub enum Note {
    /// `notifications/tools/list_changed`.
    ToolsChanged,
    /// `notifications/prompts/list_changed`.
    PromptsChanged,
    /// `notifications/resources/list_changed`.
    ResourcesChanged,
    /// `notifications/resources/updated` for this URI.
    Updated(String),
    /// `notifications/message`.
    Log {
        /// Its level.
        level: LoggingLevel,
        /// Its logger.
        logger: String,
        /// Its data.
        data: Value,
    },
}

/// What changed in one reload, for [`Hub::announce`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    /// What `tools/list` returns changed.
    pub tools: bool,
    /// What `prompts/list` returns changed.
    pub prompts: bool,
    /// What `resources/list` or `resources/templates/list` returns changed.
    pub resources: bool,
    /// Resource URIs, among those subscribed to, whose contents changed.
    pub updated: BTreeSet<String>,
    /// Toolsets whose `tools/list` changed (or that came or went): only
    /// their clients hear `tools/list_changed` ([`Changes::tools`] is for
    /// the clients of every tool).
    pub toolsets: BTreeSet<String>,
}

/// A log message that follows a reload's notifications to each session whose
/// level admits it. `data` is built per session from the updated URIs that
/// session subscribed to, so no client learns what another subscribed to.
pub struct Report<'a> {
    /// Its level.
    pub level: LogLevel,
    /// Its logger.
    pub logger: &'a str,
    /// Builds the data for one session from the URIs it is told were updated.
    pub data: &'a dyn Fn(&[&str]) -> Value,
}

/// Why a subscription was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubscribeError {
    /// The client already has [`MAX_SUBSCRIPTIONS`].
    #[error("a client may subscribe to at most {MAX_SUBSCRIPTIONS} resources; unsubscribe from some first")]
    TooMany,
    /// The session has not joined the hub (no `initialize` yet).
    #[error("the session has not started; send `initialize` first")]
    NotJoined,
}

/// Every connected client.
#[derive(Default)]
pub struct Hub {
    state: Mutex<State>,
    next_id: AtomicU64,
}

#[derive(Default)]
struct State {
    members: HashMap<u64, Member>,
    /// Each subscribed URI → the members subscribed to it.
    subscribers: HashMap<String, HashSet<u64>>,
    /// The last contents read of subscribed URIs that read a database (live
    /// resources), to tell whether a write changed them; an entry goes with
    /// the URI's last subscriber.
    contents: HashMap<String, Fingerprint>,
}

struct Member {
    outbox: mpsc::Sender<Note>,
    kind: Kind,
    /// The toolset whose tools it sees (`None`: every tool).
    toolset: Option<Arc<str>>,
    /// The resources it subscribed to (at most [`MAX_SUBSCRIPTIONS`]).
    uris: HashSet<String>,
}

enum Kind {
    Session(Arc<Session>),
    /// A listen stream, with the list notifications its filter accepted.
    Listen {
        tools: bool,
        prompts: bool,
        resources: bool,
    },
}

/// What carte keeps per legacy client session.
pub struct Session {
    /// Unique within this process.
    pub id: u64,
    /// The toolset it sees (`None`: every tool).
    pub toolset: Option<Arc<str>>,
    level: Mutex<Option<LoggingLevel>>,
}

/// carte's log level as MCP's.
pub(in crate::server) fn wire_level(level: LogLevel) -> LoggingLevel {
    match level {
        LogLevel::Debug => LoggingLevel::Debug,
        LogLevel::Info => LoggingLevel::Info,
        LogLevel::Notice => LoggingLevel::Notice,
        LogLevel::Warning => LoggingLevel::Warning,
        LogLevel::Error => LoggingLevel::Error,
        LogLevel::Critical => LoggingLevel::Critical,
        LogLevel::Alert => LoggingLevel::Alert,
        LogLevel::Emergency => LoggingLevel::Emergency,
    }
}

/// Orders MCP log levels (rmcp's type has no ordering).
pub fn severity(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

/// Removes a `subscriptions/listen` stream from the hub when dropped.
pub struct Membership<'a> {
    hub: &'a Hub,
    id: u64,
}

impl Drop for Membership<'_> {
    fn drop(&mut self) {
        self.hub.leave(self.id);
    }
}

impl State {
    fn insert(&mut self, id: u64, member: Member) {
        self.remove(id);
        for uri in &member.uris {
            self.subscribers.entry(uri.clone()).or_default().insert(id);
        }
        self.members.insert(id, member);
    }

    fn remove(&mut self, id: u64) {
        if let Some(member) = self.members.remove(&id) {
            self.unindex(id, &member.uris);
        }
    }

    fn unindex<'a>(&mut self, id: u64, uris: impl IntoIterator<Item = &'a String>) {
        for uri in uris {
            if let Some(ids) = self.subscribers.get_mut(uri) {
                ids.remove(&id);
                if ids.is_empty() {
                    self.subscribers.remove(uri);
                    self.contents.remove(uri);
                }
            }
        }
    }
}

impl Hub {
    /// A new session, not yet joined.
    pub fn new_session(&self) -> Arc<Session> {
        self.new_session_in(None)
    }

    /// A new session of `toolset`'s clients (`None`: every tool), not yet joined.
    pub fn new_session_in(&self, toolset: Option<Arc<str>>) -> Arc<Session> {
        Arc::new(Session { id: self.next_id.fetch_add(1, Ordering::Relaxed), toolset, level: Mutex::new(None) })
    }

    /// Adds a legacy `session`, reachable through `peer`, with its delivery task.
    /// A session that joins again (a second `initialize`) keeps its subscriptions.
    pub fn join(&self, session: &Arc<Session>, peer: Peer<RoleServer>) {
        let (outbox, notes) = mpsc::channel(QUEUE);
        tokio::spawn(deliver_to_session(notes, peer));
        let mut state = lock(&self.state);
        let uris = state.members.get(&session.id).map(|m| m.uris.clone()).unwrap_or_default();
        let toolset = session.toolset.clone();
        state.insert(session.id, Member { outbox, kind: Kind::Session(session.clone()), toolset, uris });
    }

    /// Adds a 2026-07-28 listen stream until the returned membership is
    /// dropped. `uris` are the resources it listens to, already validated
    /// (at most [`MAX_SUBSCRIPTIONS`]; see `Handler::listen`); `toolset`,
    /// the one whose tools its client sees (`None`: every tool).
    pub fn listen(&self, sink: SubscriptionSink, uris: HashSet<String>, toolset: Option<Arc<str>>) -> Membership<'_> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let filter = sink.accepted();
        let kind = Kind::Listen {
            tools: filter.tools_list_changed == Some(true),
            prompts: filter.prompts_list_changed == Some(true),
            resources: filter.resources_list_changed == Some(true),
        };
        let (outbox, notes) = mpsc::channel(QUEUE);
        tokio::spawn(deliver_to_listener(notes, sink));
        lock(&self.state).insert(id, Member { outbox, kind, toolset, uris });
        Membership { hub: self, id }
    }

    /// Removes the member with `id`; its delivery task ends with its queue.
    pub fn leave(&self, id: u64) {
        lock(&self.state).remove(id);
    }

    /// Subscribes `session` to updates of `uri`. Subscribing twice is one subscription.
    pub fn subscribe(&self, session: &Session, uri: &str) -> Result<(), SubscribeError> {
        let mut state = lock(&self.state);
        let member = state.members.get_mut(&session.id).ok_or(SubscribeError::NotJoined)?;
        if member.uris.contains(uri) {
            return Ok(());
        }
        if member.uris.len() >= MAX_SUBSCRIPTIONS {
            return Err(SubscribeError::TooMany);
        }
        member.uris.insert(uri.to_owned());
        state.subscribers.entry(uri.to_owned()).or_default().insert(session.id);
        Ok(())
    }

    /// Unsubscribes `session` from `uri` (nothing happens if it was not subscribed).
    pub fn unsubscribe(&self, session: &Session, uri: &str) {
        let mut state = lock(&self.state);
        let removed = state.members.get_mut(&session.id).is_some_and(|member| member.uris.remove(uri));
        if removed {
            state.unindex(session.id, [&uri.to_owned()]);
        }
    }

    /// How many clients are connected.
    pub fn len(&self) -> usize {
        lock(&self.state).members.len()
    }

    /// Whether no client is connected.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every resource URI some client subscribed to.
    pub fn subscribed_uris(&self) -> BTreeSet<String> {
        lock(&self.state).subscribers.keys().cloned().collect()
    }

    /// Records `read` as the contents of the subscribed `uri` and says
    /// whether they changed since the last record (a URI never recorded
    /// has changed: its subscribers may not know the contents). A URI nobody
    /// subscribes to is not recorded.
    pub fn record(&self, uri: &str, read: Fingerprint) -> bool {
        let mut state = lock(&self.state);
        if !state.subscribers.contains_key(uri) {
            return false;
        }
        state.contents.insert(uri.to_owned(), read) != Some(read)
    }

    /// Records `read` as what the subscribers of `uri` know of it, unless
    /// a later read was recorded already (a subscription's first read).
    pub fn record_first(&self, uri: &str, read: Fingerprint) {
        let mut state = lock(&self.state);
        if state.subscribers.contains_key(uri) {
            state.contents.entry(uri.to_owned()).or_insert(read);
        }
    }

    /// Queues the notifications for `changes` to every client that should
    /// hear them, then `report` to each session whose level admits it. Who
    /// hears of an updated resource is looked up in the index, per URI.
    pub fn announce(&self, changes: &Changes, report: Option<&Report<'_>>) {
        let state = lock(&self.state);
        let mut updated: HashMap<u64, Vec<&str>> = HashMap::new();
        for uri in &changes.updated {
            for id in state.subscribers.get(uri).into_iter().flatten() {
                updated.entry(*id).or_default().push(uri);
            }
        }
        for (id, member) in &state.members {
            let (tools, prompts, resources) = match &member.kind {
                Kind::Session(_) => (true, true, true),
                Kind::Listen { tools, prompts, resources } => (*tools, *prompts, *resources),
            };
            let mut notes = Vec::new();
            let tools_changed = match &member.toolset {
                None => changes.tools,
                Some(toolset) => changes.toolsets.contains(&**toolset),
            };
            if tools_changed && tools {
                notes.push(Note::ToolsChanged);
            }
            if changes.prompts && prompts {
                notes.push(Note::PromptsChanged);
            }
            if changes.resources && resources {
                notes.push(Note::ResourcesChanged);
            }
            let uris = updated.get(id).map(Vec::as_slice).unwrap_or_default();
            notes.extend(uris.iter().map(|uri| Note::Updated((*uri).to_owned())));
            if let (Some(report), Kind::Session(session)) = (report, &member.kind)
                && session.admits(wire_level(report.level))
            {
                notes.push(Note::Log {
                    level: wire_level(report.level),
                    logger: report.logger.to_owned(),
                    data: (report.data)(uris),
                });
            }
            queue(*id, member, notes);
        }
    }

    /// Queues a log message to every session whose level admits it
    /// (listen streams carry no log messages).
    pub fn log(&self, level: LogLevel, logger: &str, data: Value) {
        let level = wire_level(level);
        let state = lock(&self.state);
        for (id, member) in &state.members {
            if let Kind::Session(session) = &member.kind
                && session.admits(level)
            {
                queue(*id, member, vec![Note::Log { level, logger: logger.to_owned(), data: data.clone() }]);
            }
        }
    }
}

/// Queues `notes` for one member, without waiting.
fn queue(id: u64, member: &Member, notes: Vec<Note>) {
    for note in notes {
        if let Err(mpsc::error::TrySendError::Full(note)) = member.outbox.try_send(note) {
            tracing::warn!("client {id} is not reading its notifications; dropped {note:?}");
        }
    }
}

async fn deliver_to_session(mut notes: mpsc::Receiver<Note>, peer: Peer<RoleServer>) {
    while let Some(note) = notes.recv().await {
        let sent = tokio::time::timeout(SEND_TIMEOUT, async {
            match note {
                Note::ToolsChanged => peer.notify_tool_list_changed().await,
                Note::PromptsChanged => peer.notify_prompt_list_changed().await,
                Note::ResourcesChanged => peer.notify_resource_list_changed().await,
                Note::Updated(uri) => peer.notify_resource_updated(ResourceUpdatedNotificationParam::new(uri)).await,
                Note::Log { level, logger, data } => {
                    peer.notify_logging_message(LoggingMessageNotificationParam::new(level, data).with_logger(logger))
                        .await
                }
            }
        })
        .await;
        match sent {
            Ok(Ok(())) => {}
            Ok(Err(err)) if peer.is_transport_closed() => {
                tracing::debug!("session closed: {err}");
                return;
            }
            Ok(Err(err)) => tracing::debug!("a notification was not sent: {err}"),
            Err(_) => tracing::warn!("a client took over {SEND_TIMEOUT:?} to accept a notification; skipped it"),
        }
    }
}

async fn deliver_to_listener(mut notes: mpsc::Receiver<Note>, sink: SubscriptionSink) {
    while let Some(note) = notes.recv().await {
        let sent = tokio::time::timeout(SEND_TIMEOUT, async {
            match note {
                Note::ToolsChanged => sink.notify_tool_list_changed().await,
                Note::PromptsChanged => sink.notify_prompt_list_changed().await,
                Note::ResourcesChanged => sink.notify_resource_list_changed().await,
                Note::Updated(uri) => sink.notify_resource_updated(uri).await,
                Note::Log { .. } => Ok(()),
            }
        })
        .await;
        match sent {
            Ok(Ok(())) => {}
            Ok(Err(rmcp::service::SubscriptionSendError::SubscriptionClosed)) => return,
            Ok(Err(err)) => tracing::debug!("a notification was not sent: {err}"),
            Err(_) => tracing::warn!("a client took over {SEND_TIMEOUT:?} to accept a notification; skipped it"),
        }
    }
}

impl Session {
    /// The level this session asked for with `logging/setLevel`.
    pub fn set_level(&self, level: LoggingLevel) {
        *lock(&self.level) = Some(level);
    }

    /// The level this session gets log messages at.
    pub fn level(&self) -> LoggingLevel {
        lock(&self.level).unwrap_or(DEFAULT_LEVEL)
    }

    /// Whether a message at `level` goes to this session.
    pub fn admits(&self, level: LoggingLevel) -> bool {
        severity(level) >= severity(self.level())
    }
}

#[cfg(test)]
mod tests;
