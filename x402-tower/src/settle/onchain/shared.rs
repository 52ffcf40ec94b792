//! Answers of the node that concurrent settlements share (the chain id, the fee quote), asked for by one of
//! them at a time.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::Mutex;

use super::RpcError;

/// The last attempt at one answer, and how many times answers were forgotten.
#[derive(Debug)]
pub(crate) struct Shared<T> {
    last: Mutex<Option<Kept<T>>>,
    /// Bumped by [`Shared::forget`]: an answer kept under an older generation is not served again.
    generation: AtomicU64,
}

/// One attempt's answer: when it ended, under which generation it was kept, and what it was.
#[derive(Debug)]
struct Kept<T> {
    ended: Instant,
    generation: u64,
    answer: Result<T, RpcError>,
}

impl<T: Clone> Shared<T> {
    pub(crate) fn new() -> Self {
        Shared {
            last: Mutex::new(None),
            generation: AtomicU64::new(0),
        }
    }

    /// The last answer if it is a success younger than `fresh_for` (`None`: for ever), else `ask`'s.
    ///
    /// The lock is held while asking, so callers that come meanwhile wait for that one attempt and take its
    /// answer, success or error, whatever its age: nobody waits longer than one attempt (one RPC timeout),
    /// even when the node does not answer and many settlements are queued. Asking in turn would add a
    /// timeout per queued caller.
    pub(crate) async fn get<F, Fut>(
        &self,
        fresh_for: Option<Duration>,
        ask: F,
    ) -> Result<T, RpcError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, RpcError>>,
    {
        let waiting_since = Instant::now();
        let mut last = self.last.lock().await;
        let generation = self.generation.load(Ordering::Acquire);
        if let Some(kept) = &*last
            && kept.generation == generation
        {
            if kept.ended >= waiting_since {
                return kept.answer.clone();
            }
            if let Ok(value) = &kept.answer
                && fresh_for.is_none_or(|f| kept.ended.elapsed() < f)
            {
                return Ok(value.clone());
            }
        }
        let answer = ask().await;
        *last = Some(Kept {
            ended: Instant::now(),
            // Read after the answer came: a forget during the ask was about an older answer.
            generation: self.generation.load(Ordering::Acquire),
            answer: answer.clone(),
        });
        answer
    }

    /// Forgets the answer kept now, so the next caller asks. Never waits (the sender calling this holds the
    /// relayer's nonce lock) and is never lost to a caller holding the lock at that moment.
    pub(crate) fn forget(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;

    use tokio::sync::Notify;

    use super::*;

    /// Asks answer `n` (the ask's number) after `gate`, when given.
    fn counting(
        asks: &Arc<AtomicUsize>,
        gate: Option<Arc<Notify>>,
    ) -> impl Future<Output = Result<usize, RpcError>> + use<> {
        let asks = asks.clone();
        async move {
            if let Some(gate) = gate {
                gate.notified().await;
            }
            Ok(asks.fetch_add(1, Ordering::SeqCst) + 1)
        }
    }

    #[tokio::test]
    async fn a_kept_answer_serves_its_ttl_and_a_forgotten_one_does_not() {
        let shared = Shared::new();
        let asks = Arc::new(AtomicUsize::new(0));
        let ttl = Some(Duration::from_secs(3600));
        assert_eq!(shared.get(ttl, || counting(&asks, None)).await.unwrap(), 1);
        assert_eq!(shared.get(ttl, || counting(&asks, None)).await.unwrap(), 1);
        shared.forget();
        assert_eq!(shared.get(ttl, || counting(&asks, None)).await.unwrap(), 2);
        // A zero TTL never serves a finished answer again.
        let zero = Some(Duration::ZERO);
        assert_eq!(shared.get(zero, || counting(&asks, None)).await.unwrap(), 3);
        assert_eq!(shared.get(zero, || counting(&asks, None)).await.unwrap(), 4);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn callers_waiting_for_an_ask_take_its_answer_even_when_forgotten_meanwhile() {
        let shared = Arc::new(Shared::new());
        let asks = Arc::new(AtomicUsize::new(0));
        let gate = Arc::new(Notify::new());
        let first = {
            let (shared, asks, gate) = (shared.clone(), asks.clone(), gate.clone());
            tokio::spawn(async move {
                shared
                    .get(Some(Duration::ZERO), || counting(&asks, Some(gate)))
                    .await
            })
        };
        // The first ask is under way (it holds the lock) before the others come.
        while shared.last.try_lock().is_ok() {
            tokio::task::yield_now().await;
        }
        let (started, mut starts) = tokio::sync::mpsc::unbounded_channel();
        let waiting: Vec<_> = (0..3)
            .map(|_| {
                let (shared, asks, started) = (shared.clone(), asks.clone(), started.clone());
                tokio::spawn(async move {
                    // Sent just before `get` notes when it began waiting (no await in between).
                    let _ = started.send(());
                    shared
                        .get(Some(Duration::ZERO), || counting(&asks, None))
                        .await
                })
            })
            .collect();
        for _ in 0..3 {
            starts.recv().await.unwrap();
        }
        // A send refused for an older quote forgets it while this ask is in flight: the ask's answer is newer.
        shared.forget();
        tokio::time::sleep(Duration::from_millis(20)).await;
        gate.notify_one();
        assert_eq!(first.await.unwrap().unwrap(), 1);
        for w in waiting {
            assert_eq!(w.await.unwrap().unwrap(), 1, "the one attempt's answer");
        }
        assert_eq!(asks.load(Ordering::SeqCst), 1);
    }
}
