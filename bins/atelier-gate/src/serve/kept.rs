//! A door's answers kept for a moment: connections to the same planned host within
//! [`ANSWER_LIFETIME`] of one lookup reuse its answers instead of each asking the resolver
//! again.
//!
//! The system resolver gives no lifetimes, and asking it costs a trip to a blocking thread and
//! back even when the name is in `/etc/hosts` (and a round trip to a DNS server when it is
//! not). An agent opens its connections in bursts, so most of a burst's lookups would return
//! what the first one did. Nothing about the vetting changes: every connection still checks
//! every answer against the door's policy and dials only vetted addresses, so a kept answer is
//! never dialled unvetted. What is kept is only ever a successful, non-empty answer for a host
//! on the door's plan (the caller resolves nothing else), so the map is as small as the plan.
//! A host whose every address failed to dial is forgotten at once, so the next connection
//! asks again rather than redialling the same dead addresses.

use std::collections::HashMap;
use std::io;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use super::{BoxFuture, Resolver};

/// How long one lookup's answers serve later connections. Well below the time to live of any
/// name a provider publishes (the shortest in common use are tens of seconds), so a kept answer
/// is never one the name's own DNS would already have retired.
pub const ANSWER_LIFETIME: Duration = Duration::from_secs(1);

/// A [`Resolver`] in front of another that keeps each host's answers for `lifetime`.
pub struct KeptAnswers {
    inner: Arc<dyn Resolver>,
    lifetime: Duration,
    kept: Mutex<HashMap<String, Kept>>,
}

struct Kept {
    at: Instant,
    answers: Vec<IpAddr>,
}

impl KeptAnswers {
    /// Keeps `inner`'s answers for `lifetime` each.
    pub fn new(inner: Arc<dyn Resolver>, lifetime: Duration) -> KeptAnswers {
        KeptAnswers {
            inner,
            lifetime,
            kept: Mutex::new(HashMap::new()),
        }
    }

    fn fresh(&self, host: &str) -> Option<Vec<IpAddr>> {
        let kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        kept.get(host)
            .filter(|kept| kept.at.elapsed() < self.lifetime)
            .map(|kept| kept.answers.clone())
    }

    fn keep(&self, host: &str, at: Instant, answers: &[IpAddr]) {
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        kept.insert(
            host.to_owned(),
            Kept {
                at,
                answers: answers.to_vec(),
            },
        );
    }
}

impl Resolver for KeptAnswers {
    fn resolve<'a>(&'a self, host: &'a str) -> BoxFuture<'a, io::Result<Vec<IpAddr>>> {
        Box::pin(async move {
            if let Some(answers) = self.fresh(host) {
                return Ok(answers);
            }
            // The answer's age counts from when it was asked for, not from when it came back.
            let asked = Instant::now();
            let answers = self.inner.resolve(host).await?;
            if !answers.is_empty() {
                self.keep(host, asked, &answers);
            }
            Ok(answers)
        })
    }

    fn forget(&self, host: &str) {
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        kept.remove(host);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// Answers `198.18.0.<n>` for the n-th lookup of any name but `gone.example`, which fails,
    /// and `empty.example`, which has no addresses.
    #[derive(Default)]
    struct Counting(AtomicUsize);

    impl Resolver for Counting {
        fn resolve<'a>(&'a self, host: &'a str) -> BoxFuture<'a, io::Result<Vec<IpAddr>>> {
            let n = self.0.fetch_add(1, Ordering::SeqCst) + 1;
            Box::pin(async move {
                match host {
                    "gone.example" => Err(io::Error::other("no such name")),
                    "empty.example" => Ok(Vec::new()),
                    _ => Ok(vec![IpAddr::from([198, 18, 0, n as u8])]),
                }
            })
        }
    }

    fn kept() -> (Arc<Counting>, KeptAnswers) {
        let inner = Arc::new(Counting::default());
        (inner.clone(), KeptAnswers::new(inner, ANSWER_LIFETIME))
    }

    fn lookups(inner: &Counting) -> usize {
        inner.0.load(Ordering::SeqCst)
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_serves_its_host_for_its_lifetime_and_no_longer() {
        let (inner, kept) = kept();
        let first = kept.resolve("a.example").await.unwrap();
        tokio::time::advance(ANSWER_LIFETIME - Duration::from_millis(1)).await;
        assert_eq!(kept.resolve("a.example").await.unwrap(), first);
        assert_eq!(lookups(&inner), 1, "a fresh answer is not asked for again");

        let other = kept.resolve("b.example").await.unwrap();
        assert_ne!(other, first, "each host has its own answer");
        assert_eq!(lookups(&inner), 2);

        tokio::time::advance(Duration::from_millis(1)).await;
        let renewed = kept.resolve("a.example").await.unwrap();
        assert_ne!(
            renewed, first,
            "an answer as old as its lifetime is asked for again"
        );
        assert_eq!(lookups(&inner), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn failures_and_empty_answers_are_never_kept() {
        let (inner, kept) = kept();
        for _ in 0..2 {
            assert!(kept.resolve("gone.example").await.is_err());
            assert!(kept.resolve("empty.example").await.unwrap().is_empty());
        }
        assert_eq!(lookups(&inner), 4, "every connection asks again");
    }

    #[tokio::test(start_paused = true)]
    async fn a_forgotten_host_is_asked_for_at_once() {
        let (inner, kept) = kept();
        let first = kept.resolve("a.example").await.unwrap();
        kept.forget("a.example");
        assert_ne!(kept.resolve("a.example").await.unwrap(), first);
        assert_eq!(lookups(&inner), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_zero_lifetime_keeps_nothing() {
        let inner = Arc::new(Counting::default());
        let kept = KeptAnswers::new(inner.clone(), Duration::ZERO);
        kept.resolve("a.example").await.unwrap();
        kept.resolve("a.example").await.unwrap();
        assert_eq!(lookups(&inner), 2);
    }
}
