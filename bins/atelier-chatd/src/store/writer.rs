//! Group commit: the store's durable writes (message appends, a turn's user message, usage
//! bookings, audit records) queue for one writer thread, which runs every write that is
//! waiting in a single transaction and commits them with one fsync. Each write runs in a
//! savepoint of its own, so a refused one (a deleted conversation, say) leaves the others in.
//! A caller is answered only after the commit that holds its write returned: an answered
//! write is durable, and a `kill -9` at any moment loses only writes nobody was told about.
//!
//! The writer takes whatever queued while the previous commit was syncing, without waiting
//! for more: a lone write commits at once, and concurrent ones share the fsync that they
//! would otherwise each wait for in turn.

use std::future::Future;
use std::num::NonZeroUsize;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::thread::JoinHandle;

use rusqlite::Connection;
use tokio::sync::oneshot;

use super::StoreError;

/// The most writes one transaction takes: bounds how long the first of them waits for the
/// others' statements (each a few tens of microseconds) before its commit starts.
pub const DEFAULT_MAX_BATCH: NonZeroUsize = match NonZeroUsize::new(256) {
    Some(limit) => limit,
    None => NonZeroUsize::MIN,
};

/// One write as the writer thread sees it, whatever it returns.
trait Job: Send {
    /// Runs the write in `connection` (the batch's transaction, inside the write's own
    /// savepoint) and keeps its outcome; true when it succeeded, so its savepoint is kept.
    fn run(&mut self, connection: &Connection) -> bool;

    /// Answers the caller once the batch ended: the write's own outcome when the batch
    /// committed (or when the write itself failed), else why the batch did not commit.
    fn answer(self: Box<Self>, batch: &Result<(), Failure>);

    /// Returns true if and only if the write may change a conversation or its messages, so
    /// its batch counts as a change (see `Store::unchanged_since`).
    fn tracked(&self) -> bool;
}

/// Why a batch did not commit, told to each of its writes.
#[derive(Debug, Clone)]
enum Failure {
    /// SQLite refused a savepoint or the commit.
    Sqlite(Arc<rusqlite::Error>),
    /// A panic elsewhere under the connection's lock: nothing can be written any more.
    Poisoned,
}

/// A write returning `T`, and where its outcome goes.
struct Write<T, F> {
    work: Option<F>,
    outcome: Option<Result<T, StoreError>>,
    reply: Reply<T>,
    tracked: bool,
}

/// Who is told a write's outcome.
enum Reply<T> {
    /// A thread blocked in [`Writer::write`].
    Waiting(SyncSender<Result<T, StoreError>>),
    /// A task awaiting the [`Committed`] of [`Writer::submit`].
    Awaited(oneshot::Sender<Result<T, StoreError>>),
    /// Nobody ([`Writer::write_later`]).
    Nobody,
}

/// A write handed to the writer thread, awaited by a task instead of a blocked thread: it
/// resolves once the commit that holds the write returned (or with why it was not stored).
pub struct Committed<T>(Pending<T>);

enum Pending<T> {
    Queued(oneshot::Receiver<Result<T, StoreError>>),
    Refused(Option<StoreError>),
}

impl<T> Committed<T> {
    /// A write that failed before it was queued.
    pub(super) fn refused(error: StoreError) -> Self {
        Self(Pending::Refused(Some(error)))
    }
}

impl<T> Future for Committed<T> {
    type Output = Result<T, StoreError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match &mut self.get_mut().0 {
            Pending::Queued(answer) => Pin::new(answer)
                .poll(cx)
                .map(|answered| answered.unwrap_or(Err(StoreError::WriterGone))),
            Pending::Refused(error) => {
                Poll::Ready(Err(error.take().unwrap_or(StoreError::WriterGone)))
            }
        }
    }
}

impl<T, F> Job for Write<T, F>
where
    T: Send,
    F: FnOnce(&Connection) -> Result<T, StoreError> + Send,
{
    fn run(&mut self, connection: &Connection) -> bool {
        let Some(work) = self.work.take() else {
            return false;
        };
        let outcome = work(connection);
        let succeeded = outcome.is_ok();
        self.outcome = Some(outcome);
        succeeded
    }

    fn answer(self: Box<Self>, batch: &Result<(), Failure>) {
        let outcome = match (self.outcome, batch) {
            // Its own refusal stands either way: it wrote nothing.
            (Some(Err(refused)), _) => Err(refused),
            (Some(Ok(value)), Ok(())) => Ok(value),
            (_, Err(Failure::Sqlite(error))) => Err(StoreError::Uncommitted(Arc::clone(error))),
            (_, Err(Failure::Poisoned)) => Err(StoreError::Poisoned),
            // Committed without having run: the batch stopped before it, which it reports.
            (None, Ok(())) => Err(StoreError::WriterGone),
        };
        // A caller that went away (its thread ended, its task was dropped) needs no answer.
        match self.reply {
            Reply::Waiting(reply) => {
                let _ = reply.send(outcome);
            }
            Reply::Awaited(reply) => {
                let _ = reply.send(outcome);
            }
            Reply::Nobody => {}
        }
    }

    fn tracked(&self) -> bool {
        self.tracked
    }
}

// === impl Writer ===

/// The handle to the writer thread; dropping it lets the thread finish the queue and end.
pub(super) struct Writer {
    queue: Option<Sender<Box<dyn Job>>>,
    thread: Option<JoinHandle<()>>,
    commits: Arc<AtomicU64>,
    /// Writes handed to the thread and not answered yet.
    in_flight: AtomicUsize,
}

impl Writer {
    /// Starts the writer thread over `connection`, committing at most `max_batch` writes at a
    /// time and counting in `changes` each batch that may change a conversation, once its
    /// commit returned.
    pub(super) fn start(
        connection: Arc<Mutex<Connection>>,
        max_batch: NonZeroUsize,
        changes: Arc<AtomicU64>,
    ) -> Result<Self, StoreError> {
        let (queue, jobs) = mpsc::channel();
        let commits = Arc::new(AtomicU64::new(0));
        let counted = Arc::clone(&commits);
        let thread = std::thread::Builder::new()
            .name("chatd-store-writer".to_owned())
            .spawn(move || drain(&connection, &jobs, max_batch.get(), &counted, &changes))
            .map_err(StoreError::WriterThread)?;
        Ok(Self {
            queue: Some(queue),
            thread: Some(thread),
            commits,
            in_flight: AtomicUsize::new(0),
        })
    }

    /// How many batches have committed so far.
    pub(super) fn commits(&self) -> u64 {
        self.commits.load(Ordering::Relaxed)
    }

    /// Runs `work` in the next group commit and returns its outcome once that commit returned.
    pub(super) fn write<T, F>(&self, work: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let (reply, answer) = mpsc::sync_channel(1);
        self.queue(work, true, Reply::Waiting(reply))?;
        // Counted once queued, so a count of n means n writes are in the queue or the batch.
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        let answered = answer.recv().map_err(|_| StoreError::WriterGone);
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        answered?
    }

    /// Queues `work`, which changes no conversation and no message, for the next group commit
    /// and returns at once: whatever is queued after it commits in the same batch or a later
    /// one. Nobody is told its outcome, so `work` reports its own failure.
    pub(super) fn write_later<F>(&self, work: F) -> Result<(), StoreError>
    where
        F: FnOnce(&Connection) -> Result<(), StoreError> + Send + 'static,
    {
        self.queue(work, false, Reply::Nobody)
    }

    /// [`Writer::write`] for a task: queues `work` at once, without a thread to block, and
    /// returns what resolves once the commit that holds it returned.
    pub(super) fn submit<T, F>(&self, work: F) -> Committed<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        match self.queue(work, true, Reply::Awaited(reply)) {
            Ok(()) => Committed(Pending::Queued(answer)),
            Err(error) => Committed::refused(error),
        }
    }

    /// Hands `work` to the writer thread, its outcome for `reply`.
    fn queue<T, F>(&self, work: F, tracked: bool, reply: Reply<T>) -> Result<(), StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let job = Box::new(Write {
            work: Some(work),
            outcome: None,
            reply,
            tracked,
        });
        self.queue
            .as_ref()
            .ok_or(StoreError::WriterGone)?
            .send(job)
            .map_err(|_| StoreError::WriterGone)
    }

    /// How many writes are queued or being committed, their callers waiting.
    #[cfg(test)]
    fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::SeqCst)
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        // Closing the queue ends the thread once it is empty; joining it closes the connection
        // before whoever dropped the store opens the file again.
        drop(self.queue.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The writer thread: takes the first write waiting, everything queued behind it (up to
/// `max_batch`), commits them together, answers them all, and again until the queue closes.
fn drain(
    connection: &Mutex<Connection>,
    jobs: &Receiver<Box<dyn Job>>,
    max_batch: usize,
    commits: &AtomicU64,
    changes: &AtomicU64,
) {
    while let Ok(first) = jobs.recv() {
        let mut batch = vec![first];
        while batch.len() < max_batch {
            match jobs.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let outcome = match connection.lock() {
            Ok(mut connection) => {
                let committed = commit(&mut connection, &mut batch)
                    .map_err(|error| Failure::Sqlite(Arc::new(error)));
                // Counted once the commit returned, whatever its outcome, and before anyone
                // is answered: a read that starts after taking the count sees the batch.
                if batch.iter().any(|job| job.tracked()) {
                    changes.fetch_add(1, Ordering::SeqCst);
                }
                committed
            }
            Err(_) => Err(Failure::Poisoned),
        };
        match &outcome {
            Ok(()) => {
                commits.fetch_add(1, Ordering::Relaxed);
            }
            Err(error) => tracing::error!(?error, writes = batch.len(), "a group commit failed"),
        }
        for job in batch {
            job.answer(&outcome);
        }
    }
}

/// Runs `batch` in one transaction, each write in its own savepoint, and commits it.
fn commit(connection: &mut Connection, batch: &mut [Box<dyn Job>]) -> rusqlite::Result<()> {
    let mut transaction = connection.transaction()?;
    for job in batch.iter_mut() {
        let mut savepoint = transaction.savepoint()?;
        if !job.run(&savepoint) {
            savepoint.rollback()?;
        }
        savepoint.commit()?;
    }
    transaction.commit()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn writer(max_batch: usize) -> (Arc<Mutex<Connection>>, Writer) {
        let connection = Connection::open_in_memory().unwrap();
        connection
            .execute_batch("CREATE TABLE t (n INTEGER NOT NULL CHECK (n >= 0))")
            .unwrap();
        let connection = Arc::new(Mutex::new(connection));
        let writer = Writer::start(
            Arc::clone(&connection),
            NonZeroUsize::new(max_batch).unwrap(),
            Arc::new(AtomicU64::new(0)),
        )
        .unwrap();
        (connection, writer)
    }

    fn count(connection: &Mutex<Connection>) -> i64 {
        connection
            .lock()
            .unwrap()
            .query_row("SELECT count(*) FROM t", [], |row| row.get(0))
            .unwrap()
    }

    #[test]
    fn a_lone_write_commits_at_once() {
        let (connection, writer) = writer(64);
        let answer = writer.write(|connection| {
            connection.execute("INSERT INTO t (n) VALUES (7)", [])?;
            Ok("stored")
        });
        assert_eq!(answer.unwrap(), "stored");
        assert_eq!(count(&connection), 1);
        assert_eq!(writer.commits(), 1);
    }

    #[tokio::test]
    async fn a_submitted_write_resolves_once_committed_with_its_own_outcome() {
        let (connection, writer) = writer(64);
        let committed = writer.submit(|connection| {
            connection.execute("INSERT INTO t (n) VALUES (3)", [])?;
            Ok(3)
        });
        assert_eq!(committed.await.unwrap(), 3);
        assert_eq!(count(&connection), 1);
        let refused = writer.submit(|connection| {
            connection.execute("INSERT INTO t (n) VALUES (-1)", [])?;
            Ok(())
        });
        assert!(matches!(refused.await, Err(StoreError::Sqlite(_))));
        assert_eq!(count(&connection), 1);
        assert_eq!(writer.commits(), 2);
    }

    #[test]
    fn concurrent_writes_share_commits_and_each_gets_its_own_answer() {
        let (connection, writer) = writer(8);
        let writer = Arc::new(writer);
        let held = connection.lock().unwrap();
        let threads: Vec<_> = (0_i64..40)
            .map(|n| {
                let writer = Arc::clone(&writer);
                std::thread::spawn(move || {
                    writer.write(move |connection| {
                        connection.execute("INSERT INTO t (n) VALUES (?1)", [n])?;
                        if n % 5 == 4 {
                            // Refused by the CHECK after a row went in: this write is rolled
                            // back whole, and only it.
                            connection.execute("INSERT INTO t (n) VALUES (-1)", [])?;
                        }
                        Ok(n * 10)
                    })
                })
            })
            .collect();
        // Every write is queued (the thread holds the first few, waiting for the lock) before
        // the lock is given back, so how they are batched depends on no timing.
        let waited = std::time::Instant::now();
        while writer.in_flight() < 40 {
            assert!(waited.elapsed() < std::time::Duration::from_secs(60));
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        drop(held);
        for (n, thread) in (0_i64..).zip(threads) {
            match thread.join().unwrap() {
                Ok(answer) => {
                    assert_ne!(n % 5, 4);
                    assert_eq!(answer, n * 10);
                }
                Err(error) => {
                    assert_eq!(n % 5, 4, "{error}");
                    assert!(matches!(error, StoreError::Sqlite(_)));
                }
            }
        }
        assert_eq!(count(&connection), 32);
        let refused: i64 = connection
            .lock()
            .unwrap()
            .query_row("SELECT count(*) FROM t WHERE n % 5 = 4", [], |row| {
                row.get(0)
            })
            .unwrap();
        assert_eq!(refused, 0);
        // Forty writes queued behind the held lock: the batch the thread took before it waited
        // (one to eight writes), then the rest in batches of eight.
        assert!((5..=6).contains(&writer.commits()), "{}", writer.commits());
    }
}
