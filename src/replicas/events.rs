//! What replicas tell each other on [`CHANNEL`](super::CHANNEL): a write
//! committed on a database (the others read their subscribed live resources
//! of it again), a task cancelled or answered (the replica running it stops
//! it or wakes it).
//!
//! Each replica keeps one connection of its own (not from the pool) that
//! `LISTEN`s; it is made again with backoff when it drops, and after a
//! reconnect every database counts as changed once (events may have been
//! missed; only subscribed resources are read again) and the tasks running
//! here are checked: one settled meanwhile (cancelled, or failed because
//! the others took this replica for stopped) stops. Events are published
//! with `SELECT pg_notify(…)` on a pooled connection after the change
//! committed; the writes on one database share a notice not sent yet (so at
//! most one waits per database). A replica ignores the events it published (their `origin`).

use std::sync::Arc;
use std::time::Duration;

use crate::sync::lock;

use futures::StreamExt as _;
use serde::{Deserialize, Serialize};
use tokio_postgres::{AsyncMessage, NoTls};
use tokio_util::sync::CancellationToken;

use super::{CHANNEL, Replicas};

/// PostgreSQL refuses a `NOTIFY` payload of 8000 bytes or more.
const MAX_PAYLOAD: usize = 7999;

/// The listener's `application_name` (`pg_stat_activity` tells it from the pool's `carte`).
pub const LISTENER_NAME: &str = "carte-listener";

/// Events received and not yet handled, at most.
const EVENTS_QUEUED: usize = 1024;

/// What a replica does with what the others tell it.
pub trait Listener: Send + Sync + 'static {
    /// Another replica committed a write on `database`.
    fn changed(self: &Arc<Self>, database: &str);
    /// Another replica cancelled or answered task `id`.
    fn task(&self, id: &str, cancelled: bool);
    /// The connection came back: what the others said meanwhile was not
    /// heard (every database counts as changed, running tasks are checked).
    fn missed(self: &Arc<Self>) -> impl Future<Output = ()> + Send;
}

/// An event on [`CHANNEL`](super::CHANNEL).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Event {
    /// A tool's write committed on this database of the catalog.
    Changed {
        /// The database's name in the catalog.
        database: String,
    },
    /// A task was cancelled, or got answers, through another replica.
    Task {
        /// The task.
        id: String,
        /// Cancelled (else answered).
        cancelled: bool,
    },
}

/// An event as it travels: who published it.
#[derive(Debug, Serialize, Deserialize)]
struct Envelope {
    origin: String,
    #[serde(flatten)]
    event: Event,
}

/// Waits between attempts to connect: from 100 ms, doubling, at most 10 s.
#[derive(Debug)]
pub struct Backoff {
    /// Attempts that failed since a connection last held.
    failed: u32,
}

impl Backoff {
    const FIRST: Duration = Duration::from_millis(100);
    const MOST: Duration = Duration::from_secs(10);

    /// A backoff that starts over.
    pub fn new() -> Backoff {
        Backoff { failed: 0 }
    }

    /// How long to wait before the next attempt (each longer, up to the most).
    pub fn delay(&mut self) -> Duration {
        self.failed = self.failed.saturating_add(1);
        crate::duration::doubling(Backoff::FIRST, self.failed, Backoff::MOST)
    }

    /// A connection held: the next failure waits the least again.
    pub fn reset(&mut self) {
        self.failed = 0;
    }
}

impl Default for Backoff {
    fn default() -> Backoff {
        Backoff::new()
    }
}

impl Replicas {
    /// Tells the other replicas about `event` (in the background; a failure is logged).
    pub fn publish(self: &Arc<Self>, event: Event) {
        let envelope = Envelope { origin: self.origin.clone(), event };
        let payload = match serde_json::to_string(&envelope) {
            Ok(payload) if payload.len() <= MAX_PAYLOAD => payload,
            Ok(payload) => {
                tracing::warn!("not told to the other replicas: an event of {} bytes is too long", payload.len());
                return;
            }
            Err(err) => {
                tracing::error!("internal: an event is not JSON: {err}");
                return;
            }
        };
        // Writes on one database share a notice not sent yet: it is sent after they committed.
        let coalesced = match &envelope.event {
            Event::Changed { database } => {
                if !lock(&self.unsent).insert(database.clone()) {
                    return;
                }
                Some(database.clone())
            }
            Event::Task { .. } => None,
        };
        let replicas = Arc::clone(self);
        tokio::spawn(async move {
            if let Some(database) = coalesced {
                lock(&replicas.unsent).remove(&database);
            }
            let sent = async {
                let client = replicas.client().await?;
                client
                    .execute("SELECT pg_notify($1, $2)", &[&CHANNEL, &payload])
                    .await
                    .map_err(|err| format!("NOTIFY failed: {}", super::reason(&err)))
            };
            if let Err(reason) = sent.await {
                tracing::warn!("not told to the other replicas ({payload}): {reason}");
            }
        });
    }

    /// Keeps a `LISTEN` connection until `stop`, creating the tables on each
    /// connect, and hands the other replicas' events to `shared`.
    pub async fn listen(self: Arc<Self>, shared: Arc<impl Listener>, stop: CancellationToken) {
        let mut backoff = Backoff::new();
        let mut connected_before = false;
        loop {
            let reason = tokio::select! {
                reason = self.listen_once(&shared, &mut backoff, connected_before) => reason,
                () = stop.cancelled() => return,
            };
            connected_before |= self.down.lock().map(|down| down.is_none()).unwrap_or(false);
            let delay = backoff.delay();
            tracing::warn!("state database {}: {reason}; trying again in {delay:?}", self.shown);
            self.set_down(Some(reason));
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = stop.cancelled() => return,
            }
        }
    }

    /// One connection: connect, create the tables, `LISTEN`, then hand
    /// events on until it drops; why it ended.
    async fn listen_once(&self, shared: &Arc<impl Listener>, backoff: &mut Backoff, reconnect: bool) -> String {
        let mut config = self.config.clone();
        config.application_name(LISTENER_NAME);
        let (client, mut connection) = match config.connect(NoTls).await {
            Ok(connected) => connected,
            Err(err) => return format!("cannot connect: {}", super::reason(&err)),
        };
        // Bounded: a listener behind holds the connection's reading back (PostgreSQL queues the rest).
        let (events, mut received) = tokio::sync::mpsc::channel(EVENTS_QUEUED);
        let driver = tokio::spawn(async move {
            let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
            while let Some(message) = messages.next().await {
                match message {
                    Ok(AsyncMessage::Notification(notification)) => {
                        if events.send(notification.payload().to_owned()).await.is_err() {
                            return "the listener stopped".to_owned();
                        }
                    }
                    Ok(_) => {}
                    Err(err) => return format!("the connection failed: {}", super::reason(&err)),
                }
            }
            "the connection closed".to_owned()
        });
        if let Err(err) = super::create_tables(&client, true).await {
            driver.abort();
            return format!("cannot create the tables or listen: {}", super::reason(&err));
        }
        // Held as long as this connection: the others' sign that this replica lives.
        if let Err(err) = client.execute("SELECT pg_advisory_lock($1)", &[&self.alive_lock]).await {
            driver.abort();
            return format!("cannot take this replica's lock: {}", super::reason(&err));
        }
        self.set_down(None);
        backoff.reset();
        tracing::info!("state database {}: listening for the other replicas", self.shown);
        if reconnect {
            shared.missed().await;
        }
        while let Some(payload) = received.recv().await {
            self.receive(shared, &payload);
        }
        drop(client);
        driver.await.unwrap_or_else(|err| format!("the connection's task failed: {err}"))
    }

    /// An event another replica published (or this one: ignored).
    fn receive(&self, shared: &Arc<impl Listener>, payload: &str) {
        let envelope: Envelope = match serde_json::from_str(payload) {
            Ok(envelope) => envelope,
            Err(err) => {
                tracing::warn!("ignored an event on {CHANNEL} that is not carte's: {err}");
                return;
            }
        };
        if envelope.origin == self.origin {
            return;
        }
        tracing::debug!("event from replica {}: {:?}", envelope.origin, envelope.event);
        match envelope.event {
            Event::Changed { database } => shared.changed(&database),
            Event::Task { id, cancelled } => shared.task(&id, cancelled),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_its_most_and_starts_over_after_a_connection() {
        let mut backoff = Backoff::new();
        let delays: Vec<Duration> = (0..9).map(|_| backoff.delay()).collect();
        let ms: Vec<u128> = delays.iter().map(Duration::as_millis).collect();
        assert_eq!(ms, [100, 200, 400, 800, 1600, 3200, 6400, 10_000, 10_000]);
        backoff.reset();
        assert_eq!(backoff.delay(), Duration::from_millis(100));
    }

    #[test]
    fn events_travel_as_small_json_with_their_origin() {
        let envelope = Envelope { origin: "a".to_owned(), event: Event::Changed { database: "shop".to_owned() } };
        let text = serde_json::to_string(&envelope).unwrap();
        assert_eq!(text, r#"{"origin":"a","kind":"changed","database":"shop"}"#);
        let task: Envelope =
            serde_json::from_str(r#"{"origin":"b","kind":"task","id":"t1","cancelled":true}"#).unwrap();
        assert_eq!(task.event, Event::Task { id: "t1".to_owned(), cancelled: true });
        assert!(serde_json::from_str::<Envelope>(r#"{"origin":"b","kind":"other"}"#).is_err());
    }
}
