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
#![allow(deprecated)] // MCP logging/subscribe are deprecated by SEP-2577 but part of every version carte serves

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam, ResourceUpdatedNotificationParam};
use rmcp::service::{Peer, RoleServer, SubscriptionSink};
use serde_json::Value;
use tokio::sync::mpsc;

/// Longest one notification may take to hand to a client's transport.
pub const SEND_TIMEOUT: Duration = Duration::from_secs(5);

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
}

/// Every connected client.
#[derive(Default)]
pub struct Hub {
    members: Mutex<HashMap<u64, Member>>,
    next_id: AtomicU64,
}

struct Member {
    outbox: mpsc::Sender<Note>,
    kind: Kind,
}

enum Kind {
    Session(Arc<Session>),
    Listen(Arc<rmcp::model::SubscriptionFilter>),
}

/// What carte keeps per legacy client session.
pub struct Session {
    /// Unique within this process.
    pub id: u64,
    level: Mutex<Option<LoggingLevel>>,
    subscriptions: Mutex<HashSet<String>>,
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

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
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

impl Hub {
    /// A new session, not yet joined.
    pub fn new_session(&self) -> Arc<Session> {
        Arc::new(Session {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            level: Mutex::new(None),
            subscriptions: Mutex::new(HashSet::new()),
        })
    }

    /// Adds a legacy `session`, reachable through `peer`, with its delivery task.
    pub fn join(&self, session: &Arc<Session>, peer: Peer<RoleServer>) {
        let (outbox, notes) = mpsc::channel(QUEUE);
        tokio::spawn(deliver_to_session(notes, peer));
        lock(&self.members).insert(session.id, Member { outbox, kind: Kind::Session(session.clone()) });
    }

    /// Adds a 2026-07-28 listen stream until the returned membership is dropped.
    pub fn listen(&self, sink: SubscriptionSink) -> Membership<'_> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let filter = Arc::new(sink.accepted().clone());
        let (outbox, notes) = mpsc::channel(QUEUE);
        tokio::spawn(deliver_to_listener(notes, sink));
        lock(&self.members).insert(id, Member { outbox, kind: Kind::Listen(filter) });
        Membership { hub: self, id }
    }

    /// Removes the member with `id`; its delivery task ends with its queue.
    pub fn leave(&self, id: u64) {
        lock(&self.members).remove(&id);
    }

    /// How many clients are connected.
    pub fn len(&self) -> usize {
        lock(&self.members).len()
    }

    /// Whether no client is connected.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every resource URI some client subscribed to.
    pub fn subscribed_uris(&self) -> BTreeSet<String> {
        let members = lock(&self.members);
        let mut uris = BTreeSet::new();
        for member in members.values() {
            match &member.kind {
                Kind::Session(session) => uris.extend(lock(&session.subscriptions).iter().cloned()),
                Kind::Listen(filter) => uris.extend(filter.resource_subscriptions.iter().flatten().cloned()),
            }
        }
        uris
    }

    /// Queues the notifications for `changes` to every client that should hear them.
    pub fn announce(&self, changes: &Changes) {
        self.each(|kind| {
            let mut notes = Vec::new();
            let (tools, prompts, resources) = match kind {
                Kind::Session(_) => (true, true, true),
                Kind::Listen(filter) => (
                    filter.tools_list_changed == Some(true),
                    filter.prompts_list_changed == Some(true),
                    filter.resources_list_changed == Some(true),
                ),
            };
            if changes.tools && tools {
                notes.push(Note::ToolsChanged);
            }
            if changes.prompts && prompts {
                notes.push(Note::PromptsChanged);
            }
            if changes.resources && resources {
                notes.push(Note::ResourcesChanged);
            }
            for uri in &changes.updated {
                let subscribed = match kind {
                    Kind::Session(session) => lock(&session.subscriptions).contains(uri),
                    Kind::Listen(filter) => {
                        filter.resource_subscriptions.as_ref().is_some_and(|uris| uris.contains(uri))
                    }
                };
                if subscribed {
                    notes.push(Note::Updated(uri.clone()));
                }
            }
            notes
        });
    }

    /// Queues a log message to every session whose level admits it
    /// (listen streams carry no log messages).
    pub fn log(&self, level: LoggingLevel, logger: &str, data: Value) {
        self.each(|kind| match kind {
            Kind::Session(session) if session.admits(level) => {
                vec![Note::Log { level, logger: logger.to_owned(), data: data.clone() }]
            }
            _ => Vec::new(),
        });
    }

    /// Queues what `notes_for` picks for each member, without waiting for any.
    fn each(&self, notes_for: impl Fn(&Kind) -> Vec<Note>) {
        let members = lock(&self.members);
        for (id, member) in members.iter() {
            for note in notes_for(&member.kind) {
                if let Err(mpsc::error::TrySendError::Full(note)) = member.outbox.try_send(note) {
                    tracing::warn!("client {id} is not reading its notifications; dropped {note:?}");
                }
            }
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

    /// Subscribes to updates of `uri`.
    pub fn subscribe(&self, uri: &str) {
        lock(&self.subscriptions).insert(uri.to_owned());
    }

    /// Unsubscribes from `uri`.
    pub fn unsubscribe(&self, uri: &str) {
        lock(&self.subscriptions).remove(uri);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_filter_messages() {
        let hub = Hub::default();
        let session = hub.new_session();
        assert!(session.admits(LoggingLevel::Error));
        assert!(!session.admits(LoggingLevel::Info));
        session.set_level(LoggingLevel::Debug);
        assert!(session.admits(LoggingLevel::Debug));
        session.set_level(LoggingLevel::Critical);
        assert!(!session.admits(LoggingLevel::Error));
    }
}
