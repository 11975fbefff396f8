//! Legacy Streamable HTTP sessions, bounded: rmcp's in-memory session
//! manager behind a cap on live sessions, an idle timeout, and one GET
//! stream per session.
//!
//! - A new session beyond `max_sessions` is refused; the HTTP layer turns
//!   that into 503 with a JSON-RPC error (see [`watch`]).
//! - A session is idle when no request of its client arrived for `idle` and
//!   no response stream of it is open: an open GET stream keeps its session
//!   (a client waiting for notifications is not idle; the stream's SSE pings
//!   notice a vanished client, and the timeout then runs from there). Idle
//!   sessions are closed by [`Sessions::expire_idle`]; rmcp's own idle timer
//!   is off, since it does not see open streams.
//! - A second GET stream on a session whose first one is open is refused
//!   (409): only one of them would hear notifications anyway.
//!
//! Every live session counts, idle or streaming, until it is closed.
//!
//! With `--state`, rmcp keeps each session's `initialize` in the replicas'
//! store and restores a session another replica started (replaying it):
//! a restored session counts against this replica's cap like a new one.
//! Each sweep tick marks the sessions active here in the store and drops
//! those no replica saw for the idle timeout.
//!
//! Memory: nothing of a closed session stays reachable, but glibc's
//! allocator keeps what the session's tasks freed in its per-thread arenas
//! (fragmented, so never trimmed on its own): 10,000 sessions come and gone
//! left 150 MB resident. After sessions close, the next sweep hands free
//! pages back to the system ([`release_freed_memory`]).

use std::cell::Cell;
use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::Stream;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::session::ServerSseMessage;
use rmcp::transport::streamable_http_server::session::local::{LocalSessionManager, LocalSessionManagerError};
use rmcp::transport::streamable_http_server::{RestoreOutcome, SessionId, SessionManager};
use tokio_util::sync::CancellationToken;

use super::session_store::PgSessions;

/// Why the session manager refused a request, for the HTTP layer to answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// No new session: this many are live.
    Full(usize),
    /// The session already has its GET stream open.
    StreamOpen,
    /// The new session could not be stored where the replicas share them
    /// (`--state`): no other replica would know it.
    Unstored,
}

tokio::task_local! {
    static REFUSAL: Cell<Option<Refusal>>;
}

/// Runs a request through rmcp and tells whether the session manager refused
/// it (rmcp itself only knows how to answer that with a 500).
pub async fn watch<F: Future>(request: F) -> (F::Output, Option<Refusal>) {
    REFUSAL
        .scope(Cell::new(None), async {
            let output = request.await;
            (output, REFUSAL.with(Cell::get))
        })
        .await
}

pub(crate) fn refuse(refusal: Refusal) {
    let _ = REFUSAL.try_with(|cell| cell.set(Some(refusal)));
}

/// Errors of [`Sessions`].
#[derive(Debug, thiserror::Error)]
pub enum SessionsError {
    /// No new session: the cap is reached.
    #[error("the server is at its session limit ({0} sessions)")]
    Full(usize),
    /// A second GET stream on one session.
    #[error("this session already has an open GET stream")]
    StreamOpen,
    /// rmcp's session manager failed.
    #[error(transparent)]
    Local(#[from] LocalSessionManagerError),
}

/// One live session's activity.
struct Life {
    last_active: Instant,
    /// Response streams open now (its GET stream, replies being written).
    open: usize,
    /// Whether its GET stream is open.
    listening: bool,
    /// With OAuth: the caller who started it, the only one who may use it.
    owner: Option<Box<str>>,
}

#[derive(Default)]
struct Live {
    sessions: HashMap<SessionId, Life>,
    /// Sessions being created (counted against the cap already).
    creating: usize,
}

/// rmcp's [`LocalSessionManager`], bounded (see the module doc).
pub struct Sessions {
    local: LocalSessionManager,
    limit: usize,
    idle: Duration,
    live: Arc<Mutex<Live>>,
    /// Sessions closed since memory was last handed back.
    closed: AtomicBool,
    /// Where the replicas keep sessions (`--state`): each sweep marks the
    /// sessions active since the last one there and drops the idle ones.
    shared: Option<Arc<PgSessions>>,
}

impl Sessions {
    /// At most `limit` live sessions, each closed after `idle` without activity.
    pub fn new(limit: usize, idle: Duration) -> Sessions {
        let mut local = LocalSessionManager::default();
        local.session_config.keep_alive = None;
        Sessions {
            local,
            limit: limit.max(1),
            idle,
            live: Arc::default(),
            closed: AtomicBool::new(false),
            shared: None,
        }
    }

    /// Also keeps the sessions in `shared`, the replicas' store (rmcp stores
    /// and restores them there; these sessions mark them active).
    pub fn shared_in(mut self, shared: Arc<PgSessions>) -> Sessions {
        self.shared = Some(shared);
        self
    }

    /// The replicas' store the sessions are kept in, if any.
    pub fn store(&self) -> Option<Arc<PgSessions>> {
        self.shared.clone()
    }

    /// Closes session `id` here (one refused after it was made).
    pub async fn close(&self, id: &str) {
        let id: SessionId = id.to_owned().into();
        if let Err(err) = rmcp::transport::streamable_http_server::SessionManager::close_session(self, &id).await {
            tracing::debug!("closing a refused session: {err}");
        }
    }

    /// Tells the replicas' store which sessions were active since `since`,
    /// and drops those no replica saw for the idle timeout.
    async fn share_activity(&self, since: Instant) {
        let Some(shared) = &self.shared else { return };
        let active: Vec<String> = self
            .lock()
            .sessions
            .iter()
            .filter(|(_, life)| life.open > 0 || life.last_active >= since)
            .map(|(id, _)| id.to_string())
            .collect();
        if let Err(reason) = shared.keep(&active).await {
            tracing::warn!("{reason}");
        }
        match shared.sweep().await {
            Ok(0) => {}
            Ok(dropped) => tracing::debug!("dropped {dropped} idle shared session(s)"),
            Err(reason) => tracing::warn!("{reason}"),
        }
    }

    /// How many sessions are live.
    pub fn len(&self) -> usize {
        self.lock().sessions.len()
    }

    /// Whether no session is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Binds session `id` to `owner`, the verified caller who started it,
    /// if it is live here and not bound yet.
    pub fn bind(&self, id: &str, owner: &str) {
        if let Some(life) = self.lock().sessions.get_mut(id)
            && life.owner.is_none()
        {
            life.owner = Some(Box::from(owner));
        }
    }

    /// Whether `owner` may use session `id`: it is bound to them, or to
    /// nobody (a session unknown here is left to rmcp, which restores it or
    /// answers 404).
    pub fn may_use(&self, id: &str, owner: &str) -> bool {
        self.lock().sessions.get(id).and_then(|life| life.owner.as_deref()).is_none_or(|bound| bound == owner)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Live> {
        crate::sync::lock(&self.live)
    }

    /// Marks activity on `id`; whether it is live.
    fn touch(&self, id: &SessionId) -> bool {
        match self.lock().sessions.get_mut(id) {
            Some(life) => {
                life.last_active = Instant::now();
                true
            }
            None => false,
        }
    }

    /// Counts a response stream of `id` as open (and its GET stream, if
    /// `listening`), or refuses a second GET stream.
    fn open(&self, id: &SessionId, listening: bool) -> Result<Open, SessionsError> {
        let mut live = self.lock();
        if let Some(life) = live.sessions.get_mut(id) {
            if listening && life.listening {
                refuse(Refusal::StreamOpen);
                return Err(SessionsError::StreamOpen);
            }
            life.listening |= listening;
            life.open += 1;
            life.last_active = Instant::now();
        }
        Ok(Open { live: self.live.clone(), id: id.clone(), listening })
    }

    /// Closes sessions idle for longer than the idle timeout, until `stop`.
    pub async fn expire_idle(self: Arc<Self>, stop: CancellationToken) {
        let tick = (self.idle / 4).clamp(Duration::from_millis(10), Duration::from_secs(30));
        let mut trimmed = Instant::now();
        let mut shared = Instant::now();
        loop {
            tokio::select! {
                () = tokio::time::sleep(tick) => {}
                () = stop.cancelled() => return,
            }
            if self.shared.is_some() && shared.elapsed() >= tick {
                let since = shared;
                shared = Instant::now();
                self.share_activity(since).await;
            }
            // Sessions closed a tick ago have finished freeing their memory by now.
            if trimmed.elapsed() >= TRIM_EVERY && self.closed.swap(false, Ordering::Relaxed) {
                trimmed = Instant::now();
                tokio::task::spawn_blocking(release_freed_memory);
            }
            let expired: Vec<SessionId> = {
                let mut live = self.lock();
                let idle = self.idle;
                let expired: Vec<SessionId> = live
                    .sessions
                    .iter()
                    .filter(|(_, life)| life.open == 0 && life.last_active.elapsed() >= idle)
                    .map(|(id, _)| id.clone())
                    .collect();
                for id in &expired {
                    live.sessions.remove(id);
                }
                expired
            };
            if !expired.is_empty() {
                tracing::debug!("closing {} idle session(s)", expired.len());
                self.closed.store(true, Ordering::Relaxed);
            }
            for id in expired {
                if let Err(err) = self.local.close_session(&id).await {
                    tracing::debug!("closing idle session {id}: {err}");
                }
            }
        }
    }
}

/// Hands memory back to the system at most this often.
const TRIM_EVERY: Duration = Duration::from_secs(1);

/// Returns freed memory to the system now rather than later: mimalloc's
/// (the allocator of the `carte` binary; it would purge it on its own about a
/// second after it is freed, on its next use) and glibc's (what C libraries such
/// as SQLite allocate). Blocking: it walks every arena.
pub fn release_freed_memory() {
    // SAFETY: mi_collect has no preconditions and only releases memory that
    // is free (in a program whose allocator is not mimalloc, none).
    #[allow(unsafe_code)]
    unsafe {
        libmimalloc_sys::mi_collect(true)
    };
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: malloc_trim has no preconditions; it takes each arena's lock
        // and only releases memory that is free.
        #[allow(unsafe_code)]
        let released = unsafe { libc::malloc_trim(0) };
        tracing::debug!("released freed memory to the system: {}", released == 1);
    }
}

/// An open response stream of a session; closing it counts as activity.
struct Open {
    live: Arc<Mutex<Live>>,
    id: SessionId,
    listening: bool,
}

impl Drop for Open {
    fn drop(&mut self) {
        let mut live = crate::sync::lock(&self.live);
        if let Some(life) = live.sessions.get_mut(&self.id) {
            life.open = life.open.saturating_sub(1);
            life.listening &= !self.listening;
            life.last_active = Instant::now();
        }
    }
}

/// A session being created: counted against the cap until it is live (or
/// its creation failed or was abandoned).
struct Reservation<'a> {
    live: &'a Mutex<Live>,
    created: Option<SessionId>,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        let mut live = crate::sync::lock(self.live);
        live.creating -= 1;
        if let Some(id) = self.created.take() {
            live.sessions.insert(id, Life { last_active: Instant::now(), open: 0, listening: false, owner: None });
        }
    }
}

/// A response stream that counts as open until dropped.
struct Counted<S> {
    stream: Pin<Box<S>>,
    _open: Open,
}

impl<S: Stream> Stream for Counted<S> {
    type Item = S::Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<S::Item>> {
        self.stream.as_mut().poll_next(cx)
    }
}

impl SessionManager for Sessions {
    type Error = SessionsError;
    type Transport = <LocalSessionManager as SessionManager>::Transport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), SessionsError> {
        {
            let mut live = self.lock();
            if live.sessions.len() + live.creating >= self.limit {
                refuse(Refusal::Full(self.limit));
                return Err(SessionsError::Full(self.limit));
            }
            live.creating += 1;
        }
        let mut reservation = Reservation { live: &self.live, created: None };
        let (id, transport) = self.local.create_session().await?;
        reservation.created = Some(id.clone());
        drop(reservation);
        Ok((id, transport))
    }

    async fn restore_session(&self, id: SessionId) -> Result<RestoreOutcome<Self::Transport>, SessionsError> {
        {
            let mut live = self.lock();
            if live.sessions.contains_key(&id) {
                return Ok(RestoreOutcome::AlreadyPresent);
            }
            if live.sessions.len() + live.creating >= self.limit {
                refuse(Refusal::Full(self.limit));
                return Err(SessionsError::Full(self.limit));
            }
            live.creating += 1;
        }
        let mut reservation = Reservation { live: &self.live, created: None };
        let restored = self.local.restore_session(id.clone()).await?;
        if matches!(restored, RestoreOutcome::Restored(_)) {
            reservation.created = Some(id);
        }
        drop(reservation);
        Ok(restored)
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, SessionsError> {
        self.touch(id);
        Ok(self.local.initialize_session(id, message).await?)
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, SessionsError> {
        Ok(self.touch(id))
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), SessionsError> {
        if self.lock().sessions.remove(id).is_some() {
            self.closed.store(true, Ordering::Relaxed);
        }
        Ok(self.local.close_session(id).await?)
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, SessionsError> {
        let open = self.open(id, false)?;
        let stream = self.local.create_stream(id, message).await?;
        Ok(Counted { stream: Box::pin(stream), _open: open })
    }

    async fn accept_message(&self, id: &SessionId, message: ClientJsonRpcMessage) -> Result<(), SessionsError> {
        self.touch(id);
        Ok(self.local.accept_message(id, message).await?)
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, SessionsError> {
        let open = self.open(id, true)?;
        let stream = self.local.create_standalone_stream(id).await?;
        Ok(Counted { stream: Box::pin(stream), _open: open })
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, SessionsError> {
        // rmcp's event ids: `index` on the GET stream, `index/request` on a reply's stream.
        let open = self.open(id, !last_event_id.contains('/'))?;
        let stream = self.local.resume(id, last_event_id).await?;
        Ok(Counted { stream: Box::pin(stream), _open: open })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_cap_counts_live_sessions_and_refusals_are_reported() {
        let sessions = Sessions::new(2, Duration::from_secs(60));
        let (first, _a) = sessions.create_session().await.unwrap();
        let (_second, _b) = sessions.create_session().await.unwrap();
        let (refused, refusal) = watch(sessions.create_session()).await;
        assert!(matches!(refused, Err(SessionsError::Full(2))));
        assert_eq!(refusal, Some(Refusal::Full(2)));
        sessions.close_session(&first).await.unwrap();
        let (again, refusal) = watch(sessions.create_session()).await;
        assert!(again.is_ok());
        assert_eq!(refusal, None);
    }

    #[tokio::test]
    async fn a_restored_session_counts_against_the_cap_and_is_restored_once() {
        let sessions = Sessions::new(1, Duration::from_secs(60));
        let (first, _a) = sessions.create_session().await.unwrap();
        let elsewhere = SessionId::from("started-on-another-replica");
        let (refused, refusal) = watch(sessions.restore_session(elsewhere.clone())).await;
        assert!(matches!(refused, Err(SessionsError::Full(1))));
        assert_eq!(refusal, Some(Refusal::Full(1)));
        sessions.close_session(&first).await.unwrap();
        let restored = sessions.restore_session(elsewhere.clone()).await.unwrap();
        assert!(matches!(restored, RestoreOutcome::Restored(_)));
        assert!(sessions.touch_free(&elsewhere), "live, and counted");
        assert!(matches!(sessions.restore_session(elsewhere).await.unwrap(), RestoreOutcome::AlreadyPresent));
        assert_eq!(sessions.len(), 1);
    }

    #[tokio::test]
    async fn one_get_stream_per_session() {
        let sessions = Sessions::new(4, Duration::from_secs(60));
        let (id, _transport) = sessions.create_session().await.unwrap();
        let first = sessions.open(&id, true).unwrap();
        let (second, refusal) = watch(async { sessions.open(&id, true).map(drop) }).await;
        assert!(matches!(second, Err(SessionsError::StreamOpen)));
        assert_eq!(refusal, Some(Refusal::StreamOpen));
        let reply = sessions.open(&id, false);
        assert!(reply.is_ok(), "replies are not GET streams");
        drop(first);
        assert!(sessions.open(&id, true).is_ok(), "the stream closed, another may open");
    }

    #[tokio::test]
    async fn idle_sessions_expire_but_not_while_a_stream_is_open() {
        let sessions = Arc::new(Sessions::new(4, Duration::from_millis(40)));
        let (idle, _a) = sessions.create_session().await.unwrap();
        let (listening, _b) = sessions.create_session().await.unwrap();
        let stream = sessions.open(&listening, true).unwrap();
        let stop = CancellationToken::new();
        let reaper = tokio::spawn(sessions.clone().expire_idle(stop.clone()));
        let deadline = Instant::now() + Duration::from_secs(20);
        while sessions.touch_free(&idle) {
            assert!(Instant::now() < deadline, "the idle session never expired");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(sessions.touch_free(&listening), "a session with an open GET stream is kept");
        drop(stream);
        while sessions.touch_free(&listening) {
            assert!(Instant::now() < deadline, "the session did not expire after its stream closed");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        stop.cancel();
        reaper.await.unwrap();
    }

    impl Sessions {
        /// Whether `id` is live, without marking activity.
        fn touch_free(&self, id: &SessionId) -> bool {
            self.lock().sessions.contains_key(id)
        }
    }
}
