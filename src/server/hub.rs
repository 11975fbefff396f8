//! The notification hub: every connected session, so that something that
//! happens outside a request (a reload) can reach each client.
//!
//! A session joins when its client has initialized and leaves when its
//! handler is dropped (the connection closed). Sending to one session never
//! waits for another: each send is its own task.
#![allow(deprecated)] // MCP logging is deprecated by SEP-2577 but part of every version carte serves

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam};
use rmcp::service::{Peer, RoleServer};
use serde_json::Value;

/// Every connected session.
#[derive(Default)]
pub struct Hub {
    sessions: Mutex<HashMap<u64, Arc<Session>>>,
    next_id: AtomicU64,
}

/// What carte keeps per client session.
pub struct Session {
    /// Unique within this process.
    pub id: u64,
    peer: Mutex<Option<Peer<RoleServer>>>,
    level: Mutex<Option<LoggingLevel>>,
    subscriptions: Mutex<HashSet<String>>,
}

/// The level a session gets log messages at until it asks for another.
pub const DEFAULT_LEVEL: LoggingLevel = LoggingLevel::Warning;

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

impl Hub {
    /// A new session, not yet joined.
    pub fn new_session(&self) -> Arc<Session> {
        Arc::new(Session {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            peer: Mutex::new(None),
            level: Mutex::new(None),
            subscriptions: Mutex::new(HashSet::new()),
        })
    }

    /// Adds `session`, reachable through `peer`.
    pub fn join(&self, session: &Arc<Session>, peer: Peer<RoleServer>) {
        *lock(&session.peer) = Some(peer);
        lock(&self.sessions).insert(session.id, session.clone());
    }

    /// Removes the session with `id`.
    pub fn leave(&self, id: u64) {
        lock(&self.sessions).remove(&id);
    }

    /// The sessions connected now.
    pub fn sessions(&self) -> Vec<Arc<Session>> {
        lock(&self.sessions).values().cloned().collect()
    }

    /// Sends a log message to every session whose level admits it.
    pub fn log(&self, level: LoggingLevel, logger: &str, data: Value) {
        for session in self.sessions() {
            session.log(level, logger, data.clone());
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

    /// Sends a log message if this session's level admits it, without waiting.
    pub fn log(&self, level: LoggingLevel, logger: &str, data: Value) {
        if !self.admits(level) {
            return;
        }
        if let Some(peer) = lock(&self.peer).clone() {
            let param = LoggingMessageNotificationParam::new(level, data).with_logger(logger);
            tokio::spawn(async move {
                let _ = peer.notify_logging_message(param).await;
            });
        }
    }

    /// Subscribes to updates of `uri`.
    pub fn subscribe(&self, uri: &str) {
        lock(&self.subscriptions).insert(uri.to_owned());
    }

    /// Unsubscribes from `uri`.
    pub fn unsubscribe(&self, uri: &str) {
        lock(&self.subscriptions).remove(uri);
    }

    /// The URIs this session subscribed to.
    pub fn subscriptions(&self) -> Vec<String> {
        lock(&self.subscriptions).iter().cloned().collect()
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
